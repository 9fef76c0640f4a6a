"""`envbuild doctor`: static node and stack checks, GPU probes with --quick/--full, reports.

The arguments become one settings value first (envbuild/doctor/settings.py, envbuild/fleet/options.py): the
profile loaded, the `--set` values typed and bounded, the checks selected, every report path checked. Only then
does any check run.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import click

from envbuild import cmdoptions
from envbuild.fleet.options import fleet_options
from envbuild.report.writers import DOCTOR_WRITERS


@click.command("doctor")
@cmdoptions.profile("Compare the env with this reference-image profile.")
@click.option("--python", "python", metavar="PATH", help="Python of the environment under test (default: this one).")
@click.option("--prefix", metavar="DIR", help="Environment prefix under test (uses DIR/bin/python).")
@click.option("--root", metavar="DIR", help="Diagnose a bundle from `envbuild capture --node DIR` instead of this node.")
@click.option("--quick", "mode", flag_value="quick", help="Also run short GPU probes.")
@click.option("--full", "mode", flag_value="full", help="Also run the long GPU probes and the train step.")
@cmdoptions.gpus("GPU indices to probe, e.g. 0,1 (default: all).")
@click.option("--check", "checks", multiple=True, metavar="ID", help="Run only checks matching this id, glob or category.")
@click.option("--skip", "skips", multiple=True, metavar="ID", help="Do not run checks matching this id, glob or category.")
@click.option("--list", "list_only", is_flag=True, help="List the checks and exit.")
@click.option("--list-options", "list_options", is_flag=True, help="List the --set options of the checks and exit.")
@click.option("--strict", is_flag=True, help="Treat warnings as failures in the exit code.")
@click.option("--require-gpu", is_flag=True, help="Fail (not skip) when no GPU or driver is usable.")
@cmdoptions.report_outputs(DOCTOR_WRITERS)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Option for a check, e.g. train.layers=4 (--list-options shows them all, with their bounds).")
@click.option("--soak", type=click.IntRange(min=1, max=100_000), metavar="N",
              help="Run the train step's slime cycle N times (a soak; implies --full; = --set train.steps=N).")
@cmdoptions.quiet("Print only the verdict line.")
@fleet_options
def doctor(profile_name: Optional[str], python: Optional[str], prefix: Optional[str], root: Optional[str],
           mode: Optional[str], gpus: Optional[List[int]], checks: Tuple[str, ...], skips: Tuple[str, ...],
           list_only: bool, list_options: bool, strict: bool, require_gpu: bool, json_path: Optional[str],
           junit_path: Optional[str], prom_path: Optional[str], html_path: Optional[str], sets: Tuple[str, ...],
           soak: Optional[int], quiet: bool, **fleet_flags) -> int:
    """Prove the node and the environment sound, and name the mismatch behind CUDA error 999.

    Exit code: 0 no failure, 1 a failure (or a warning with --strict), 2 bad usage or input.

    \b
    Examples:
      envbuild doctor --profile slime-v0.3.1-cu130 --prefix ~/envs/slime
      envbuild doctor --profile slime-v0.3.1-cu130 --prefix ~/envs/slime --quick
    """
    from envbuild.doctor.interrupt import Stopped, stop_on_signals
    from envbuild.doctor.session import run_doctor, start_stack_ahead
    from envbuild.doctor.settings import resolve_doctor, run_mode
    from envbuild.fleet.options import check_outputs, resolve_fleet, run_fleet

    fleet = resolve_fleet(fleet_flags)
    ahead = None
    try:
        try:
            # SIGTERM and SIGHUP too end the probe started ahead and its gate directory, as Ctrl-C does: by default
            # they would kill this process while it resolves the options and leave both to the leftover sweep
            with stop_on_signals():
                if not (list_only or list_options or fleet.wanted):
                    # this node's run: its stack probe starts while the options below are resolved
                    ahead = start_stack_ahead(mode=run_mode(mode, soak), python=python, prefix=prefix, root=root,
                                              checks=checks, skips=skips)
                opts = resolve_doctor(profile_name=profile_name, python=python, prefix=prefix, root=root,
                                      mode=mode, gpus=gpus, checks=checks, skips=skips, list_only=list_only,
                                      list_options=list_options, strict=strict, require_gpu=require_gpu, sets=sets,
                                      soak=soak, quiet=quiet,
                                      outputs={"json_path": json_path, "junit_path": junit_path,
                                               "prom_path": prom_path, "html_path": html_path})
                if not (list_only or list_options):
                    check_outputs(opts, fleet)
        except Stopped as stop:
            click.echo(f"envbuild: STOPPED by {stop.name} before the checks started; no report written", err=True)
            return stop.exit_code
        if list_only or list_options:
            return run_doctor(opts)
        return run_fleet(opts, fleet) if fleet.wanted else run_doctor(opts, ahead)
    finally:
        if ahead is not None:  # bad input or a stop before the run took it over: no probe outlives the command
            ahead.close()
