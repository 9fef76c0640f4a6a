"""Everything `envbuild create` needs, read and checked before anything is written (so --dry-run shows it).

The command only wires options to `resolve_job`; here the bundle is opened, the profile found through the
profile store, the backend's health checked, the lock held to the one freshness rule, the conda packages of
this platform picked and each archive's source planned, and the target prefix decided and checked.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from envbuild.errors import EnvbuildError
from envbuild.install import backends, conda_layer, pipeline
from envbuild.lock import condalock
from envbuild.lock.freshness import PIP_LOCK_FILE, require_fresh


def resolve_job(profile_name: Optional[str], *, prefix: Optional[str] = None, env_name: Optional[str] = None,
                bundle: Optional[str] = None, backend: Optional[str] = None,
                lockfiles: Optional[str] = None, python: Optional[str] = None, git_mirror: Optional[str] = None,
                without: Sequence[str] = ()) -> pipeline.CreateJob:
    """The CreateJob for these `create` options; EnvbuildError (exit 2) on any bad input, nothing written.

    What would stop the build later (a git source the mirror lacks, a missing toolchain piece) is collected
    in `job.problems` rather than raised, so the plan can show every one of them at once."""
    from envbuild.profile import load_profile, lockfiles_base, select_profile

    if prefix and env_name:
        raise EnvbuildError("give --prefix or --name, not both")
    bundle_obj, mirrors = None, []
    if bundle:
        from envbuild.install.bundle import open_bundle

        bundle_obj = open_bundle(Path(bundle))
        mirrors = list(bundle_obj.channel_dirs)
        lockfiles = lockfiles or str(bundle_obj.lock_dir)
    base = lockfiles_base(lockfiles)
    profile = load_profile(select_profile(base, profile_name), base)
    recipe = profile.require_recipe()
    backend, backend_note = _backend(backend, profile.directory)
    installer = backends.require(backend)
    if bundle_obj is not None and installer.USES_CONDA_LOCK and "conda" not in bundle_obj.layers:
        raise EnvbuildError(f"{bundle} is a venv bundle (its profile had no conda lock): create it with "
                            f"--backend venv --python PATH, not --backend {backend}")
    layers = ("conda", "pip") if installer.USES_CONDA_LOCK else ("pip",)
    require_fresh(profile, recipe, layers)
    platform, conda, lock_files = _locked(profile.directory, sorted(recipe.conda.optional), installer.USES_CONDA_LOCK)
    interpreter = _interpreter(installer, backend, python, profile, recipe, lock_files)
    job = pipeline.CreateJob(profile=profile, recipe=recipe, target=_target(prefix, env_name, profile.name),
                             platform=platform, backend=backend, lock_files=lock_files, conda=conda,
                             planned=conda_layer.plan(conda, mirrors, offline=bundle_obj is not None),
                             pip_lock=lock_files.get(PIP_LOCK_FILE), bundle=bundle_obj, interpreter=interpreter)
    job.backend_note = backend_note
    job.without = _without(recipe, without)
    _locate_git(job, git_mirror)
    job.problems += _toolchain_problems(job)
    job.key = pipeline.lock_key(lock_files, recipe, job.without)
    if interpreter is not None:  # another interpreter is another env
        import hashlib

        job.key = hashlib.sha256(f"{job.key}\0{interpreter}".encode()).hexdigest()
    return job


def _backend(asked: Optional[str], folder: Path) -> Tuple[str, str]:
    """(backend, why it was chosen): --backend when given; else the default conda backend, or the PyPI-only
    venv backend when the profile has a pip lock and no conda lock (so a profile locked where no conda channel
    answers builds with no flag)."""
    if asked:
        return asked, ""
    if not (folder / condalock.LOCK_FILE).is_file() and (folder / PIP_LOCK_FILE).is_file():
        return "venv", f"no {condalock.LOCK_FILE}, only a pip lock: --backend venv"
    return backends.DEFAULT, ""


def _without(recipe, names: Sequence[str]) -> List[str]:
    """--without NAME: git sources (and the builds from them) to leave out, each one a source of the recipe."""
    from envbuild.profile.reader import did_you_mean

    known = [g.name for g in recipe.git]
    for name in names:
        if name not in known:
            raise EnvbuildError(f"--without {name}: the recipe has no git source {name!r}; "
                                f"{did_you_mean(name, known)}its git sources: {', '.join(known) or 'none'}")
    return sorted(set(names))


def _locate_git(job: pipeline.CreateJob, option: Optional[str]) -> None:
    """Where each git source comes from (bundle, --git-mirror / ENVBUILD_GIT_MIRROR, its URL), checked now."""
    from envbuild.install import git_mirror

    if not job.recipe.git:
        return
    bundle_git = getattr(job.bundle, "git_dir", None)
    job.git_mirror = None if bundle_git is not None else git_mirror.mirror_from(option)
    job.origins = git_mirror.locate(job.recipe.git, job.git_mirror, bundle_git, job.without)
    for origin in job.origins:
        job.problems += origin.all_problems()


def _toolchain_problems(job: pipeline.CreateJob) -> List[str]:
    """Toolchain pieces the builds need that no layer provides (the plan names each piece's layer). Only for
    a recipe that declares [recipe.toolchain]: without one, builds (a plain C extension) run with what the
    machine has and no CUDA variables, as source_builds._toolchain_env does."""
    builds = [b for b in job.recipe.builds if b.git not in job.without]
    if not builds or not (job.recipe.toolchain.pip or job.recipe.toolchain.cxx):
        return []
    return [f"source builds need {p.what}: {p.detail}" for p in toolchain_pieces(job) if p.layer == "missing"]


def toolchain_pieces(job: pipeline.CreateJob) -> list:
    """envbuild.install.toolchain.pieces for this job's locks."""
    from envbuild.install.pip_layer import read_locked_entries
    from envbuild.install.toolchain import pieces

    pins = {e.canonical_name: e.version for e in read_locked_entries(job.pip_lock)} if job.pip_lock else {}
    return pieces(job.recipe, pins, [p.name for p in job.conda])


def _interpreter(installer, backend: str, python: Optional[str], profile, recipe, lock_files) -> Optional[Path]:
    """--python for a PyPI-only backend, checked against the profile's Python before anything is written."""
    if installer.USES_CONDA_LOCK:
        if python:
            raise EnvbuildError(f"--python is for --backend venv, not --backend {backend}")
        return None
    from envbuild.install.pip_layer import read_locked_entries

    names = [e.canonical_name for e in read_locked_entries(lock_files[PIP_LOCK_FILE])] if PIP_LOCK_FILE in lock_files else []
    return installer.check_request(python, profile.python, profile.name, names, bool(recipe.git or recipe.builds))


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


def _check_writable(target: Path) -> None:
    """The env's folder must be creatable: its nearest existing ancestor is a directory in which a folder can
    be made (tried, and removed at once: /proc, a read-only mount or a file in the way fail here, not late)."""
    ancestor = target.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise EnvbuildError(f"prefix {target}: {ancestor} is not a directory")
    probe = ancestor / f".envbuild-probe-{os.getpid()}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as exc:
        raise EnvbuildError(f"prefix {target}: cannot create folders in {ancestor} ({exc.strerror or exc}); "
                            f"choose a --prefix on a writable filesystem") from exc


def _target(prefix: Optional[str], env_name: Optional[str], profile_name: str) -> Path:
    """--prefix, else $ENVBUILD_ENVS_DIR (or ~/.envbuild/envs)/<--name or the profile name>; never a folder
    that holds something other than a conda environment."""
    if prefix:
        target = Path(prefix).expanduser()
    else:
        envs = Path(os.environ.get("ENVBUILD_ENVS_DIR") or Path.home() / ".envbuild" / "envs").expanduser()
        target = envs / (env_name or profile_name)
    target = target.absolute()
    from envbuild.install.activation import check_prefix

    check_prefix(target)  # a prefix the activation scripts cannot hold is refused before anything is built
    _check_writable(target)
    built = (target / "conda-meta").is_dir() or (target / "envbuild" / "manifest.json").is_file()  # conda or venv
    if target.exists() and (not target.is_dir() or (any(target.iterdir()) and not built)):
        raise EnvbuildError(f"{target} exists and is not a conda environment; refusing to replace it "
                            f"(choose another --prefix/--name or remove it yourself)")
    return target
