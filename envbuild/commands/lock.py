"""`envbuild lock`: solve each profile's recipe and write its hashed lockfiles, or `--check` them.

stdout carries the results (`fx: wrote ...`, `fx: fresh`, the diff); stderr the phases as they run
(envbuild.progress.Steps; `--quiet` drops them).

Exit codes: 0 written / fresh; 1 `--check` found a stale lock (a unified diff is printed); 2 bad input or a
solve that cannot succeed (the message names the profile, the spec and the channels).
"""
from __future__ import annotations

import click

from envbuild import cmdoptions


@click.command("lock")
@cmdoptions.profile("Profile name (repeatable; default: all profiles).", multiple=True)
@click.option("--check", is_flag=True,
              help="Do not write: re-resolve and exit 1 with a diff when the lock on disk differs by a byte.")
@click.option("--inputs-only", is_flag=True,
              help="With --check: compare the locks' recorded inputs with the profile only (fast, offline; it "
                   "cannot see a release that a re-resolve would pick).")
@cmdoptions.lockfiles
@click.option("--only", "only", type=click.Choice(["conda", "pip"]), default=None,
              help="Lock one layer (e.g. the pip layer where no conda channel is reachable).")
@click.option("--upgrade", is_flag=True,
              help="Pip layer: take the newest files before the cutoff instead of keeping the versions the "
                   "existing lock pins (a re-lock without it changes only what the profile's changes need).")
@cmdoptions.quiet("No phase lines on stderr; only the results on stdout.")
def lock(profiles, check, inputs_only, lockfiles, only, upgrade, quiet) -> int:
    """Solve and write conda-lock.yml (+ the pip layer lock) for each profile, or --check them.

    `--only pip` needs PyPI (or the profile's indexes) only, no conda channel: enough for --backend venv.

    \b
    Examples:
      envbuild lock --profile slime-v0.3.1-cu130 --only pip
      envbuild lock --check --profile slime-v0.3.1-cu130
      envbuild lock --profile slime-v0.3.1-cu130 --only pip --upgrade
    """
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
    if inputs_only and not check:
        raise EnvbuildError("--inputs-only goes with --check")
    if upgrade and check:
        raise EnvbuildError("--upgrade goes without --check (a check asks whether a re-lock keeps the lock's bytes)")
    layers = (only,) if only else lockset.LAYERS
    stale = failed = 0
    for name in names:
        try:
            if check:
                stale += _check_one(base, name, out, steps, layers, inputs_only)
            else:
                _lock_one(base, name, out, steps, layers, upgrade)
        except EnvbuildError as exc:
            if len(names) == 1:
                raise
            failed += 1
            err.print(f"{name}: error: {exc}", markup=False)
    if failed:
        return 2
    return 1 if stale else 0


def _lock_one(base, name, out, steps, layers, upgrade: bool) -> None:
    from envbuild.lock import lockset
    from envbuild.profile import load_profile
    from envbuild.progress import fmt_bytes

    with steps.phase(f"{name}: read the profile", reads_input=True):
        profile = load_profile(name, base)
        recipe = profile.require_recipe()
    outputs = lockset.compute(profile, recipe, steps=steps, layers=layers, upgrade=upgrade)
    with steps.phase(f"{name}: write the lockfiles") as ph:
        written = lockset.write(outputs, layers)
        size = sum((outputs.folder / f).stat().st_size for f in written if (outputs.folder / f).is_file())
        ph.result = f"{len(written)} changed, {fmt_bytes(size)}" if written else "all up to date"
    if written:
        out.print(f"{name}: wrote {', '.join(written)} in {outputs.folder}")
    else:
        out.print(f"{name}: up to date ({', '.join(sorted(outputs.files))})")


def _check_one(base, name, out, steps, layers, inputs_only: bool) -> int:
    """1 when stale (reasons and diff printed), 0 when fresh. Fresh means: the inputs match and, unless
    `inputs_only`, a re-resolve now gives the same bytes as the lock on disk."""
    from envbuild.errors import EnvbuildError
    from envbuild.lock import lockset
    from envbuild.lock.freshness import stale_reasons
    from envbuild.profile import load_profile

    with steps.phase(f"{name}: check the locks' inputs against the profile", reads_input=True) as ph:
        profile = load_profile(name, base)
        recipe = profile.require_recipe()
        reasons = stale_reasons(profile, recipe, layers)
        ph.result = f"stale: {len(reasons)} reason(s)" if reasons else "inputs match"
    label = f"{base.name}/{name}"
    if inputs_only:
        if not reasons:
            out.print(f"{name}: fresh (inputs only: not re-resolved)")
            return 0
        files = lockset.spec_outputs(profile, recipe).files
    else:
        try:
            files = lockset.compute(profile, recipe, steps=steps, layers=layers).files
        except EnvbuildError as exc:
            if not reasons:
                raise EnvbuildError(f"{name}: cannot re-resolve here ({exc}); `lock --check --inputs-only` "
                                    f"compares the inputs alone") from exc
            out.print(f"{name}: STALE")
            for r in reasons:
                out.print(f"  - {r}")
            out.print(f"  (could not re-solve here, showing the input difference only: {exc})")
            files = lockset.spec_outputs(profile, recipe).files
            out.out(lockset.unified_diff(profile.directory, files, label), end="")
            out.print(f"{name}: run `envbuild lock --profile {name}` to refresh")
            return 1
    diff = lockset.unified_diff(profile.directory, files, label)
    if not reasons and not diff:
        out.print(f"{name}: fresh (re-resolved: the same bytes)")
        return 0
    out.print(f"{name}: STALE")
    for r in reasons:
        out.print(f"  - {r}")
    if not reasons:
        out.print("  - a re-resolve now picks other files than the lock holds (an upload the cutoff did not hide?)")
    out.out(diff, end="")
    out.print(f"{name}: run `envbuild lock --profile {name}` to refresh")
    return 1
