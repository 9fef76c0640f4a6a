"""Install the locked pip layer into an environment, every file checked against the lock's sha256.

pip does the installing (`<python> -m pip install --no-deps --require-hashes -r <lock>`): with `--no-deps`
nothing outside the lock can come in, and with `--require-hashes` a wheel whose bytes differ from what was
locked is refused before anything is installed. pip's refusal is a screenful; this module turns it into
one line naming the wheel and both hashes. Offline (bundles), pip reads only the wheelhouse
(`--no-index --find-links`).
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence, Union

from envbuild.errors import EnvbuildError
from envbuild.hashing import sha256_file
from envbuild.leftovers import tmp_prefix
from envbuild.lock.pip_lock import isolated_pip_env
from envbuild.lock.pip_lockfile import LockedWheel, read_pip_lock

_MISMATCH_HEAD = re.compile(r"^\s+(\S+==\S+) from (\S+)")
_EXPECTED = re.compile(r"Expected(?:\s+sha256|\s+or)\s+([0-9a-f]{64})")
_GOT = re.compile(r"Got\s+([0-9a-f]{64})")


class WheelHashMismatch(EnvbuildError):
    """A wheel's bytes are not the ones the lock pinned (tampered, truncated or swapped)."""

    def __init__(self, filename: str, requirement: str, expected: Sequence[str], got: str):
        self.filename, self.requirement, self.expected, self.got = filename, requirement, list(expected), got
        super().__init__(f"{filename}: sha256 {got} is not the locked hash of {requirement} "
                         f"(expected {' or '.join(expected)}); the wheel was refused and nothing was installed")


@dataclass(frozen=True)
class InstalledWheel:
    name: str
    version: str
    sha256: str
    file: str  # the wheel's file name


def parse_hash_mismatch(output: str) -> Optional[WheelHashMismatch]:
    """The first wheel pip refused for a hash mismatch, from pip's output; None if pip said no such thing."""
    if "DO NOT MATCH THE HASHES" not in output:
        return None
    lines = output.splitlines()
    for i, line in enumerate(lines):
        head = _MISMATCH_HEAD.match(line)
        if not head:
            continue
        expected: List[str] = []
        for follow in lines[i + 1:i + 12]:
            expected += _EXPECTED.findall(follow)
            got = _GOT.search(follow)
            if got:
                filename = urllib.parse.unquote(head.group(2).split("#", 1)[0].rsplit("/", 1)[-1])
                return WheelHashMismatch(filename, head.group(1), expected, got.group(1))
    return None


def install_locked(
    python: Union[str, Path],
    lock_file: Union[str, Path],
    find_links: Sequence[Union[str, Path]] = (),
    index_urls: Sequence[str] = (),
    offline: bool = False,
) -> List[InstalledWheel]:
    """Install every entry of `lock_file` with `python`'s pip; return what was installed.

    `index_urls` (first = --index-url, the rest --extra-index-url) are used only when not `offline`;
    with none given, or offline, pip reads only `find_links` (a bundle's wheelhouse). Online, entries the
    lock took from a direct URL or a local folder are fetched (hash-checked) first, since no index has them.
    Raises
    WheelHashMismatch naming the wheel when a file differs from its locked hash, EnvbuildError otherwise.
    """
    cmd = [str(python), "-m", "pip", "install", "--no-deps", "--require-hashes", "--only-binary=:all:",
           "--no-input", "--disable-pip-version-check", "--progress-bar", "off"]
    if offline or not index_urls:
        cmd.append("--no-index")
    else:
        cmd += ["--index-url", index_urls[0]]
        for url in index_urls[1:]:
            cmd += ["--extra-index-url", url]
    for link in find_links:
        cmd += ["--find-links", str(link)]
    with tempfile.TemporaryDirectory(prefix=tmp_prefix("envbuild-pip")) as tmp:
        if not offline:  # wheels locked from a direct URL or a local folder are on no index: fetch them
            direct = [e for e in read_pip_lock(lock_file) if e.index in ("url", "find-links")]
            for entry in direct:
                fetch_locked_wheel(entry, Path(tmp) / "direct")
            if direct:
                cmd += ["--find-links", str(Path(tmp) / "direct")]
        report_path = Path(tmp) / "report.json"
        cmd += ["--report", str(report_path), "-r", str(lock_file)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=isolated_pip_env())
        if proc.returncode != 0:
            output = proc.stdout + "\n" + proc.stderr
            mismatch = parse_hash_mismatch(output)
            if mismatch is not None:
                raise mismatch
            errors = [ln.strip() for ln in output.splitlines() if ln.strip().startswith("ERROR:")]
            raise EnvbuildError(f"pip could not install {lock_file}: " + ("; ".join(errors[-3:]) or output.strip()[-600:]))
        report = json.loads(report_path.read_text(encoding="utf-8"))
    installed = []
    for item in report.get("install", []):
        info = item.get("download_info") or {}
        archive = info.get("archive_info") or {}
        sha = (archive.get("hashes") or {}).get("sha256") or str(archive.get("hash", "")).partition("=")[2]
        installed.append(InstalledWheel(name=item["metadata"]["name"], version=item["metadata"]["version"],
                                        sha256=sha, file=urllib.parse.unquote(info.get("url", "").rsplit("/", 1)[-1])))
    return sorted(installed, key=lambda w: w.name.lower())


def fetch_locked_wheel(entry: LockedWheel, dest: Union[str, Path]) -> Path:
    """Copy or download the file a lock entry names into `dest`, verified against the entry's hashes.

    Used by `envbuild pack` to fill a bundle's wheelhouse, and by create to fetch direct-URL wheels
    before an offline install. An existing file with a good hash is kept; a bad one is replaced.
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / entry.filename
    if target.is_file() and sha256_file(target) in entry.hashes:
        return target
    partial = target.with_name(target.name + ".part")
    with urllib.request.urlopen(entry.url, timeout=300) as resp, open(partial, "wb") as out:
        shutil.copyfileobj(resp, out, 1 << 20)
    got = sha256_file(partial)
    if got not in entry.hashes:
        partial.unlink()
        raise WheelHashMismatch(entry.filename, f"{entry.name}=={entry.version}", entry.hashes, got)
    partial.replace(target)
    return target
