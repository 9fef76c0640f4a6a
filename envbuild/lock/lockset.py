"""Everything `envbuild lock` writes for one profile, computed in memory, then written or diffed.

Outputs per profile folder: environment.yml (+ environment.<group>.yml) + virtual-packages.yml (the rendered
input), conda-lock.yml (conda-lock v1, with the pip layer as its pip entries), and requirements.lock.txt +
pylock.toml (the pip layer, from envbuild.lock.pip_outputs) when the recipe has pip requirements. Nothing time- or host-dependent goes in, so identical input gives byte-identical output.

Whether what is on disk is fresh is envbuild.lock.freshness's rule; this module writes the seals it checks.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence

from envbuild.fsutil import atomic_write_text
from envbuild.progress import Steps
from envbuild.lock.condalock import LOCK_FILE, render_lock
from envbuild.lock.freshness import (CONDA_SEAL_KEY, LAYERS, PIP_LOCK_FILE, conda_entries_digest_of_text, seal_pip_lock,
                                     spec_hashes)
from envbuild.lock.pip_outputs import FILES as PIP_FILES
from envbuild.lock.spec import virtual_packages

if TYPE_CHECKING:
    from envbuild.profile import Profile, Recipe


@dataclass
class LockOutputs:
    profile: str
    folder: Path
    files: Dict[str, str] = field(default_factory=dict)  # filename -> text
    hashes: Dict[str, str] = field(default_factory=dict)  # platform -> content hash


def spec_outputs(profile: Profile, recipe: Recipe, layers: Sequence[str] = LAYERS) -> LockOutputs:
    """The rendered spec files and (when `layers` holds conda) the content hash per platform (no solve, no
    network)."""
    files, hashes = spec_hashes(profile, recipe, layers)
    return LockOutputs(profile=profile.name, folder=profile.directory, files=dict(files), hashes=hashes)


def spec_locations(profile: Profile, recipe: Recipe) -> Dict[str, str]:
    """spec -> 'profile.toml:LINE' so a solve error can point at the line that asked for a package."""
    from envbuild.errors import read_input_text
    from envbuild.profile.toml_lines import key_lines

    lines = key_lines(read_input_text(profile.path, "profile"))
    paths = [(("recipe", "conda", "specs", i), s) for i, s in enumerate(recipe.conda.specs)]
    paths += [(("recipe", "conda", "optional", g, i), s) for g, specs in recipe.conda.optional.items()
              for i, s in enumerate(specs)]
    return {spec: f"{profile.path}:{lines[path]}" for path, spec in paths if path in lines}


def compute(profile: Profile, recipe: Recipe, steps: Optional[Steps] = None,
            layers: Sequence[str] = LAYERS, upgrade: bool = False) -> LockOutputs:
    """Solve every platform and render the outputs of `layers` (plus the rendered spec); `steps` announces
    each solve as a phase (None: silent). The pip layer keeps the existing lock's versions unless `upgrade`."""
    steps = steps or Steps("", quiet=True)
    out = spec_outputs(profile, recipe, layers)
    if "conda" in layers:
        from envbuild.lock.conda_solve import solve_platform  # py-rattler's solver: only for the conda layer

        where = spec_locations(profile, recipe)
        solved = {}
        for p in recipe.platforms:
            with steps.phase(f"{profile.name}: solve the conda layer for {p} (py-rattler)") as ph:
                solved[p] = solve_platform(recipe, p, where)
                ph.result = f"{len(solved[p])} packages"
        custom = {"envbuild.profile": profile.name}
        for p in recipe.platforms:
            custom[f"envbuild.virtual_packages.{p}"] = ",".join(f"{k}={v}" for k, v in
                                                                 sorted(virtual_packages(recipe, p).items()))
        sources = sorted(f for f in out.files if f.startswith("environment"))
        out.files[LOCK_FILE] = render_lock(solved, recipe.conda.channels, out.hashes, sources, custom)
    if recipe.pip_requirements and "pip" in layers:
        from envbuild.lock.pip_outputs import pip_lock_files

        with steps.phase(f"{profile.name}: resolve the pip layer ({len(recipe.pip_requirements)} requirements, "
                         f"uv)") as ph:
            files = pip_lock_files(profile, recipe, phase=ph, upgrade=upgrade)
            pins = [ln for ln in files[PIP_LOCK_FILE].splitlines() if "==" in ln and not ln.startswith((" ", "#"))]
            ph.result = f"{len(pins)} pins"
        files[PIP_LOCK_FILE] = seal_pip_lock(files[PIP_LOCK_FILE])
        out.files.update(files)
    lock_text = out.files.get(LOCK_FILE)
    if lock_text is None and "pip" in layers and (out.folder / LOCK_FILE).is_file():
        lock_text = (out.folder / LOCK_FILE).read_text(encoding="utf-8")  # --only pip: refresh its pip entries
    if lock_text is not None:
        out.files[LOCK_FILE] = _with_pip_layer(lock_text, out, recipe)
    return out


def _with_pip_layer(lock_text: str, out: LockOutputs, recipe: Recipe) -> str:
    """conda-lock.yml with the pip layer as conda-lock pip entries, sealed over all its entries."""
    from envbuild.lock.condalock_interop import with_pip_entries
    from envbuild.lock.pip_outputs import entries_for_condalock

    entries = entries_for_condalock(out.files, out.folder) if recipe.pip_requirements else []
    text = with_pip_entries(lock_text, entries, recipe.platforms)
    return with_pip_entries(text, entries, recipe.platforms, {CONDA_SEAL_KEY: conda_entries_digest_of_text(text)})


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
