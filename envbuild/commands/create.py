"""`envbuild create`: build the profile's locked environment in a staging prefix, verify it, swap it in.

Exit codes: 0 created (or already up to date); 1 the staged env failed the doctor's stack checks; 2 bad
input (unknown profile, stale or malformed lock, tampered archive, missing backend); 130 interrupted
(the previous env is intact; rerun to resume).
"""
from __future__ import annotations

import click

from envbuild.install import backends


@click.command("create")
@click.option("--profile", "-p", "profile_name", default=None, help="Profile to build (default: the only one).")
@click.option("--prefix", "prefix", default=None, metavar="DIR", help="Target prefix.")
@click.option("--name", "-n", "env_name", default=None,
              help="Env name: a prefix under $ENVBUILD_ENVS_DIR or ~/.envbuild/envs (default: the profile name).")
@click.option("--bundle", "bundle", default=None, metavar="FILE", help="Offline bundle from `envbuild pack`.")
@click.option("--dry-run", is_flag=True, help="Show the plan (what, how big, from where) and stop.")
@click.option("--backend", type=click.Choice(backends.NAMES), default=backends.DEFAULT, show_default=True,
              help="Installer of the base layer (envbuild.install.backends); micromamba/conda must be on PATH.")
@click.option("--python", "python", default=None, metavar="PATH",
              help="--backend venv: the interpreter (of the profile's Python version) the env is built on.")
@click.option("--force", is_flag=True, help="Rebuild even if the target was built from the same locks.")
@click.option("--lockfiles", default=None, metavar="DIR",
              help="Folder of profiles (default: $ENVBUILD_LOCKFILES, else the repository's lockfiles/).")
@click.option("-q", "--quiet", is_flag=True,
              help="No phase lines (stderr): only the plan, the notes, the doctor gate and the closing line.")
def create(profile_name, prefix, env_name, bundle, dry_run, backend, python, force, lockfiles, quiet) -> int:
    """Build the profile's pinned environment, atomically (resumable after any interruption)."""
    from envbuild.install import pipeline
    from envbuild.install.create_ui import CreateUI
    from envbuild.install.resolve import resolve_job

    ui = CreateUI(quiet=quiet)
    with ui.phase("read the profile and its locks" + (" (open and verify the bundle)" if bundle else ""),
                  reads_input=True):
        job = resolve_job(profile_name, prefix=prefix, env_name=env_name, bundle=bundle, backend=backend,
                          lockfiles=lockfiles, python=python)
    ui.plan(job)
    if dry_run:
        return 0
    if not force and pipeline.already_built(job):
        ui.note(f"{job.target} is already built from these locks; nothing to do (--force rebuilds)")
        return 0
    from envbuild import children
    from envbuild.install import create_cleanup

    create_cleanup.sweep_for_create()  # what a killed create left: scratch folders, half cache entries
    children.start_watchdog()  # pip/git/compilers never outlive this create, even a SIGKILLed one
    try:
        pipeline.run(job, ui)
    except KeyboardInterrupt:
        ui.note(create_cleanup.interrupted_message(job))
        return 130
    finally:
        children.stop_watchdog()
    ui.done(job)
    return 0
