"""The pip lock format: a pip requirements file that pip itself installs with `--require-hashes --no-deps`.

Each entry is `name==version` with one `--hash=sha256:` per file pip may pick for the target, followed by
two comment lines that record where the resolved file came from (so `envbuild pack` can fetch exactly
that file without resolving again):

    torch==2.11.0 \\
        --hash=sha256:<64 hex> \\
        --hash=sha256:<64 hex>
        # file: torch-2.11.0-cp312-cp312-manylinux_2_28_x86_64.whl (index: pypi)
        # url: https://files.pythonhosted.org/.../torch-2.11.0-cp312-cp312-manylinux_2_28_x86_64.whl

Rendering is deterministic (entries sorted by canonical name, hashes sorted, no timestamps), so identical
input gives byte-identical text and `envbuild lock --check` can diff it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

from packaging.utils import canonicalize_name

from envbuild.errors import InputFileError, read_input_text

_PIN_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)\s*(\\)?\s*$")
_HASH_RE = re.compile(r"^\s+--hash=sha256:([0-9a-f]{64})\s*(\\)?\s*$")
_ANY_HASH_RE = re.compile(r"^\s+--hash=(\S+?)\s*(\\)?\s*$")
_FILE_RE = re.compile(r"^\s+# file: (\S+) \(index: ([^)]*)\)\s*$")
_URL_RE = re.compile(r"^\s+# url: (\S+)\s*$")


@dataclass(frozen=True)
class WheelFile:
    """One file of a pinned version that the target accepts (pylock.toml lists them all)."""

    filename: str
    url: str
    sha256: str


@dataclass(frozen=True)
class LockedWheel:
    """One pinned distribution and the file the resolver chose for the target."""

    name: str
    version: str
    hashes: Tuple[str, ...]  # sha256 hex of every acceptable file, sorted
    filename: str
    url: str
    index: str  # the recipe index (or "find-links", "url") that served the file
    line: int = field(default=0, compare=False)
    files: Tuple[WheelFile, ...] = field(default=(), compare=False)  # every accepted file; () = just the chosen

    def all_files(self) -> Tuple[WheelFile, ...]:
        """The accepted files of this version, the chosen one included."""
        return self.files or (WheelFile(self.filename, self.url, self.hashes[0] if len(self.hashes) == 1 else ""),)

    @property
    def canonical_name(self) -> str:
        return str(canonicalize_name(self.name))


def render_pip_lock(entries: Sequence[LockedWheel], header: Sequence[str]) -> str:
    """Text of a lock. `header` lines become `# ` comments at the top (inputs, never times)."""
    out = [f"# {h}".rstrip() for h in header]
    for e in sorted(entries, key=lambda e: (e.canonical_name, e.version)):
        hashes = sorted(set(e.hashes))
        out.append(f"{e.canonical_name}=={e.version} \\")
        for i, h in enumerate(hashes):
            out.append(f"    --hash=sha256:{h}" + (" \\" if i < len(hashes) - 1 else ""))
        out.append(f"    # file: {e.filename} (index: {e.index})")
        out.append(f"    # url: {e.url}")
    return "\n".join(out) + "\n"


def parse_pip_lock(text: str, path: Union[str, Path] = "<pip lock>") -> List[LockedWheel]:
    """Entries of a lock written by render_pip_lock. A malformed line raises InputFileError(file, line)."""
    entries: List[LockedWheel] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.lstrip().startswith("#"):
            i += 1
            continue
        m = _PIN_RE.match(line)
        if not m:
            raise InputFileError(path, f"expected `name==version \\` (a pinned requirement), got {line.strip()!r}", i + 1)
        start = i + 1
        name, version, cont = m.group(1), m.group(2), m.group(3)
        hashes: List[str] = []
        i += 1
        while cont:
            if i >= len(lines):
                raise InputFileError(path, f"{name}: the file ends inside the entry (a trailing backslash)", i)
            hm = _HASH_RE.match(lines[i])
            if not hm:
                bad = _ANY_HASH_RE.match(lines[i])
                what = (f"{bad.group(1)!r} is not a sha256 of 64 lowercase hex digits" if bad
                        else f"expected `--hash=sha256:<64 hex>`, got {lines[i].strip()!r}")
                raise InputFileError(path, f"{name}: {what}", i + 1)
            hashes.append(hm.group(1))
            cont = hm.group(2)
            i += 1
        if not hashes:
            raise InputFileError(path, f"{name}=={version} has no --hash (pip needs one with --require-hashes)", start)
        fm = _FILE_RE.match(lines[i]) if i < len(lines) else None
        um = _URL_RE.match(lines[i + 1]) if fm and i + 1 < len(lines) else None
        if not (fm and um):
            raise InputFileError(path, f"{name}=={version}: expected `# file: ...` and `# url: ...` lines after the hashes", i + 1)
        entries.append(LockedWheel(name=name, version=version, hashes=tuple(hashes), filename=fm.group(1),
                                   url=um.group(1), index=fm.group(2), line=start))
        i += 2
    return entries


def read_pip_lock(path: Union[str, Path], require_entries: bool = False) -> List[LockedWheel]:
    """Entries of the lock at `path`; with `require_entries`, a lock that pins nothing is an error
    (a profile with a pip layer must not silently give an env without it)."""
    path = Path(path)
    text = read_input_text(path, "pip lock")
    entries = parse_pip_lock(text, path)
    if require_entries and not entries:
        raise InputFileError(path, "pins no package, but the profile has a pip layer; re-run `envbuild lock`")
    return entries


def find_entry(entries: Sequence[LockedWheel], name: str) -> Optional[LockedWheel]:
    key = canonicalize_name(name)
    return next((e for e in entries if e.canonical_name == key), None)
