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
@cmdoptions.quiet("No phase lines on stderr; print only the summary line.")
def pack(profile_name, output, lockfiles, wheel_cache, tool_python, tool_index, quiet) -> int:
    """Write an offline bundle: indexed conda channel, wheelhouse, source-built wheels, git mirrors, locks."""
    from pathlib import Path

    from envbuild.lock.freshness import require_fresh
    from envbuild.pack.builder import make_bundle
    from envbuild.outputs import check_output_file

    from envbuild.progress import Steps

    check_output_file(output, "--output", allow_stdout=False)
    from envbuild.profile import load_profile, lockfiles_base, select_profile

    steps = Steps("pack", quiet=quiet)
    base = lockfiles_base(lockfiles)
    with steps.phase("read the profile and check its locks are fresh", reads_input=True):
        profile = load_profile(select_profile(base, profile_name), base)
        require_fresh(profile, profile.require_recipe())  # a stale bundle would be found out only on the air-gapped node
    s = make_bundle(profile.name, Path(output), lockfiles=str(base),
                    wheel_cache=Path(wheel_cache) if wheel_cache else None, steps=steps,
                    tool_python=tool_python, tool_index=tool_index)
    tool = f", {s.tool_wheels} wheels of envbuild's dependencies for Python {tool_python}" if tool_python else ""
    click.echo(f"wrote {s.output} ({s.size_bytes / 1e6:.1f} MB): {s.conda_archives} conda archives, {s.wheels} wheels, "
               f"{len(s.builds)} prebuilt source builds, {len(s.git_mirrors)} git mirrors{tool}")
    if s.skipped_builds:
        click.echo(f"note: no cached wheel for {', '.join(s.skipped_builds)}; create --bundle will build them from "
                   "the bundled git mirrors (the env needs their build tools)", err=True)
    return 0
