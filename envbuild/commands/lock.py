"""`envbuild lock`: solve each profile's recipe and write its hashed lockfiles, or `--check` them.

stdout carries the results (`fx: wrote ...`, `fx: fresh`, the diff); stderr the phases as they run
(envbuild.progress.Steps; `--quiet` drops them).

Exit codes: 0 written / fresh; 1 `--check` found a stale lock (a unified diff is printed); 2 bad input or a
solve that cannot succeed (the message names the profile, the spec and the channels).
"""
from __future__ import annotations

import click


@click.command("lock")
@click.option("--profile", "-p", "profiles", multiple=True, help="Profile name (repeatable; default: all profiles).")
@click.option("--check", is_flag=True, help="Do not write: exit 1 with a diff when a lock is stale against its profile.")
@click.option("--lockfiles", "lockfiles", default=None, metavar="DIR",
              help="Folder of profiles (default: $ENVBUILD_LOCKFILES, else the repository's lockfiles/).")
@click.option("--only", "only", type=click.Choice(["conda", "pip"]), default=None,
              help="Lock one layer (e.g. the pip layer where no conda channel is reachable).")
@click.option("-q", "--quiet", is_flag=True, help="No phase lines on stderr; only the results on stdout.")
def lock(profiles, check, lockfiles, only, quiet) -> int:
    """Solve and write conda-lock.yml (+ the pip layer lock) for each profile, or --check them."""
    from rich.console import Console

    from envbuild.errors import EnvbuildError
    from envbuild.lock import lockset
    from envbuild.profile import lockfiles_base, select_profiles
    from envbuild.progress import Steps

    steps = Steps("lock", quiet=quiet)
    err = Console(stderr=True, highlight=False)
    out = Console(highlight=False, soft_wrap=True, markup=False)
    base = lockfiles_base(lockfiles)
    names = select_profiles(base, tuple(profiles))
    if not names:
        raise EnvbuildError(f"no profiles in {base}")
    stale = failed = 0
    for name in names:
        try:
            if check:
                stale += _check_one(base, name, out, steps)
            else:
                _lock_one(base, name, out, steps, (only,) if only else lockset.LAYERS)
        except EnvbuildError as exc:
            if len(names) == 1:
                raise
            failed += 1
            err.print(f"{name}: error: {exc}", markup=False)
    if failed:
        return 2
    return 1 if stale else 0


def _lock_one(base, name, out, steps, layers) -> None:
    from envbuild.lock import lockset
    from envbuild.profile import load_profile
    from envbuild.progress import fmt_bytes

    with steps.phase(f"{name}: read the profile", reads_input=True):
        profile = load_profile(name, base)
        recipe = profile.require_recipe()
    outputs = lockset.compute(profile, recipe, steps=steps, layers=layers)
    with steps.phase(f"{name}: write the lockfiles") as ph:
        written = lockset.write(outputs, layers)
        size = sum((outputs.folder / f).stat().st_size for f in written if (outputs.folder / f).is_file())
        ph.result = f"{len(written)} changed, {fmt_bytes(size)}" if written else "all up to date"
    if written:
        out.print(f"{name}: wrote {', '.join(written)} in {outputs.folder}")
    else:
        out.print(f"{name}: up to date ({', '.join(sorted(outputs.files))})")


def _check_one(base, name, out, steps) -> int:
    """1 when stale (diff printed), 0 when fresh."""
    from envbuild.errors import EnvbuildError
    from envbuild.lock import lockset
    from envbuild.lock.freshness import stale_reasons
    from envbuild.profile import load_profile

    with steps.phase(f"{name}: check the locks against the profile", reads_input=True) as ph:
        profile = load_profile(name, base)
        recipe = profile.require_recipe()
        reasons = stale_reasons(profile, recipe)
        ph.result = f"stale: {len(reasons)} reason(s)" if reasons else "fresh"
    if not reasons:
        out.print(f"{name}: fresh")
        return 0
    out.print(f"{name}: STALE")
    for r in reasons:
        out.print(f"  - {r}")
    label = f"{base.name}/{name}"
    try:
        files = lockset.compute(profile, recipe, steps=steps).files  # re-solve to show the difference
    except EnvbuildError as exc:
        out.print(f"  (could not re-solve here, showing the input difference only: {exc})")
        files = lockset.spec_outputs(profile, recipe).files
    out.out(lockset.unified_diff(profile.directory, files, label), end="")
    out.print(f"{name}: run `envbuild lock --profile {name}` to refresh")
    return 1
