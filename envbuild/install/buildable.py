"""What a profile can be built into on this machine: which locks it has and which backends they allow here.

A newcomer's first question after `envbuild profiles` is which command will work. The answer depends on
the profile folder (a conda build installs conda-lock.yml, a venv build the pip lock) and on this machine
(a venv build needs a Python of the profile's version, found by the venv backend's own search, and the
pip/setuptools its git sources need in the pip lock). Only what
is on disk is looked at, so `envbuild profiles` stays quick; whether a lock is still fresh for its
profile is `create`'s check (and `lock --check`'s), which needs the conda-lock machinery.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple

from envbuild.lock.condalock import LOCK_FILE as CONDA_LOCK
from envbuild.lock.freshness import PIP_LOCK_FILE, relock_command

PYLOCK = "pylock.toml"  # the pip lock again, as PEP 751 (envbuild.lock.pip_outputs)
LOCK_NAMES = (CONDA_LOCK, PIP_LOCK_FILE, PYLOCK)


@dataclass(frozen=True)
class Buildable:
    profile: str
    python: str  # the profile's Python version
    has_recipe: bool
    wants_pip: bool  # the recipe has pip requirements
    locks: Tuple[str, ...]  # which of LOCK_NAMES are in the profile folder
    venv_python: Optional[Path]  # the interpreter a venv build would use here (None: none found)
    missing_tools: Tuple[str, ...] = ()  # BUILD_TOOLS the pip lock lacks though git sources/builds need them
    missing_toolchain: Tuple[str, ...] = ()  # [recipe.toolchain] pieces neither the pip lock nor the system gives
    git_hosts: Tuple[str, ...] = ()  # one per git source: the host its URL names (not asked: no network here)

    @property
    def venv(self) -> bool:
        return (self.venv_python is not None and PIP_LOCK_FILE in self.locks and not self.missing_tools
                and not self.missing_toolchain)

    @property
    def conda(self) -> bool:
        return CONDA_LOCK in self.locks

    def create_commands(self) -> Tuple[str, ...]:
        """The `envbuild create` lines that work here, the venv one first (it needs no conda channel)."""
        out = []
        if self.venv:
            out.append(f"envbuild create --profile {self.profile} --backend venv --python {self.venv_python}")
        if self.conda:
            out.append(f"envbuild create --profile {self.profile}")
        return tuple(out)

    def line(self) -> str:
        """One line: the locks, then each backend family and whether it builds here (or what it lacks)."""
        if not self.has_recipe:
            return f"{self.profile}: no [recipe] in its profile.toml: nothing to build (doctor --profile only)"
        locks = ", ".join(self.locks) if self.locks else "none"
        if PIP_LOCK_FILE not in self.locks:
            venv = (f"venv: needs the pip lock first: {relock_command(self.profile, ('pip',))} (PyPI only)"
                    if self.wants_pip else "venv: the recipe has no pip layer")
        elif self.missing_tools:
            venv = (f"venv: no, its pip lock pins no {', '.join(self.missing_tools)}, which its git sources and "
                    "builds need (add them to [recipe.toolchain] pip or [recipe.pip] requirements, and re-lock)")
        elif self.missing_toolchain:
            venv = (f"venv: no, its source builds need {', '.join(self.missing_toolchain)}, in neither the pip lock "
                    "nor the system ([recipe.toolchain]; re-lock)")
        elif self.venv_python is None:
            venv = (f"venv: no working Python {self.python} found here (python{self.python} on PATH, pyenv, "
                    "/usr/bin); give --python PATH")
        else:
            venv = f"venv: builds here with --python {self.venv_python}"
        conda = ("conda backends: build here" if self.conda else
                 f"conda backends: no {CONDA_LOCK} ({relock_command(self.profile)} needs the conda channels)")
        git = ""
        if self.git_hosts:
            hosts = ", ".join(sorted(set(self.git_hosts)))
            git = (f" · git: {len(self.git_hosts)} source(s) from {hosts}, fetched by create (reachable, or through "
                   "--git-mirror DIR|URL)")
        return f"{self.profile}: locks {locks} · {venv} · {conda}{git}"


def assess(profile) -> Buildable:
    """The Buildable of a loaded profile (envbuild.profile.Profile), looking only at files and interpreters."""
    from envbuild.install.backends.venv import missing_build_tools
    from envbuild.install.pip_layer import read_locked_entries

    recipe = getattr(profile, "recipe", None)
    locks = tuple(name for name in LOCK_NAMES if (profile.directory / name).is_file())
    wants_pip = bool(recipe is not None and recipe.pip_requirements)
    missing: Tuple[str, ...] = ()
    toolchain: Tuple[str, ...] = ()
    if recipe is not None and PIP_LOCK_FILE in locks:
        pins = {e.canonical_name: e.version for e in read_locked_entries(profile.directory / PIP_LOCK_FILE)}
        missing = tuple(missing_build_tools(list(pins), bool(recipe.git or recipe.builds)))
        if recipe.builds and (recipe.toolchain.pip or recipe.toolchain.cxx):  # as create's plan judges it
            from envbuild.install.toolchain import pieces

            toolchain = tuple(p.what for p in pieces(recipe, pins, []) if p.layer == "missing")
    from envbuild.install.git_mirror import url_parts

    hosts = tuple(url_parts(g.url)[0] or "this machine" for g in recipe.git) if recipe is not None else ()
    return Buildable(profile=profile.name, python=profile.python, has_recipe=recipe is not None, git_hosts=hosts,
                     wants_pip=wants_pip, locks=locks, missing_tools=missing, missing_toolchain=toolchain,
                     venv_python=_find_interpreter(profile.python) if profile.python else None)


@functools.lru_cache(maxsize=None)
def _find_interpreter(version: str) -> Optional[Path]:
    """The venv backend's own search (what `create --backend venv` without --python takes), once per version:
    `envbuild profiles` asks it for every profile, and each candidate is run."""
    from envbuild.install.backends.venv import find_interpreter

    return find_interpreter(version)
