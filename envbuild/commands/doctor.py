"""`envbuild doctor`: static node and stack checks, GPU probes with --quick/--full, reports."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import click

from envbuild.fleet.options import fleet_options


def _parse_gpus(value: Optional[str]) -> Optional[List[int]]:
    if value is None:
        return None
    try:
        return [int(x) for x in value.split(",") if x.strip() != ""]
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected GPU indices like 0,1", param_hint="--gpus")


def _with_soak(sets: Dict[str, str], soak: Optional[int]) -> Dict[str, str]:
    """--soak N is train.steps=N; giving both with different values is a usage error, not a silent choice."""
    if soak is None:
        return sets
    if sets.get("train.steps", str(soak)) != str(soak):
        raise click.UsageError(f"--soak {soak} and --set train.steps={sets['train.steps']} disagree")
    return {**sets, "train.steps": str(soak)}


def _parse_sets(values: Tuple[str, ...]) -> Dict[str, str]:
    out: Dict[str, str] = {}
    for item in values:
        if "=" not in item:
            raise click.BadParameter(f"{item!r}: expected KEY=VALUE", param_hint="--set")
        key, val = item.split("=", 1)
        out[key.strip()] = val.strip()
    return out


def _profile_file(name: Optional[str]) -> Optional[str]:
    """--profile through the one profile store ($ENVBUILD_LOCKFILES, else envbuild's lockfiles/)."""
    from envbuild.profile import profile_path

    return str(profile_path(name)) if name else None


@click.command("doctor")
@click.option("--profile", "profile_name", metavar="NAME", help="Compare the env with this reference-image profile.")
@click.option("--python", "python", metavar="PATH", help="Python of the environment under test (default: this one).")
@click.option("--prefix", metavar="DIR", help="Environment prefix under test (uses DIR/bin/python).")
@click.option("--root", metavar="DIR", help="Diagnose a bundle from `envbuild capture --node DIR` instead of this node.")
@click.option("--quick", "mode", flag_value="quick", help="Also run short GPU probes.")
@click.option("--full", "mode", flag_value="full", help="Also run the long GPU probes and the train step.")
@click.option("--gpus", metavar="LIST", help="GPU indices to probe, e.g. 0,1 (default: all).")
@click.option("--check", "checks", multiple=True, metavar="ID", help="Run only checks matching this id, glob or category.")
@click.option("--skip", "skips", multiple=True, metavar="ID", help="Do not run checks matching this id, glob or category.")
@click.option("--list", "list_only", is_flag=True, help="List the checks and exit.")
@click.option("--list-options", "list_options", is_flag=True, help="List the --set options of the checks and exit.")
@click.option("--strict", is_flag=True, help="Treat warnings as failures in the exit code.")
@click.option("--require-gpu", is_flag=True, help="Fail (not skip) when no GPU or driver is usable.")
@click.option("--json", "json_path", metavar="PATH", help="Write the versioned JSON report here.")
@click.option("--junit", "junit_path", metavar="PATH", help="Write a JUnit XML report here.")
@click.option("--prometheus", "prom_path", metavar="PATH", help="Write a node_exporter textfile here.")
@click.option("--html", "html_path", metavar="PATH", help="Write the report as one self-contained HTML page here.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Option for a check, e.g. train.layers=4 (--list-options shows them all).")
@click.option("--soak", type=click.IntRange(min=1), metavar="N",
              help="Run the train step's slime cycle N times (a soak; implies --full; = --set train.steps=N).")
@click.option("-q", "--quiet", is_flag=True, help="Print only the verdict line.")
@fleet_options
def doctor(profile_name: Optional[str], python: Optional[str], prefix: Optional[str], root: Optional[str],
           mode: Optional[str], gpus: Optional[str], checks: Tuple[str, ...], skips: Tuple[str, ...], list_only: bool,
           list_options: bool, strict: bool, require_gpu: bool, json_path: Optional[str], junit_path: Optional[str],
           prom_path: Optional[str], html_path: Optional[str], sets: Tuple[str, ...], soak: Optional[int], quiet: bool,
           **fleet) -> int:
    """Prove the node and the environment sound, and name the mismatch behind CUDA error 999.

    Exit code: 0 no failure, 1 a failure (or a warning with --strict), 2 bad usage or input.
    """
    from envbuild.doctor.session import DoctorOptions, run_doctor
    from envbuild.report.html import doctor_with_html

    opts = DoctorOptions(
        profile=_profile_file(profile_name), python=python, prefix=prefix, root=root, mode=mode or "static",
        gpus=_parse_gpus(gpus), checks=list(checks), skips=list(skips), list_only=list_only,
        list_options=list_options, strict=strict,
        require_gpu=require_gpu, json_path=json_path, junit_path=junit_path, prom_path=prom_path,
        options=_with_soak(_parse_sets(sets), soak), quiet=quiet,
    )
    if soak is not None:
        if opts.mode == "quick":
            raise click.UsageError("--soak runs the --full train step; it cannot go with --quick")
        opts.mode = "full"
    from envbuild.fleet.options import run_fleet, wants_fleet

    def run(o: "DoctorOptions") -> int:
        return run_fleet(o, fleet) if wants_fleet(fleet) else run_doctor(o)

    return doctor_with_html(html_path, opts, run)
