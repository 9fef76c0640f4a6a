"""The fleet flags of `envbuild doctor` (--ray, --audit, --slurm, --health-check) and where they lead.

Kept here so that commands/doctor.py only gains one decorator and one dispatch line. The flags are resolved
once (resolve_fleet: bounds, which launcher, the runtime_env read) and the report paths checked for the launcher
that will write them (check_outputs), before any node is asked anything.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional

import click

from envbuild import cmdoptions
from envbuild.errors import EnvbuildError

FLAGS = ("ray", "runtime_env", "deadline", "audit", "collective_mb", "collective_iters", "slurm", "health_check",
         "drain")
MAX_COLLECTIVE_MB = 16384.0  # 16 GB per message: more than any GPU of today can hold twice


def fleet_options(fn: Callable) -> Callable:
    """Add the fleet flags to a click command (innermost first, so --help lists them in this order)."""
    opts = [
        click.option("--ray", "ray", metavar="ADDRESS", is_flag=False, flag_value="auto", default=None,
                     help="Run on every node of this Ray cluster (HOST:PORT of the head, or auto; `--ray` alone = auto)."),
        click.option("--runtime-env", "runtime_env", metavar="JSON|FILE",
                     help="With --ray: the job's runtime_env (as `ray job submit --runtime-env-json`)."),
        cmdoptions.deadline("With --ray/--health-check: the whole sweep's deadline (default 120 s static, 600 s "
                            "quick; at most 50 s with --health-check)."),
        click.option("--audit", is_flag=True,
                     help="With --ray: audit each node's Ray worker (libraries, NCCL/CUDA/LD vars) against this shell."),
        click.option("--collective-mb", "collective_mb", type=cmdoptions.Positive(MAX_COLLECTIVE_MB), metavar="MB",
                     help="With --ray --quick: message size of the cross-node collectives (64 NCCL, 8 gloo)."),
        click.option("--collective-iters", "collective_iters", type=click.IntRange(1, 10000), default=5,
                     show_default=True, help="With --ray --quick: timed iterations of each collective."),
        click.option("--slurm", is_flag=True,
                     help="Under srun: name the report by SLURMD_NODENAME; --json DIR gets DIR/<node>.json."),
        click.option("--health-check", "health_check", is_flag=True,
                     help="Slurm HealthCheckProgram/prolog mode: static checks within 50 s, one drain line."),
        click.option("--drain", is_flag=True,
                     help="With --health-check: run the printed `scontrol update ... State=DRAIN` on a node problem."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


@dataclass
class FleetSettings:
    """The fleet flags, resolved: which launcher runs the doctor and with what."""

    ray: Optional[str] = None
    runtime_env: Optional[Dict[str, Any]] = None
    deadline: Optional[float] = None
    audit: bool = False
    collective_mb: Optional[float] = None
    collective_iters: int = 5
    slurm: bool = False
    health_check: bool = False
    drain: bool = False

    @property
    def wanted(self) -> bool:
        return bool(self.ray or self.slurm or self.health_check)


def resolve_fleet(given: Dict[str, Any]) -> FleetSettings:
    """FleetSettings from the click values; a flag without its launcher, or two launchers, is bad usage (exit 2)."""
    from envbuild.fleet.slurm import HEALTH_BUDGET_S

    fleet = FleetSettings(**{k: given[k] for k in FLAGS if given.get(k) is not None})
    if fleet.ray and (fleet.slurm or fleet.health_check):
        raise EnvbuildError("--ray and --slurm/--health-check are different launchers: give one")
    for flag, value, needs in (("--runtime-env", fleet.runtime_env, fleet.ray), ("--audit", fleet.audit, fleet.ray),
                               ("--collective-mb", fleet.collective_mb, fleet.ray),
                               ("--drain", fleet.drain, fleet.health_check),
                               ("--deadline", fleet.deadline, fleet.ray or fleet.health_check)):
        if value and not needs:
            launcher = "--health-check" if flag == "--drain" else ("--ray or --health-check" if flag == "--deadline"
                                                                    else "--ray")
            raise EnvbuildError(f"{flag} goes with {launcher}; without it the flag would do nothing")
    if fleet.health_check and fleet.deadline is not None and fleet.deadline > HEALTH_BUDGET_S:
        raise EnvbuildError(f"--deadline {fleet.deadline:g}: must be at most {HEALTH_BUDGET_S:g} seconds with "
                            "--health-check (Slurm kills a HealthCheckProgram after 60 s)")
    if fleet.slurm:
        from envbuild.fleet.slurm import require_job

        require_job()
    if fleet.ray:
        from envbuild.fleet.ray_sweep import parse_runtime_env

        fleet.runtime_env = parse_runtime_env(given.get("runtime_env"))
    return fleet


def check_outputs(opts: Any, fleet: FleetSettings) -> None:
    """Check every report path of the run before any work, for the launcher that will write it: a fleet's
    writers for --ray, one file per node for --slurm/--health-check, one node's writers otherwise."""
    from envbuild.outputs import check_outputs as check_all

    if fleet.ray:
        from envbuild.fleet.writers import FLEET_WRITERS

        check_all(FLEET_WRITERS, opts)
        return
    from envbuild.report.writers import DOCTOR_WRITERS

    if fleet.slurm or fleet.health_check:
        from envbuild.fleet.slurm import check_json_target

        check_json_target(opts.json_path, per_node=fleet.slurm)
        others = [w for w in DOCTOR_WRITERS if w.dest != "json_path"]
        if fleet.health_check:  # the health check's doctor runs in a child that writes the JSON report only
            given = [w.flag for w in others if getattr(opts, w.dest, None)]
            if given:
                raise EnvbuildError(f"{', '.join(given)}: --health-check writes its report with --json only")
        check_all(others, opts)
        return
    check_all(DOCTOR_WRITERS, opts)


def run_fleet(opts: Any, fleet: FleetSettings) -> int:
    """The fleet path of `envbuild doctor`; `opts` is the single-node DoctorOptions the user gave."""
    if fleet.ray:
        return _ray(opts, fleet)
    from envbuild.fleet import slurm

    if fleet.health_check:
        return slurm.health_check(opts, deadline=fleet.deadline, drain=fleet.drain)
    return slurm.run_slurm(opts)


def _ray(opts: Any, fleet: FleetSettings) -> int:
    from envbuild.fleet import table
    from envbuild.fleet.ray_sweep import RaySweepOptions, run_sweep
    from envbuild.fleet.writers import FLEET_WRITERS
    from envbuild.outputs import stdout_claimed, write_outputs

    if opts.root:
        raise EnvbuildError("--ray runs on the live nodes; --root replays a bundle: give one")
    if opts.python or opts.prefix:
        raise EnvbuildError("--ray runs the doctor with the Ray workers' own python: drop --python/--prefix "
                            "(choose the env with --runtime-env or by starting Ray from it)")
    doctor = {"mode": opts.mode, "profile": opts.profile, "checks": list(opts.checks), "skips": list(opts.skips),
              "strict": opts.strict, "require_gpu": opts.require_gpu, "options": dict(opts.options),
              "sets": dict(opts.sets)}
    sweep = RaySweepOptions(address=fleet.ray, doctor=doctor, deadline_s=fleet.deadline,
                            runtime_env=fleet.runtime_env, audit=fleet.audit,
                            collective_mb=fleet.collective_mb, collective_iters=fleet.collective_iters)
    fleet_report = run_sweep(sweep)
    write_outputs(FLEET_WRITERS, opts, fleet_report)
    click.echo(table.render(fleet_report, quiet=opts.quiet), nl=False, err=stdout_claimed())
    return fleet_report.exit_code()
