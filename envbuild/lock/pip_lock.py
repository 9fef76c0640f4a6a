"""Resolve the pip layer of a recipe to `name==version --hash=sha256:...` pins for a target Python/platform.

Real pip does the resolving: `pip install --dry-run --ignore-installed --report` for the target
(`--python-version`, `--platform`, `--only-binary=:all:`), reading metadata through PEP 658 where the index
offers it, so locking torch does not download gigabytes. Two things pip does not do on its own are added:

- index priority: pip is pointed at a loopback PriorityIndexServer that serves each project from the one
  index allowed to have it (envbuild.lock.simple_index explains why);
- markers for the target: pip evaluates environment markers (`python_version < "3.12"`) against the
  Python that runs it, not the target; the resolver runs pip with its marker environment replaced by the
  target's, so a 3.11 host locks a 3.12 environment correctly.

Hashes come from the index pages (the `#sha256=` fragment PyPI and download.pytorch.org give); a file the
index gives no hash for is downloaded once and hashed. For each pin the lock lists the hash of every file
of that version compatible with the target tags, so an install on a node whose glibc allows a newer
manylinux tag still passes `--require-hashes`.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Set

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from envbuild.errors import EnvbuildError
from envbuild.hashing import stream_digest
from envbuild.lock.pip_lockfile import LockedWheel, render_pip_lock
from envbuild.lock.simple_index import IndexFile, PriorityIndex, PriorityIndexServer

# Runs pip with the marker environment of the target instead of the running interpreter's.
_PIP_WITH_TARGET_MARKERS = (
    "import json, sys\n"
    "from pip._vendor.packaging import markers\n"
    "_target = json.loads(sys.argv[1])\n"
    "_host = markers.default_environment\n"
    "markers.default_environment = lambda: {**_host(), **_target}\n"
    "from pip._internal.cli.main import main\n"
    "sys.exit(main(sys.argv[2:]))\n"
)

_ARCH_OF_CONDA = {"linux-64": "x86_64", "linux-aarch64": "aarch64", "linux-ppc64le": "ppc64le"}


def platform_tags_for(conda_platform: str, glibc: str = "2.28") -> List[str]:
    """pip platform tags a conda platform with this glibc accepts, most specific first.

    pip does not expand `manylinux_2_28_x86_64` into the older manylinux tags a node also accepts, so
    the whole list is passed: manylinux_2_<glibc> .. manylinux_2_17, the legacy aliases, linux_<arch>.
    """
    arch = _ARCH_OF_CONDA.get(conda_platform)
    if arch is None:
        raise EnvbuildError(f"pip locking supports {', '.join(sorted(_ARCH_OF_CONDA))}, not {conda_platform!r}")
    major, minor = (int(x) for x in glibc.split(".")[:2])
    if major != 2 or minor < 17:
        raise EnvbuildError(f"glibc {glibc!r}: manylinux wheels need glibc 2.17 or newer")
    tags = [f"manylinux_2_{m}_{arch}" for m in range(minor, 16, -1)]
    tags.append(f"manylinux2014_{arch}")
    if arch == "x86_64":
        tags += ["manylinux2010_x86_64", "manylinux1_x86_64"]
    tags.append(f"linux_{arch}")
    return tags


def target_tags(python_version: str, platform_tags: Sequence[str]) -> Set[Tag]:
    """Every wheel tag a CPython `python_version` on `platform_tags` accepts."""
    major, minor = (int(x) for x in python_version.split(".")[:2])
    out = set(cpython_tags((major, minor), platforms=list(platform_tags)))
    out.update(compatible_tags((major, minor), f"cp{major}{minor}", list(platform_tags)))
    return out


def target_markers(python_version: str, platform_tags: Sequence[str]) -> Dict[str, str]:
    """The PEP 508 marker values of the target, derived from its version and platform tags."""
    parts = python_version.split(".")
    full = ".".join(parts + ["0"] * (3 - len(parts))) if len(parts) < 3 else python_version
    first = platform_tags[0] if platform_tags else "linux_x86_64"
    if first.startswith(("manylinux_", "musllinux_")):  # manylinux_2_28_x86_64
        sys_platform, system, machine = "linux", "Linux", first.split("_", 3)[-1]
    elif first.startswith(("manylinux", "linux")):  # manylinux2014_x86_64, linux_x86_64
        sys_platform, system, machine = "linux", "Linux", first.split("_", 1)[1]
    elif first.startswith("macosx"):
        sys_platform, system, machine = "darwin", "Darwin", first.rsplit("_", 1)[-1]
    else:
        sys_platform, system, machine = "win32", "Windows", "AMD64"
    return {
        "python_version": ".".join(parts[:2]),
        "python_full_version": full,
        "implementation_name": "cpython",
        "implementation_version": full,
        "platform_python_implementation": "CPython",
        "sys_platform": sys_platform,
        "platform_system": system,
        "platform_machine": machine,
        "os_name": "nt" if sys_platform == "win32" else "posix",
    }


def _wheel_compatible(filename: str, version: str, accepted: Set[Tag]) -> bool:
    try:
        _, ver, _, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return False
    return str(ver) == version and bool(set(tags) & accepted)


def sha256_of_url(url: str) -> str:
    """Stream a file (http(s) or file://) and return its sha256; used when an index gives no hash."""
    with urllib.request.urlopen(url, timeout=300) as resp:
        return stream_digest(resp)


def isolated_pip_env() -> Dict[str, str]:
    """pip's environment without the user's pip config, so a stray extra-index-url cannot sneak in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    no_proxy = ",".join(x for x in (env.get("NO_PROXY", ""), "127.0.0.1,localhost") if x)
    env["NO_PROXY"] = env["no_proxy"] = no_proxy  # the loopback index must never go through a proxy
    return env


def _explain_failure(stderr: str, table: PriorityIndex) -> str:
    keep = [ln.strip() for ln in stderr.splitlines() if ln.strip().startswith("ERROR:") or "conflict" in ln.lower()]
    msg = "; ".join(keep[-4:]) or stderr.strip()[-600:]
    routed = [f"{name} only from index {up.name!r} ({up.url})" for up in table.upstreams
              for name in sorted(up.packages)]
    if routed:
        msg += " [index priority: " + ", ".join(routed) + "]"
    if table.errors:
        msg += " [index errors: " + "; ".join(table.errors[:3]) + "]"
    return msg


def _run_resolver(python: str, args: List[str], markers: Dict[str, str], table: PriorityIndex) -> dict:
    with tempfile.TemporaryDirectory(prefix="envbuild-piplock-") as tmp:
        report = Path(tmp) / "report.json"
        cmd = [python, "-c", _PIP_WITH_TARGET_MARKERS, json.dumps(markers), *args, "--report", str(report)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=isolated_pip_env())
        if proc.returncode != 0:
            raise EnvbuildError(f"pip could not resolve the pip layer: {_explain_failure(proc.stderr, table)}")
        return json.loads(report.read_text(encoding="utf-8"))


def _local_file(url: str) -> Optional[Path]:
    if not url.startswith("file://"):
        return None
    return Path(urllib.request.url2pathname(urllib.parse.urlparse(url).path))


def _entry_from_report(item: dict, table: PriorityIndex, accepted: Set[Tag]) -> LockedWheel:
    meta = item["metadata"]
    name, version = str(canonicalize_name(meta["name"])), meta["version"]
    info = item.get("download_info") or {}
    url = info.get("url", "")
    archive = info.get("archive_info") or {}
    chosen_hash = (archive.get("hashes") or {}).get("sha256")
    if not chosen_hash and str(archive.get("hash", "")).startswith("sha256="):
        chosen_hash = archive["hash"].split("=", 1)[1]
    filename = urllib.parse.unquote(url.rsplit("/", 1)[-1])
    page: List[IndexFile] = table.files_of(name)
    served = next((f for f in page if urllib.parse.unquote(f.url) == urllib.parse.unquote(url)), None)
    owner = table.owner(name)
    if served is None:
        source = "find-links" if _local_file(url) else "url"
        if owner is not None:
            raise EnvbuildError(f"{name}=={version} resolved to {url}, but the recipe says {name} comes only from "
                                f"index {owner!r}; remove it from find-links or from that index's packages")
        hashes = [chosen_hash or sha256_of_url(url)]
    else:
        source = served.index
        hashes = []
        for f in page:
            if _wheel_compatible(f.filename, version, accepted):
                hashes.append(f.sha256 or sha256_of_url(f.url))
        if chosen_hash:
            hashes.append(chosen_hash)
        elif not served.sha256:
            hashes.append(sha256_of_url(url))
    return LockedWheel(name=name, version=version, hashes=tuple(sorted(set(hashes))), filename=filename,
                       url=served.url if served else url, index=source)


def resolve_pip_lock(
    requirements: Sequence[str],
    indexes: Sequence[object],
    python_version: str,
    platform_tags: Sequence[str],
    find_links: Iterable[str] = (),
    python: Optional[str] = None,
) -> str:
    """Lock `requirements` for CPython `python_version` on `platform_tags`; return the lock's text.

    `indexes` are recipe PipIndex objects (name, url, packages) in priority order: a package named in an
    index's `packages` is resolved only from it; everything else from the first fallback index (empty
    `packages`) that has it. `find_links` are local wheel folders (e.g. source-built wheels) offered too.
    `python` runs pip (default: this interpreter; needs pip >= 23). Identical input -> identical text.
    """
    reqs = [r.strip() for r in requirements if r.strip()]
    if not reqs:
        raise EnvbuildError("the pip layer has no requirements to lock")
    if not platform_tags:
        raise EnvbuildError("resolve_pip_lock needs at least one platform tag (see platform_tags_for)")
    table = PriorityIndex.from_indexes(indexes)
    links = [str(f) for f in find_links]
    markers = target_markers(python_version, platform_tags)
    with tempfile.TemporaryDirectory(prefix="envbuild-piplock-") as tmp, PriorityIndexServer(table) as server:
        req_file = Path(tmp) / "requirements.in"
        req_file.write_text("\n".join(reqs) + "\n", encoding="utf-8")
        args = ["install", "--dry-run", "--ignore-installed", "--quiet", "--no-input", "--disable-pip-version-check",
                "--progress-bar", "off", "--only-binary=:all:", "--python-version", python_version,
                "--implementation", "cp", "--index-url", server.url]
        for tag in platform_tags:
            args += ["--platform", tag]
        for link in links:
            args += ["--find-links", link]
        args += ["-r", str(req_file)]
        report = _run_resolver(python or sys.executable, args, markers, table)
    accepted = target_tags(python_version, platform_tags)
    entries = [_entry_from_report(item, table, accepted) for item in report.get("install", [])]
    header = [
        "envbuild pip lock: written by `envbuild lock`; install with pip --require-hashes --no-deps. Do not edit.",
        f"python: {python_version}",
        f"platforms: {' '.join(platform_tags)}",
    ]
    for up in table.upstreams:
        scope = ", ".join(sorted(up.packages)) if up.packages else "(fallback)"
        header.append(f"index {up.name}: {up.url} -> {scope}")
    header += [f"find-links: {link}" for link in links]
    header += [f"requirement: {r}" for r in reqs]
    return render_pip_lock(entries, header)
