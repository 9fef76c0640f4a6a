"""conda-lock.yml (v1) written and read through conda-lock's own pydantic models.

Writing goes through `conda_lock.lockfile.write_conda_lock_file` (v2prelim model -> v1 on disk), so the
file is what `conda-lock render` and `conda-lock install` expect. Reading validates with the v1 model and
turns any problem into InputFileError naming the file and the line of the offending node, because a
hand-merged or truncated lock must not become an opaque traceback on a compute node.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence

from envbuild.errors import InputFileError, read_input_text

if TYPE_CHECKING:
    from conda_lock.lockfile.v1.models import Lockfile as LockfileV1

LOCK_FILE = "conda-lock.yml"


@dataclass(frozen=True)
class LockedConda:
    """One conda archive of a lock, as `create` needs it."""

    name: str
    version: str
    build: str
    platform: str
    url: str
    sha256: str
    md5: str
    category: str

    @property
    def filename(self) -> str:
        return self.url.rstrip("/").rsplit("/", 1)[-1]

    @property
    def subdir(self) -> str:
        parts = self.url.rstrip("/").rsplit("/", 2)
        return parts[-2] if len(parts) == 3 else self.platform


def _dependencies(depends: Sequence[str]) -> Dict[str, str]:
    from rattler import MatchSpec

    out: Dict[str, str] = {}
    for d in depends:
        name = MatchSpec(d).name.normalized
        rest = d.strip()[len(name):].strip() if d.strip().lower().startswith(name) else d
        out[name] = rest or "*"
    return out


def render_lock(solved: Dict[str, list], channels: List[str], content_hash: Dict[str, str],
                sources: List[str], custom: Dict[str, str]) -> str:
    """Text of conda-lock.yml for `solved` = {platform: [SolvedPackage]}; byte-identical for equal input."""
    from conda_lock.lockfile import write_conda_lock_file
    from conda_lock.lockfile.v1.models import HashModel, LockMeta
    from conda_lock.lockfile.v2prelim.models import LockedDependency, Lockfile

    packages = []
    for platform in sorted(solved):
        for sp in solved[platform]:
            r = sp.record
            packages.append(LockedDependency(
                name=r.name.normalized, version=str(r.version), manager="conda", platform=platform,
                dependencies=_dependencies(r.depends), url=r.url,
                hash=HashModel(md5=r.md5.hex() if r.md5 else None, sha256=r.sha256.hex() if r.sha256 else None),
                categories={sp.category}, build=str(r.build)))
    meta = LockMeta(content_hash=dict(sorted(content_hash.items())), channels=list(channels),
                    platforms=sorted(solved), sources=list(sources), custom_metadata=dict(sorted(custom.items())))
    lock = Lockfile(package=packages, metadata=meta)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / LOCK_FILE
        write_conda_lock_file(lock, path, metadata_choices=None, include_help_text=True)
        return path.read_text(encoding="utf-8")


def _line_for(text: str, loc: Sequence) -> Optional[int]:
    """1-based line of the YAML node at pydantic error location `loc` (deepest node that exists)."""
    import yaml

    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    line = node.start_mark.line + 1 if node is not None else None
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            nxt = next((v for k, v in node.value if k.value == key), None)
            if nxt is None:
                break
            node = nxt
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
        else:
            break
        line = node.start_mark.line + 1
    return line


def read_lock(path: Path) -> LockfileV1:
    """Parse and validate a conda-lock v1 file; returns conda-lock's v1 Lockfile model."""
    import yaml
    from conda_lock.lockfile.v1.models import Lockfile as LockfileV1
    from pydantic import ValidationError

    path = Path(path)
    text = read_input_text(path, "lock")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise InputFileError(path, f"malformed YAML: {getattr(exc, 'problem', None) or exc}",
                             mark.line + 1 if mark else None) from exc
    if not isinstance(data, dict):
        raise InputFileError(path, "not a conda-lock file (expected a mapping with version, metadata, package)", 1)
    if data.get("version") != 1:
        raise InputFileError(path, f"version: expected 1 (conda-lock v1), got {data.get('version')!r}",
                             _line_for(text, ["version"]))
    try:
        return LockfileV1.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = [p for p in err["loc"]]
        field = ".".join(str(p) for p in loc)
        raise InputFileError(path, f"{field}: {err['msg']}", _line_for(text, loc)) from exc


def locked_conda(lock: LockfileV1, platform: str, categories: Sequence[str]) -> List[LockedConda]:
    """The conda packages of `platform` in any of `categories`, in the lock's order."""
    out: List[LockedConda] = []
    seen = set()
    for p in lock.package:
        if p.manager != "conda" or p.platform != platform or p.category not in categories:
            continue
        if (p.name, p.url) in seen:
            continue
        seen.add((p.name, p.url))
        out.append(LockedConda(name=p.name, version=p.version, build=p.build or "", platform=p.platform,
                               url=p.url, sha256=p.hash.sha256 or "", md5=p.hash.md5 or "", category=p.category))
    return out
