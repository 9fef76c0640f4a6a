"""The doctor under Slurm: `--slurm` (one JSON per node, named by Slurm's node name, from an srun step) and
`--health-check` (a HealthCheckProgram / prolog that ends well inside Slurm's 60 s kill limit and prints one
`scontrol update NodeName=... State=DRAIN Reason=...` line when the node itself is broken).

Node problems drain; user problems do not. A failing check in category node or gpu, or one naming a
device/driver/OS cause (D*, N*, O* in knowledge/causes.toml), is the node's; a stack or train finding (the
job's environment: wrong NCCL, leaked variables, C*/M*/U* causes) is printed but never drains a node that
another job's environment would run fine on (nebius/soperator #1392 draws the same line).
"""
from __future__ import annotations

import json
import os
import shlex
import socket
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

from envbuild.children import CommandHung, run_bounded
from envbuild.errors import EnvbuildError
from envbuild.fleet.drain import Scontrol, reason_text

HEALTH_BUDGET_S = 50.0  # Slurm kills a HealthCheckProgram after 60 s; leave 10 s for start-up and scontrol
NODE_CATEGORIES = ("node", "gpu")
NODE_CAUSE_PREFIXES = ("D", "N", "O")
SLURM_KEYS = ("SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_JOB_NODELIST",
              "SLURM_CLUSTER_NAME", "SLURMD_NODENAME")


def slurm_env(environ: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = os.environ if environ is None else environ
    return {k: env[k] for k in SLURM_KEYS if k in env}


def node_name(environ: Optional[Dict[str, str]] = None) -> str:
    """Slurm's name for this node (SLURMD_NODENAME), else the short host name."""
    env = os.environ if environ is None else environ
    return env.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def report_path(json_path: Optional[str], node: str) -> str:
    """Where this node's report goes: DIR/<node>.json, or a path with {node} in it."""
    if not json_path:
        raise EnvbuildError("--slurm needs --json DIR (one <node>.json per node, for `envbuild report merge DIR`)")
    if "{node}" in json_path:
        return json_path.replace("{node}", node)
    if os.path.isdir(json_path) or json_path.endswith("/"):
        return os.path.join(json_path, f"{node}.json")
    raise EnvbuildError(f"--slurm --json {json_path}: give a directory or a path with {{node}}: every node of the job "
                        "would write the same file")


def check_json_target(json_path: Optional[str], per_node: bool) -> None:
    """Before any work: the file this node's report will go to can be written (the rules of envbuild/outputs.py:
    no folder is created, so `--json DIR/` with a missing DIR is refused, not made). `per_node` (--slurm): the path
    must name one file per node; --health-check also takes a plain file."""
    from envbuild.outputs import check_output_file

    if json_path is None and not per_node:
        return
    if per_node or (json_path and ("{node}" in json_path or os.path.isdir(json_path) or json_path.endswith("/"))):
        json_path = report_path(json_path, node_name())  # refuses what cannot name one file per node
    check_output_file(json_path, "--json")


def require_job() -> Dict[str, str]:
    """The Slurm variables of this step; --slurm outside a job is bad usage (checked with the other settings)."""
    env = slurm_env()
    if "SLURM_JOB_ID" not in env:
        raise EnvbuildError("--slurm: no SLURM_JOB_ID here; run it in a Slurm step "
                            "(srun --ntasks-per-node=1 envbuild doctor --slurm --json DIR, docs/fleet.md)")
    return env


def run_slurm(opts: Any) -> int:
    """`envbuild doctor --slurm --json DIR`: task 0 of each node runs the doctor, its report named by node."""
    from envbuild.doctor.session import run_doctor
    from envbuild.outputs import write_output

    env = require_job()
    node = node_name()
    final = report_path(opts.json_path, node)
    if env.get("SLURM_LOCALID", "0") != "0":  # several tasks per node: one doctor per node is enough
        print(f"envbuild doctor --slurm: task {env['SLURM_LOCALID']} on {node}: only local task 0 runs the doctor")
        return 0
    with tempfile.TemporaryDirectory(prefix="envbuild-slurm-") as tmp:
        opts.json_path = os.path.join(tmp, "report.json")
        code = run_doctor(opts)
        with open(opts.json_path) as f:
            data = json.load(f)
    data["node"] = node
    data["slurm"] = env
    write_output(final, json.dumps(data, indent=2, default=str) + "\n", "--json")
    return code


def is_own_crash(result: Dict[str, Any]) -> bool:
    """An `error` row of a check that crashed (the runner keeps its traceback): envbuild's bug, not the node's."""
    return result.get("status") == "error" and "traceback" in (result.get("evidence") or {})


def is_node_problem(result: Dict[str, Any]) -> bool:
    if is_own_crash(result):
        return False
    return result.get("category") in NODE_CATEGORIES or \
        any(str(c).startswith(NODE_CAUSE_PREFIXES) for c in result.get("causes") or [])


def classify(report: Dict[str, Any], strict: bool = False) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]],
                                                                   List[Dict[str, Any]]]:
    """(node problems, user problems, envbuild's own crashes) among the failing results. An error row of a node
    check counts as the node's (a node command that hung); a crash of envbuild's check code never drains."""
    bad = ("fail", "error") + (("warn",) if strict else ())
    failing = [r for r in report.get("results", []) if r.get("status") in bad]
    own = [r for r in failing if is_own_crash(r)]
    node = [r for r in failing if is_node_problem(r)]
    return node, [r for r in failing if r not in node and r not in own], own


def drain_line(node: str, reason: str) -> str:
    """The ready-to-run scontrol command (Reason quoted for a shell, one line, with envbuild's prefix)."""
    return f"scontrol update NodeName={shlex.quote(node)} State=DRAIN Reason={shlex.quote(reason_text(reason))}"


def _doctor_argv(opts: Any, json_path: str) -> List[str]:
    argv = [sys.executable, "-m", "envbuild", "doctor", "--json", json_path, "-q"]
    for flag, value in (("--profile", opts.profile), ("--python", opts.python), ("--prefix", opts.prefix),
                        ("--root", opts.root)):
        if value:
            argv += [flag, value]
    for c in opts.checks:
        argv += ["--check", c]
    for s in opts.skips:
        argv += ["--skip", s]
    for key, value in opts.sets.items():  # as the user wrote them: the child resolves its own settings
        argv += ["--set", f"{key}={value}"]
    return argv + (["--require-gpu"] if opts.require_gpu else [])


def health_check(opts: Any, deadline: Optional[float] = None, drain: bool = False) -> int:
    """HealthCheckProgram / prolog mode: the static doctor in a child process with a hard budget.

    Exit 0 healthy (other findings are printed, not drained; with --drain a node envbuild drained is resumed),
    1 node problem (drain line printed, and run with --drain), 2 the doctor could not run here (bad usage, or
    envbuild itself failed: never a drain), 3 with --drain: the node should have been drained or resumed and
    scontrol did not do it. A doctor that overruns the budget is killed with its whole process group and is
    itself the node problem: a node whose facts cannot be read in 50 s (hung NFS, a wedged driver) is not fit
    for jobs."""
    if opts.mode != "static":
        raise EnvbuildError("--health-check runs the static checks only (GPU probes do not fit Slurm's 60 s)")
    budget = min(deadline or HEALTH_BUDGET_S, HEALTH_BUDGET_S)
    node = node_name()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="envbuild-hc-") as tmp:
        path = os.path.join(tmp, "report.json")
        try:
            proc = run_bounded(_doctor_argv(opts, path), budget)
        except CommandHung:
            return _verdict(node, [f"doctor did not finish in {budget:g} s (hung filesystem or driver?)"], [],
                            drain, opts.json_path, None)
        if proc.returncode not in (0, 1) or not os.path.exists(path):
            last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}, no report"])[-1]
            # bad usage is the admin's configuration and a crash is envbuild's: report it, never drain
            print(f"envbuild health-check {node}: could not run the doctor, not draining: {last}", file=sys.stderr)
            return 2
        with open(path) as f:
            report = json.load(f)
    node_bad, user_bad, own = classify(report, strict=opts.strict)
    reasons = [f"{r['check_id']}{'[' + r['subject'] + ']' if r.get('subject') else ''}: {r.get('summary', '')}"
               for r in node_bad]
    users = [f"{r['check_id']}: {r.get('summary', '')}" for r in user_bad]
    crashes = [f"{r['check_id']}: {r.get('summary', '')}" for r in own]
    report["health_check"] = {"node": node, "budget_s": budget, "took_s": round(time.monotonic() - t0, 2),
                              "node_problems": reasons, "user_problems": users, "own_errors": crashes}
    others = [("user-side problem", t) for t in users] + [("envbuild's own error (a bug to report)", t)
                                                          for t in crashes]
    return _verdict(node, reasons, others, drain, opts.json_path, report)


def _verdict(node: str, reasons: List[str], others: List[Tuple[str, str]], drain: bool, json_path: Optional[str],
             report: Optional[Dict[str, Any]]) -> int:
    if json_path and report is not None:
        from envbuild.outputs import write_output

        report["node"] = node
        write_output(report_path(json_path, node) if (os.path.isdir(json_path) or "{node}" in json_path)
                     else json_path, json.dumps(report, indent=2, default=str) + "\n", "--json")
    for kind, text in others:
        print(f"envbuild health-check {node}: {kind}, not draining: {text}")
    if not reasons:
        if not drain:
            print(f"envbuild health-check {node}: OK")
            return 0
        undo = Scontrol(node).resume_if_ours()
        print(f"envbuild health-check {node}: OK" + (f"; {undo.message}" if undo and undo.done else ""))
        if undo is not None and not undo.done:
            print(f"envbuild health-check {node}: NOT resumed: {undo.message}", file=sys.stderr)
            return 3
        return 0
    reason = reasons[0] + (f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else "")
    print(drain_line(node, reason))
    if drain:
        done = Scontrol(node).drain(reason)
        if not done.done:
            print(f"envbuild health-check {node}: NOT drained: {done.message}", file=sys.stderr)
            return 3
        print(f"envbuild health-check {node}: {done.message}")
    return 1

