"""PEP 751 `pylock.toml` for the pip layer: the standard lock pip (>= 26.1, `pip install -r pylock.toml`,
experimental there) and uv (`uv pip install -r pylock.toml`) install from, written from the same entries as
requirements.lock.txt.

Each package lists every wheel the target accepts (name, url, sha256), the index it came from, and, under
`[packages.tool.envbuild]`, the file envbuild installs and the recipe index's name. `environments` and
`requires-python` say which interpreter the lock is for, so an installer on another Python refuses it
instead of installing the wrong wheels. Rendering is deterministic (sorted, no timestamps).
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Dict, List, Sequence, Union

from envbuild.errors import InputFileError, parse_input_toml, read_input_text
from envbuild.lock.pip_lockfile import LockedWheel, WheelFile

PYLOCK_FILE = "pylock.toml"
_SHA = re.compile(r"^[0-9a-f]{64}$")
_MACHINE = {"x86_64": "x86_64", "aarch64": "aarch64", "ppc64le": "ppc64le"}


def _s(text: str) -> str:
    return json.dumps(text)  # a JSON string is a TOML basic string


def render_pylock(entries: Sequence[LockedWheel], python_version: str, platform_tags: Sequence[str],
                  index_urls: Dict[str, str], exclude_newer: str = "") -> str:
    """pylock.toml text. `index_urls` maps a recipe index name to its (credential-free) simple URL."""
    machine = next((m for m in _MACHINE if platform_tags and platform_tags[0].endswith(m)), "x86_64")
    env = (f'python_version == "{python_version}" and sys_platform == "linux" '
           f'and platform_machine == "{machine}"')
    out = ['lock-version = "1.0"', f"environments = [{_s(env)}]",
           f"requires-python = {_s('==' + python_version + '.*')}", 'created-by = "envbuild"', ""]
    for e in sorted(entries, key=lambda e: (e.canonical_name, e.version)):
        out += ["[[packages]]", f"name = {_s(e.canonical_name)}", f"version = {_s(e.version)}"]
        if e.index in index_urls:
            out.append(f"index = {_s(index_urls[e.index])}")
        out.append("wheels = [")
        for f in sorted(e.all_files(), key=lambda f: f.filename):
            sha = f.sha256 or (e.hashes[0] if len(e.hashes) == 1 else "")
            out.append(f"    {{ name = {_s(f.filename)}, url = {_s(f.url)}, hashes = {{ sha256 = {_s(sha)} }} }},")
        out += ["]", "", "[packages.tool.envbuild]", f"file = {_s(e.filename)}", f"index = {_s(e.index)}", ""]
    out += ["[tool.envbuild]", f"python = {_s(python_version)}",
            "platform-tags = [" + ", ".join(_s(t) for t in platform_tags) + "]"]
    if exclude_newer:
        out.append(f"exclude-newer = {_s(exclude_newer)}")
    return "\n".join(out) + "\n"


def _name_lines(text: str) -> Dict[str, int]:
    """The line of each `name = "..."` in `text` (the first one of a name), read in one pass: an error
    message names the package's line."""
    lines: Dict[str, int] = {}
    for i, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("name = "):
            lines.setdefault(stripped, i)
    return lines


def parse_pylock(text: str, path: Union[str, Path] = PYLOCK_FILE) -> List[LockedWheel]:
    """Entries of a pylock.toml (ours or another tool's: wheels only). Every sha256 must be 64 hex digits;
    a bad one is an InputFileError naming the file and the package's line."""
    data = parse_input_toml(path, text)
    if str(data.get("lock-version", "")).split(".")[0] != "1":
        raise InputFileError(path, f"lock-version: expected 1.x (PEP 751), got {data.get('lock-version')!r}", 1)
    entries: List[LockedWheel] = []
    name_lines = _name_lines(text)
    for pkg in data.get("packages", []):
        name, version = str(pkg.get("name", "")), str(pkg.get("version", ""))
        line = name_lines.get(f"name = {_s(name)}")
        if not name or not version:
            raise InputFileError(path, "a [[packages]] entry without name or version", line)
        files = []
        for w in pkg.get("wheels", []):
            sha = str((w.get("hashes") or {}).get("sha256", ""))
            url = str(w.get("url") or (Path(w["path"]).resolve().as_uri() if w.get("path") else ""))
            fname = str(w.get("name") or url.rsplit("/", 1)[-1])
            if not _SHA.match(sha):
                raise InputFileError(path, f"{name}=={version}: {fname}: sha256 {sha!r} is not 64 lowercase "
                                           f"hex digits", line)
            files.append(WheelFile(fname, url, sha))
        if not files:
            raise InputFileError(path, f"{name}=={version} has no wheels (envbuild installs wheels only)", line)
        tool = (pkg.get("tool") or {}).get("envbuild") or {}
        chosen = next((f for f in files if f.filename == tool.get("file")), files[0])
        entries.append(LockedWheel(name=name, version=version, hashes=tuple(sorted({f.sha256 for f in files})),
                                   filename=chosen.filename, url=chosen.url, index=str(tool.get("index", "")),
                                   line=line or 0, files=tuple(files)))
    return entries


def read_pylock(path: Union[str, Path], require_entries: bool = False) -> List[LockedWheel]:
    path = Path(path)
    entries = parse_pylock(read_input_text(path, "pylock.toml"), path)
    if require_entries and not entries:
        raise InputFileError(path, "pins no package, but the profile has a pip layer; re-run `envbuild lock`")
    return entries
