"""What one `envbuild doctor` was asked, resolved once before any work (as uv's settings turn CLI, environment
and files into one value first): the loaded profile, the typed and bounded `--set` values, the checks the
patterns select. Everything below (the session, the checks through ctx.option, the fleet launchers) reads these
values and parses nothing again; anything wrong is one line and exit 2 before a check runs.

The report paths are checked by the launcher that writes them (envbuild/fleet/options.py check_outputs): one
node's writers, a fleet's, or Slurm's one file per node.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from envbuild.doctor.session import DoctorOptions
from envbuild.errors import EnvbuildError


def parse_sets(values: Sequence[str]) -> Dict[str, str]:
    """`--set KEY=VALUE` items as given (the report records them so); a later KEY replaces an earlier one."""
    out: Dict[str, str] = {}
    for item in values:
        if "=" not in item:
            raise EnvbuildError(f"--set {item!r}: expected KEY=VALUE")
        key, val = item.split("=", 1)
        out[key.strip()] = val.strip()
    return out


def with_soak(sets: Dict[str, str], soak: Optional[int]) -> Dict[str, str]:
    """--soak N is train.steps=N; giving both with different values is a usage error, not a silent choice."""
    if soak is None:
        return sets
    if sets.get("train.steps", str(soak)) != str(soak):
        raise EnvbuildError(f"--soak {soak} and --set train.steps={sets['train.steps']} disagree")
    return {**sets, "train.steps": str(soak)}


def run_mode(mode: Optional[str], soak: Optional[int]) -> str:
    """The mode a run's flags ask for: --soak is a --full run, no flag a static one."""
    return "full" if soak is not None else (mode or "static")


def resolve_doctor(*, profile_name: Optional[str], python: Optional[str], prefix: Optional[str],
                   root: Optional[str], mode: Optional[str], gpus: Optional[List[int]], checks: Tuple[str, ...],
                   skips: Tuple[str, ...], list_only: bool, list_options: bool, strict: bool, require_gpu: bool,
                   outputs: Dict[str, Optional[str]], sets: Tuple[str, ...], soak: Optional[int],
                   quiet: bool) -> DoctorOptions:
    """The run's DoctorOptions, every value checked: bad usage raises EnvbuildError (exit 2) before any work."""
    from envbuild.doctor.registry import select, validate_options
    from envbuild.doctor.session import resolve_python

    if soak is not None and mode == "quick":
        raise EnvbuildError("--soak runs the --full train step; it cannot go with --quick")
    given = with_soak(parse_sets(sets), soak)
    opts = DoctorOptions(python=python, prefix=prefix, root=root,
                         mode=run_mode(mode, soak), gpus=gpus, checks=list(checks),
                         skips=list(skips), list_only=list_only, list_options=list_options, strict=strict,
                         require_gpu=require_gpu, sets=given, quiet=quiet, **outputs)
    if list_only or list_options:
        return opts
    opts.options = validate_options(given)  # an undeclared key, a malformed or out-of-bounds value
    select(opts.checks, opts.skips, mode=opts.mode)  # a pattern matching nothing
    if python or prefix:
        resolve_python(python, prefix)  # both given, or one that names no interpreter
    if profile_name:
        from envbuild.profile import load_profile, profile_path

        opts.profile = str(profile_path(profile_name))
        opts.loaded_profile = load_profile(opts.profile)
    return opts
