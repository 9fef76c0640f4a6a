"""`envbuild pack`: one tar file with everything `envbuild create --bundle` needs on an air-gapped node.

Exit codes: 0 written; 2 bad input (unknown profile, missing or malformed lock, a file that does not match
its lock hash, a git commit that is not in its repository).
"""
from __future__ import annotations

import click

from envbuild import cmdoptions


@click.command("pack")
@cmdoptions.profile("Profile to pack (default: the only one).")
@click.option("--output", "-o", "output", required=True, metavar="FILE", help="The bundle to write (a .tar).")
@cmdoptions.lockfiles
@click.option("--wheel-cache", "wheel_cache", default=None, metavar="DIR",
              help="Source-build wheel cache to take prebuilt wheels from (default: $ENVBUILD_WHEEL_CACHE, "
                   "else the envbuild cache's source-wheels/).")
@click.option("--tool-python", "tool_python", default=None, metavar="X.Y",
              help="Also bundle envbuild's own dependency wheels for this python3 version (the nodes' system "
                   "Python), so build_conda.sh bootstraps envbuild with no PyPI.")
@click.option("--tool-index", "tool_index", default=None, metavar="URL",
              help="Simple index for --tool-python's wheels (default: PyPI).")
@cmdoptions.git_mirror
@cmdoptions.quiet("No phase lines on stderr; print only the summary line.")
def pack(profile_name, output, lockfiles, wheel_cache, tool_python, tool_index, git_mirror, quiet) -> int:
    """Write an offline bundle: indexed conda channel, wheelhouse, source-built wheels, git mirrors, locks.

    A profile with only a pip lock (`envbuild lock --only pip`, no conda channel needed) gives the venv bundle:
    the same parts without the conda channel, for `create --bundle FILE --backend venv --python PATH`
    (layout: docs/bundles.md).

    \b
    Examples:
      envbuild pack --profile slime-v0.3.1-cu130 -o slime.tar
      envbuild create --bundle slime.tar --backend venv --python 3.12 --prefix ~/envs/slime
    """
    from pathlib import Path

    from envbuild.lock.freshness import require_fresh
    from envbuild.pack.builder import bundle_layers, make_bundle
    from envbuild.outputs import check_output_file

    from envbuild.progress import Steps

    check_output_file(output, "--output", allow_stdout=False)
    from envbuild.profile import load_profile, lockfiles_base, select_profile

    steps = Steps("pack", quiet=quiet)
    base = lockfiles_base(lockfiles)
    with steps.phase("read the profile and check its locks are fresh", reads_input=True):
        profile = load_profile(select_profile(base, profile_name), base)
        # a stale bundle would be found out only on the air-gapped node
        require_fresh(profile, profile.require_recipe(), bundle_layers(profile))
        from envbuild.install.git_mirror import mirror_from

        mirror = mirror_from(git_mirror)
    s = make_bundle(profile.name, Path(output), lockfiles=str(base),
                    wheel_cache=Path(wheel_cache) if wheel_cache else None, steps=steps,
                    tool_python=tool_python, tool_index=tool_index, git_mirror=mirror)
    tool = f", {s.tool_wheels} wheels of envbuild's dependencies for Python {tool_python}" if tool_python else ""
    conda = f"{s.conda_archives} conda archives" if "conda" in s.layers else "venv bundle (no conda layer)"
    click.echo(f"wrote {s.output} ({s.size_bytes / 1e6:.1f} MB): {conda}, {s.wheels} wheels, "
               f"{len(s.builds)} prebuilt source builds, {len(s.git_mirrors)} git mirrors{tool}")
    if "conda" not in s.layers:
        click.echo(f"note: {profile.directory.name} has no conda-lock.yml, so the bundle holds the venv path: "
                   f"create it with `envbuild create --bundle {output} --backend venv --python PATH` "
                   f"(a Python {profile.python} on the target)", err=True)
    if s.skipped_builds:
        click.echo(f"note: no cached wheel for {', '.join(s.skipped_builds)}; left to compile on the target: "
                   "create --bundle builds them from the bundled git mirrors (the env needs their build tools)",
                   err=True)
    return 0
