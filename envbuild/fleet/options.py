"""The fleet flags of `envbuild doctor` (--ray, --audit, --slurm, --health-check) and where they lead.

Kept here so that commands/doctor.py only gains one decorator and one dispatch line.
"""
from __future__ import annotations

from typing import Any, Callable, Dict

import click

FLAGS = ("ray", "runtime_env", "deadline", "audit", "collective_mb", "collective_iters", "slurm", "health_check",
         "drain")


def fleet_options(fn: Callable) -> Callable:
    """Add the fleet flags to a click command (innermost first, so --help lists them in this order)."""
    opts = [
        click.option("--ray", "ray", metavar="ADDRESS", is_flag=False, flag_value="auto", default=None,
                     help="Run on every node of this Ray cluster (HOST:PORT of the head, or auto; `--ray` alone = auto)."),
        click.option("--runtime-env", "runtime_env", metavar="JSON|FILE",
                     help="With --ray: the job's runtime_env (as `ray job submit --runtime-env-json`)."),
        click.option("--deadline", "deadline", type=float, metavar="SECONDS",
                     help="With --ray/--health-check: the whole sweep's deadline (default 120 s static, 600 s quick)."),
        click.option("--audit", is_flag=True,
                     help="With --ray: audit each node's Ray worker (libraries, NCCL/CUDA/LD vars) against this shell."),
        click.option("--collective-mb", "collective_mb", type=float, metavar="MB",
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


def wants_fleet(fleet: Dict[str, Any]) -> bool:
    """Whether the fleet path runs; --drain alone is refused here (it would be silently ignored otherwise)."""
    if fleet.get("drain") and not fleet.get("health_check"):
        from envbuild.errors import EnvbuildError

        raise EnvbuildError("--drain works with --health-check (it runs the drain line that mode prints)")
    return bool(fleet.get("ray") or fleet.get("slurm") or fleet.get("health_check"))


def run_fleet(opts: Any, fleet: Dict[str, Any]) -> int:
    """The fleet path of `envbuild doctor`; `opts` is the single-node DoctorOptions the user gave."""
    from envbuild.errors import EnvbuildError

    if fleet.get("ray") and (fleet.get("slurm") or fleet.get("health_check")):
        raise EnvbuildError("--ray and --slurm/--health-check are different launchers: give one")
    if fleet.get("ray"):
        return _ray(opts, fleet)
    from envbuild.fleet import slurm

    if fleet.get("health_check"):
        return slurm.health_check(opts, deadline=fleet.get("deadline"), drain=bool(fleet.get("drain")))
    return slurm.run_slurm(opts)


def _ray(opts: Any, fleet: Dict[str, Any]) -> int:
    from envbuild.fleet.write import write_outputs
    from envbuild.errors import EnvbuildError
    from envbuild.fleet import table
    from envbuild.fleet.ray_sweep import RaySweepOptions, parse_runtime_env, run_sweep

    if opts.root:
        raise EnvbuildError("--ray runs on the live nodes; --root replays a bundle: give one")
    if opts.python or opts.prefix:
        raise EnvbuildError("--ray runs the doctor with the Ray workers' own python: drop --python/--prefix "
                            "(choose the env with --runtime-env or by starting Ray from it)")
    from envbuild.doctor.registry import select, validate_options

    validate_options(opts.options)  # a wrong option is the command line's fault: exit 2 here, not N node errors
    select(opts.checks, opts.skips, mode=opts.mode)
    doctor = {"mode": opts.mode, "profile": opts.profile, "checks": list(opts.checks), "skips": list(opts.skips),
              "strict": opts.strict, "require_gpu": opts.require_gpu, "options": dict(opts.options)}
    sweep = RaySweepOptions(address=fleet["ray"], doctor=doctor, deadline_s=fleet.get("deadline"),
                            runtime_env=parse_runtime_env(fleet.get("runtime_env")), audit=bool(fleet.get("audit")),
                            collective_mb=fleet.get("collective_mb"), collective_iters=fleet.get("collective_iters") or 5)
    fleet_report = run_sweep(sweep)
    write_outputs(fleet_report, opts.json_path, opts.junit_path, opts.prom_path)
    click.echo(table.render(fleet_report, quiet=opts.quiet), nl=False)
    return fleet_report.exit_code()
