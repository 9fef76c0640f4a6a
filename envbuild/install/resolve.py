"""Everything `envbuild create` needs, read and checked before anything is written (so --dry-run shows it).

The command only wires options to `resolve_job`; here the bundle is opened, the profile found through the
profile store, the backend's health checked, the lock held to the one freshness rule, the conda packages of
this platform picked and each archive's source planned, and the target prefix decided and checked.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional, Tuple

from envbuild.errors import EnvbuildError
from envbuild.install import backends, conda_layer, pipeline
from envbuild.lock import condalock
from envbuild.lock.freshness import PIP_LOCK_FILE, require_fresh


def resolve_job(profile_name: Optional[str], *, prefix: Optional[str] = None, env_name: Optional[str] = None,
                bundle: Optional[str] = None, backend: str = backends.DEFAULT,
                lockfiles: Optional[str] = None) -> pipeline.CreateJob:
    """The CreateJob for these `create` options; EnvbuildError (exit 2) on any bad input, nothing written."""
    from envbuild.profile import load_profile, lockfiles_base, select_profile

    if prefix and env_name:
        raise EnvbuildError("give --prefix or --name, not both")
    installer = backends.require(backend)
    bundle_obj, mirrors = None, []
    if bundle:
        from envbuild.pack.bundle import open_bundle

        bundle_obj = open_bundle(Path(bundle))
        mirrors = [bundle_obj.channel_dir]
        lockfiles = lockfiles or str(bundle_obj.lock_dir)
    base = lockfiles_base(lockfiles)
    profile = load_profile(select_profile(base, profile_name), base)
    recipe = profile.require_recipe()
    layers = ("conda", "pip") if installer.USES_CONDA_LOCK else ("pip",)
    require_fresh(profile, recipe, layers)
    platform, conda, lock_files = _locked(profile.directory, sorted(recipe.conda.optional), installer.USES_CONDA_LOCK)
    job = pipeline.CreateJob(profile=profile, recipe=recipe, target=_target(prefix, env_name, profile.name),
                             platform=platform, backend=backend, lock_files=lock_files, conda=conda,
                             planned=conda_layer.plan(conda, mirrors, offline=bundle_obj is not None),
                             pip_lock=lock_files.get(PIP_LOCK_FILE), bundle=bundle_obj)
    job.key = pipeline.lock_key(lock_files, recipe)
    return job


def _locked(folder: Path, optional: List[str], uses_conda: bool) -> Tuple[str, list, dict]:
    """(this platform, its locked conda packages, {lock name: path}) from the profile folder's locks."""
    from rattler import Platform

    platform = str(Platform.current())
    conda: list = []
    lock_files = {}
    if uses_conda:
        lock_path = folder / condalock.LOCK_FILE
        lock = condalock.read_lock(lock_path)
        if platform not in lock.metadata.platforms:
            raise EnvbuildError(f"{lock_path}: no packages for this platform ({platform}); locked: "
                                f"{', '.join(lock.metadata.platforms)}")
        conda = condalock.locked_conda(lock, platform, ["main"] + optional)
        lock_files[condalock.LOCK_FILE] = lock_path
    if (folder / PIP_LOCK_FILE).is_file():
        lock_files[PIP_LOCK_FILE] = folder / PIP_LOCK_FILE
    return platform, conda, lock_files


def _target(prefix: Optional[str], env_name: Optional[str], profile_name: str) -> Path:
    """--prefix, else $ENVBUILD_ENVS_DIR (or ~/.envbuild/envs)/<--name or the profile name>; never a folder
    that holds something other than a conda environment."""
    if prefix:
        target = Path(prefix).expanduser()
    else:
        envs = Path(os.environ.get("ENVBUILD_ENVS_DIR") or Path.home() / ".envbuild" / "envs").expanduser()
        target = envs / (env_name or profile_name)
    target = target.absolute()
    if target.exists() and (not target.is_dir() or (any(target.iterdir()) and not (target / "conda-meta").is_dir())):
        raise EnvbuildError(f"{target} exists and is not a conda environment; refusing to replace it "
                            f"(choose another --prefix/--name or remove it yourself)")
    return target
