"""The pip layer's lock files for one profile, from one uv resolution: requirements.lock.txt (pip/uv
`--require-hashes -r`), pylock.toml (PEP 751), and the entries conda-lock.yml carries as `manager: pip`.

The target is the profile's `python` and the first recipe platform with the recipe's __glibc; the
resolution cutoff is envbuild.lock.cutoff's (a moment already past, recorded in the lock).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional

from envbuild.lock.pip_lockfile import LockedWheel, render_pip_lock
from envbuild.lock.pylock import PYLOCK_FILE, read_pylock, render_pylock

if TYPE_CHECKING:
    from envbuild.profile import Profile, Recipe

PIP_LOCK_FILE = "requirements.lock.txt"
FILES = (PIP_LOCK_FILE, PYLOCK_FILE)


def target(profile: "Profile", recipe: "Recipe"):
    """(python version, platform tags) the pip layer is locked for."""
    from envbuild.lock.pip_lock import platform_tags_for
    from envbuild.lock.spec import virtual_packages

    platform = recipe.platforms[0]
    glibc = virtual_packages(recipe, platform).get("__glibc", "2.28")
    return profile.python, platform_tags_for(platform, glibc)


def pip_lock_files(profile: "Profile", recipe: "Recipe", cache_dir: Optional[Path] = None,
                   phase=None, upgrade: bool = False) -> Dict[str, str]:
    """file name -> text of the pip layer's locks (resolved now, with uv; `phase` shows uv's progress).

    A re-lock keeps the versions the profile's pylock.toml pins wherever they still fit its requirements, so it
    is byte-identical even where an index later shows files dated before the cutoff (seen on this project's
    PyPI: filelock 4.3.2, dated 2026-11-27, appeared after a lock made on 2026-12-02 with cutoff 2026-12-01).
    `upgrade` drops those preferences: the newest files before the cutoff."""
    from envbuild.lock.pip_lock import resolve_pip_entries
    from envbuild.lock.uv_cli import redact

    from envbuild.lock.cutoff import lock_cutoff

    python, tags = target(profile, recipe)
    cutoff = lock_cutoff(recipe.pip.exclude_newer, profile.directory / PIP_LOCK_FILE, profile.path)
    keep = None if upgrade else profile.directory / PYLOCK_FILE
    entries, header = resolve_pip_entries(recipe.pip_requirements, recipe.pip.indexes, python, tags,
                                          exclude_newer=cutoff, cache_dir=cache_dir, phase=phase, preferences=keep)
    urls = {i.name: redact(i.url) for i in recipe.pip.indexes}
    return {PIP_LOCK_FILE: render_pip_lock(entries, header),
            PYLOCK_FILE: render_pylock(entries, python, tags, urls, cutoff)}


def entries_for_condalock(files: Dict[str, str], folder: Path) -> List[LockedWheel]:
    """The pip entries conda-lock.yml should carry: from `files` if just resolved, else the pylock.toml
    on disk (a `lock --only conda` keeps the pip layer it already had); [] when there is no pip layer."""
    from envbuild.lock.pylock import parse_pylock

    if PYLOCK_FILE in files:
        return parse_pylock(files[PYLOCK_FILE], folder / PYLOCK_FILE)
    path = folder / PYLOCK_FILE
    return read_pylock(path) if path.is_file() else []
