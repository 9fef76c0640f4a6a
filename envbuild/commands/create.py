"""`envbuild create`: build the profile's locked environment in a staging prefix, verify it, swap it in.

Exit codes: 0 created (or already up to date); 1 the staged env failed the doctor's stack checks; 2 bad
input (unknown profile, stale or malformed lock, tampered archive, missing backend); 130 interrupted
(the previous env is intact; rerun to resume).
"""
from __future__ import annotations

import click


@click.command("create")
@click.option("--profile", "-p", "profile_name", default=None, help="Profile to build (default: the only one).")
@click.option("--prefix", "prefix", default=None, metavar="DIR", help="Target prefix.")
@click.option("--name", "-n", "env_name", default=None,
              help="Env name: a prefix under $ENVBUILD_ENVS_DIR or ~/.envbuild/envs (default: the profile name).")
@click.option("--bundle", "bundle", default=None, metavar="FILE", help="Offline bundle from `envbuild pack`.")
@click.option("--dry-run", is_flag=True, help="Show the plan (what, how big, from where) and stop.")
@click.option("--backend", type=click.Choice(["rattler", "micromamba", "conda"]), default="rattler",
              show_default=True, help="Conda layer installer; micromamba/conda must be on PATH.")
@click.option("--force", is_flag=True, help="Rebuild even if the target was built from the same locks.")
@click.option("--lockfiles", default=None, metavar="DIR",
              help="Folder of profiles (default: $ENVBUILD_LOCKFILES, else the repository's lockfiles/).")
def create(profile_name, prefix, env_name, bundle, dry_run, backend, force, lockfiles) -> int:
    """Build the profile's pinned environment, atomically (resumable after any interruption)."""
    from envbuild.errors import EnvbuildError
    from envbuild.install import manifest, pipeline
    from envbuild.install.create_ui import CreateUI

    ui = CreateUI()
    if prefix and env_name:
        raise EnvbuildError("give --prefix or --name, not both")
    job = _resolve(profile_name, prefix, env_name, bundle, backend, lockfiles)
    ui.plan(job)
    if dry_run:
        return 0
    existing = manifest.read(job.target)
    if existing and existing.get("lock_key") == job.key and not force:
        from envbuild.install.staging import Staging

        Staging(job.target, job.key).tidy()
        ui.note(f"{job.target} is already built from these locks; nothing to do (--force rebuilds)")
        return 0
    from envbuild import children, leftovers

    leftovers.sweep_for_create()  # what a killed create left: scratch folders, half cache entries
    children.start_watchdog()  # pip/git/compilers never outlive this create, even a SIGKILLed one
    try:
        pipeline.run(job, ui)
    except KeyboardInterrupt:
        ui.note(leftovers.interrupted_message(job))
        return 130
    finally:
        children.stop_watchdog()
    ui.done(job)
    return 0


def _resolve(profile_name, prefix, env_name, bundle, backend, lockfiles):
    """Everything the plan shows, read and checked before anything is written."""
    import os
    from pathlib import Path

    from envbuild.errors import EnvbuildError
    from envbuild.install import conda_layer, pipeline
    from envbuild.lock import condalock, lockset

    bundle_obj, mirrors = None, []
    if bundle:
        from envbuild.pack.bundle import open_bundle

        bundle_obj = open_bundle(Path(bundle))
        mirrors = [bundle_obj.channel_dir]
        lockfiles = lockfiles or str(bundle_obj.lock_dir)
    base = lockset.lockfiles_base(lockfiles)
    profile, recipe = lockset.load(base, lockset.select_profile(base, profile_name))
    folder = profile.directory
    lock_path = folder / condalock.LOCK_FILE
    if not lock_path.is_file():
        raise EnvbuildError(f"{lock_path} does not exist; run `envbuild lock --profile {profile.name}`")
    lock = condalock.read_lock(lock_path)

    from rattler import Platform

    platform = str(Platform.current())
    if platform not in lock.metadata.platforms:
        raise EnvbuildError(f"{lock_path}: no packages for this platform ({platform}); locked: "
                            f"{', '.join(lock.metadata.platforms)}")
    # the same content hash `envbuild lock` wrote; "" (never a stored hash) for a platform the recipe dropped
    if lock.metadata.content_hash.get(platform) != lockset.spec_outputs(profile, recipe).hashes.get(platform, ""):
        raise EnvbuildError(f"{lock_path} is stale against {profile.path} (the recipe changed since it was "
                            f"locked); run `envbuild lock --profile {profile.name}`")
    categories = ["main"] + sorted(recipe.conda.optional)
    conda = condalock.locked_conda(lock, platform, categories)
    lock_files = {condalock.LOCK_FILE: lock_path}
    pip_lock = folder / lockset.PIP_LOCK_FILE
    if pip_lock.is_file():
        lock_files[lockset.PIP_LOCK_FILE] = pip_lock
    if prefix:
        target = Path(prefix).expanduser()
    else:
        envs = Path(os.environ.get("ENVBUILD_ENVS_DIR") or Path.home() / ".envbuild" / "envs").expanduser()
        target = envs / (env_name or profile.name)
    target = target.absolute()
    from envbuild.install.activation import check_prefix

    check_prefix(target)  # a prefix the activation scripts cannot hold is refused before anything is built
    if target.exists() and (not target.is_dir() or (any(target.iterdir()) and not (target / "conda-meta").is_dir())):
        raise EnvbuildError(f"{target} exists and is not a conda environment; refusing to replace it "
                            f"(choose another --prefix/--name or remove it yourself)")
    job = pipeline.CreateJob(profile=profile, recipe=recipe, target=target, platform=platform,
                             backend=backend, lock_files=lock_files, conda=conda,
                             planned=conda_layer.plan(conda, mirrors, offline=bundle_obj is not None),
                             pip_lock=lock_files.get(lockset.PIP_LOCK_FILE), bundle=bundle_obj)
    job.key = pipeline.lock_key(lock_files, recipe)
    return job
