"""The one place that finds profiles: --lockfiles, else $ENVBUILD_LOCKFILES, else the checkout's/package's lockfiles/.

Every command that takes a profile (create, lock, pack, profiles, profiles show, doctor --profile, capture)
asks this module, so a folder given one way is seen by all of them.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional, Sequence, Union

from envbuild.errors import EnvbuildError
from envbuild.fsutil import is_file
from envbuild.profile.loader import load_profile_file
from envbuild.profile.model import Profile

LOCKFILES_ENV = "ENVBUILD_LOCKFILES"
PROFILE_FILE = "profile.toml"


def lockfiles_base(option: Optional[Union[str, Path]] = None) -> Path:
    """The folder of profiles: `option` (--lockfiles), else $ENVBUILD_LOCKFILES, else envbuild's lockfiles/."""
    from envbuild.paths import lockfiles_dir

    if option is not None and str(option) == "":
        raise EnvbuildError("--lockfiles is empty; give a folder of profiles")
    env = os.environ.get(LOCKFILES_ENV)
    if option:
        base, origin = Path(option).expanduser(), "--lockfiles"
    elif env:
        base, origin = Path(env).expanduser(), f"${LOCKFILES_ENV}"
    else:
        base, origin = lockfiles_dir(), "envbuild's"
    if not base.is_dir():
        raise EnvbuildError(f"lockfiles folder {base} ({origin}) does not exist")
    return base


def profile_names(base: Optional[Path] = None) -> List[str]:
    """Names of the profiles in `base` (default: lockfiles_base()), sorted."""
    base = base if base is not None else lockfiles_base()
    return sorted(p.parent.name for p in base.glob(f"*/{PROFILE_FILE}"))


def select_profiles(base: Path, names: Sequence[str]) -> List[str]:
    """`names` checked against the profiles in `base` (an unknown one is an error naming the known ones);
    all of them when `names` is empty."""
    known = profile_names(base)
    for n in names:
        if n not in known:
            raise EnvbuildError(f"unknown profile {n!r} in {base}; known profiles: {', '.join(known) or '(none)'}")
    return list(names) or known


def select_profile(base: Path, name: Optional[str]) -> str:
    """The one profile `create` or `pack` works on: `name`, else the only profile in `base`.

    Both commands act on a single env, so with no --profile and several profiles they refuse rather than guess.
    """
    names = select_profiles(base, (name,) if name else ())
    if not names:
        raise EnvbuildError(f"no profiles in {base}")
    if not name and len(names) != 1:
        raise EnvbuildError(f"several profiles in {base}; choose one with --profile: {', '.join(names)}")
    return names[0]


def profile_path(name_or_path: str, lockfiles: Optional[Union[str, Path]] = None) -> Path:
    """The profile.toml of a profile name (in lockfiles_base(lockfiles)) or of a path to a profile.toml."""
    candidate = Path(name_or_path)
    if candidate.suffix == ".toml" or is_file(candidate):
        return candidate
    base = lockfiles_base(lockfiles)
    return base / select_profile(base, name_or_path) / PROFILE_FILE


def load_profile(name_or_path: str, lockfiles: Optional[Union[str, Path]] = None) -> Profile:
    """The validated profile `name_or_path` names (see profile_path)."""
    return load_profile_file(profile_path(name_or_path, lockfiles))
