"""`envbuild create`: build the profile's locked environment in a staging prefix, verify it, swap it in.

Exit codes: 0 created (or already up to date); 1 the staged env failed the doctor's stack checks; 2 bad
input (unknown profile, stale or malformed lock, tampered archive, missing backend); 130 interrupted
(the previous env is intact; rerun to resume); 143 SIGTERM, 129 SIGHUP, likewise.
"""
from __future__ import annotations

import click

from envbuild import cmdoptions
from envbuild.install import backends


@click.command("create")
@cmdoptions.profile("Profile to build (default: the only one).")
@click.option("--prefix", "prefix", default=None, metavar="DIR", help="Target prefix.")
@click.option("--name", "-n", "env_name", default=None,
              help="Env name: a prefix under $ENVBUILD_ENVS_DIR or ~/.envbuild/envs (default: the profile name).")
@click.option("--bundle", "bundle", default=None, metavar="FILE", help="Offline bundle from `envbuild pack`.")
@click.option("--dry-run", is_flag=True, help="Show the plan (what, how big, from where) and stop.")
@click.option("--backend", type=click.Choice(backends.NAMES), default=None,
              help=f"Installer of the base layer (envbuild.install.backends); micromamba/conda must be on PATH "
                   f"(default: {backends.DEFAULT}, or venv for a profile that has only a pip lock).")
@click.option("--python", "python", default=None, metavar="PATH",
              help="--backend venv: the interpreter the env is built on: a path, a command or a version "
                   "(default: a Python of the profile's version found on PATH or under pyenv).")
@cmdoptions.git_mirror
@click.option("--without", "without", multiple=True, metavar="NAME",
              help="Leave out this git source and the builds from it (repeatable); the manifest and the doctor "
                   "show it missing.")
@click.option("--force", is_flag=True, help="Rebuild even if the target was built from the same locks.")
@cmdoptions.lockfiles
@cmdoptions.quiet("No phase lines (stderr): only the plan, the notes, the doctor gate and the closing line.")
def create(profile_name, prefix, env_name, bundle, dry_run, backend, python, git_mirror, without, force, lockfiles,
           quiet) -> int:
    """Build the profile's pinned environment, atomically (resumable after any interruption).

    `envbuild profiles` says which backends each profile's locks allow on this machine.

    \b
    Examples:
      envbuild create --profile slime-v0.3.1-cu130 --backend venv --python 3.12 --prefix ~/envs/slime
      envbuild create --bundle slime.tar --backend venv --python 3.12 --prefix ~/envs/slime
    """
    from envbuild.install import pipeline
    from envbuild.install.create_ui import CreateUI
    from envbuild.install.resolve import resolve_job

    ui = CreateUI(quiet=quiet)
    with ui.phase("read the profile and its locks" + (" (open and verify the bundle)" if bundle else ""),
                  reads_input=True):
        job = resolve_job(profile_name, prefix=prefix, env_name=env_name, bundle=bundle, backend=backend,
                          lockfiles=lockfiles, python=python, git_mirror=git_mirror, without=without)
    ui.plan(job)
    if job.problems:
        from envbuild.errors import EnvbuildError

        git = any(o.all_problems() for o in job.origins)
        raise EnvbuildError(f"{len(job.problems)} problem(s) above; nothing was built" + (
            " (--git-mirror DIR|URL or $ENVBUILD_GIT_MIRROR names the site's git mirror; --without NAME leaves a "
            "source out)" if git else ""))
    if dry_run:
        return 0
    if not force and pipeline.already_built(job):
        ui.note(f"{job.target} is already built from these locks; nothing to do (--force rebuilds)")
        return 0
    from envbuild import children
    from envbuild.install import create_cleanup

    create_cleanup.sweep_for_create()  # what a killed create left: scratch folders, half cache entries
    from envbuild.doctor.interrupt import Stopped, stop_on_signals

    children.start_watchdog()  # pip/git/compilers never outlive this create, even a SIGKILLed one
    try:
        with stop_on_signals():  # SIGTERM (scancel, timeout) and SIGHUP stop as cleanly as Ctrl-C
            pipeline.run(job, ui)
    except (KeyboardInterrupt, Stopped) as exc:
        ui.note(create_cleanup.interrupted_message(job))
        return exc.exit_code if isinstance(exc, Stopped) else 130
    finally:
        children.stop_watchdog()
    ui.done(job)
    return 0
