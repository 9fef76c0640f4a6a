"""Everything `envbuild lock` writes for one profile, computed in memory, then written or diffed.

Outputs per profile folder: environment.yml + virtual-packages.yml (the rendered input), conda-lock.yml
(conda-lock v1), and requirements.lock.txt (the pip layer, from envbuild.lock.pip_lock) when the recipe has
pip requirements. Nothing time- or host-dependent goes in, so identical input gives byte-identical output.

Staleness is judged on inputs (conda-lock's content_hash): a lock is stale when what the profile asks for
changed, not when a channel published something newer. The scheduled CI lock job picks those up.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence

from envbuild.errors import EnvbuildError
from envbuild.fsutil import atomic_write_text
from envbuild.lock.condalock import LOCK_FILE, read_lock, render_lock
from envbuild.lock.pip_outputs import FILES as PIP_FILES, PIP_LOCK_FILE
from envbuild.lock.spec import render_spec, virtual_packages

if TYPE_CHECKING:
    from envbuild.profile import Profile, Recipe



@dataclass
class LockOutputs:
    profile: str
    folder: Path
    files: Dict[str, str] = field(default_factory=dict)  # filename -> text
    hashes: Dict[str, str] = field(default_factory=dict)  # platform -> content hash


def spec_outputs(profile: Profile, recipe: Recipe) -> LockOutputs:
    """The rendered spec files and the content hash per platform (no solve, no network)."""
    out = LockOutputs(profile=profile.name, folder=profile.directory)
    out.files.update(render_spec(recipe, profile.name, profile_file=profile.path.name))
    from envbuild.lock.condalock_interop import condalock_content_hashes

    out.hashes.update(condalock_content_hashes(dict(out.files), recipe.platforms))  # conda-lock's own hash
    return out


def spec_locations(profile: Profile, recipe: Recipe) -> Dict[str, str]:
    """spec -> 'profile.toml:LINE' so a solve error can point at the line that asked for a package."""
    lines = profile.path.read_text(encoding="utf-8").splitlines()
    where: Dict[str, str] = {}
    for spec in recipe.conda.specs + [s for g in recipe.conda.optional.values() for s in g]:
        for i, line in enumerate(lines):
            if f'"{spec}"' in line or f"'{spec}'" in line:
                where[spec] = f"{profile.path}:{i + 1}"
                break
    return where


LAYERS = ("conda", "pip")


def compute(profile: Profile, recipe: Recipe, progress: Optional[Callable[[str], None]] = None,
            layers: Sequence[str] = LAYERS) -> LockOutputs:
    """Solve every platform and render the outputs of `layers` (plus the rendered spec)."""
    from envbuild.lock.conda_solve import solve_platform

    out = spec_outputs(profile, recipe)
    spec_files = sorted(out.files)
    if recipe.pip.requirements and "pip" in layers:
        if progress:
            progress(f"{profile.name}: resolving pip layer (uv)")
        from envbuild.lock.pip_outputs import pip_lock_files

        out.files.update(pip_lock_files(profile, recipe))
    if "conda" in layers:
        where = spec_locations(profile, recipe)
        solved = {}
        for p in recipe.platforms:
            if progress:
                progress(f"{profile.name}: solving conda layer for {p}")
            solved[p] = solve_platform(recipe, p, where)
        custom = {"envbuild.profile": profile.name}
        for p in recipe.platforms:
            custom[f"envbuild.virtual_packages.{p}"] = ",".join(f"{k}={v}" for k, v in
                                                                 sorted(virtual_packages(recipe, p).items()))
        sources = [f for f in spec_files if f.startswith("environment")]
        out.files[LOCK_FILE] = render_lock(solved, recipe.conda.channels, out.hashes, sources, custom)
    lock_text = out.files.get(LOCK_FILE)
    if lock_text is None and "pip" in layers and (out.folder / LOCK_FILE).is_file():
        lock_text = (out.folder / LOCK_FILE).read_text(encoding="utf-8")  # --only pip: refresh its pip entries
    if lock_text is not None:
        from envbuild.lock.condalock_interop import with_pip_entries
        from envbuild.lock.pip_outputs import entries_for_condalock

        pip_entries = entries_for_condalock(out.files, out.folder) if recipe.pip.requirements else []
        out.files[LOCK_FILE] = with_pip_entries(lock_text, pip_entries, recipe.platforms)
    return out


def write(outputs: LockOutputs, layers: Sequence[str] = LAYERS) -> List[str]:
    """Write changed files atomically, drop a pip lock the recipe no longer asks for; returns what changed."""
    written = []
    for name in PIP_FILES:
        orphan = outputs.folder / name
        if "pip" in layers and PIP_LOCK_FILE not in outputs.files and orphan.is_file():
            orphan.unlink()
            written.append(f"{name} (removed)")
    for fname, text in sorted(outputs.files.items()):
        path = outputs.folder / fname
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            continue
        atomic_write_text(path, text)
        written.append(fname)
    return written


def stale_reasons(profile: Profile, recipe: Recipe, spec: LockOutputs) -> List[str]:
    """Why the lock on disk does not match the profile; empty when fresh. Never solves."""
    folder = profile.directory
    lock_path = folder / LOCK_FILE
    if not lock_path.is_file():
        return [f"{lock_path} does not exist"]
    reasons = []
    lock = read_lock(lock_path)
    have = dict(lock.metadata.content_hash)
    for p, h in sorted(spec.hashes.items()):
        if have.get(p) != h:
            reasons.append(f"{LOCK_FILE}: inputs for {p} changed (content hash {have.get(p, 'missing')[:12]} "
                           f"!= {h[:12]})")
    for p in sorted(set(have) - set(spec.hashes)):
        reasons.append(f"{LOCK_FILE}: platform {p} is no longer in the recipe")
    for fname in sorted(spec.files):
        path = folder / fname
        if not path.is_file() or path.read_text(encoding="utf-8") != spec.files[fname]:
            reasons.append(f"{fname}: differs from the profile's [recipe]")
    if recipe.pip.requirements and not (folder / PIP_LOCK_FILE).is_file():
        reasons.append(f"{PIP_LOCK_FILE} does not exist but the recipe has pip requirements")
    if not recipe.pip.requirements and (folder / PIP_LOCK_FILE).is_file():
        reasons.append(f"{PIP_LOCK_FILE} exists but the recipe has no pip requirements")
    if recipe.pip.requirements and (folder / PIP_LOCK_FILE).is_file():
        from envbuild.lock.pip_lockfile import read_pip_lock

        if not read_pip_lock(folder / PIP_LOCK_FILE):
            reasons.append(f"{PIP_LOCK_FILE} pins no package but the recipe has pip requirements")
    return reasons


def unified_diff(folder: Path, files: Dict[str, str], label: str) -> str:
    """A `git diff`-like text of what writing `files` would change in `folder`."""
    chunks = []
    for fname, new in sorted(files.items()):
        path = folder / fname
        old = path.read_text(encoding="utf-8") if path.is_file() else ""
        if old == new:
            continue
        chunks.extend(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                           fromfile=f"a/{label}/{fname}" if old else "/dev/null",
                                           tofile=f"b/{label}/{fname}"))
    return "".join(c if c.endswith("\n") else c + "\n" for c in chunks)
