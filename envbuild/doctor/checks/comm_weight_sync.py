"""comm.weight_sync: slime's NCCL-broadcast and CUDA-IPC weight updates, plus the cross-rank comparisons that
explain their failures: NCCL_CUMEM_ENABLE across the weight-sync group (C5) and the libnccl each rank maps (C3).

The comparisons are made here, from what every rank reported about itself (checks/comm_weight_sync.py writes
a first record before NCCL starts), from the NCCL log each rank wrote to the NCCL_DEBUG_FILE given here
(parsed by envbuild/doctor/nccl_log.py), and from the environment the launcher gave each rank when a rank
died before reporting, so a mismatch is named whether or not NCCL then errors or hangs.
"""
from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from envbuild.doctor.registry import Option, ProbeSpec, probe_check, verdict
from envbuild.report.model import Result, Status

if TYPE_CHECKING:  # pragma: no cover
    from envbuild.doctor.nccl_log import NcclLog

CUMEM = "NCCL_CUMEM_ENABLE"
# What the group's NCCL init or transfer reports when its ranks disagree (doctor/fold.py folds the transfer's
# failure under the row that found the disagreement): torch's DistBackendError with NCCL's code, NCCL's own
# version check.
NCCL_FAILURES = [r"NCCL error", r"DistBackendError", r"Mismatched NCCL version", r"unhandled cuda error",
                 r"invalid usage", r"nccl(?:Internal|InvalidUsage|System|UnhandledCuda)Error"]
OPTIONS = (
    Option("weight.sync.train_env", "str", "", "K=V[,K=V] added to the train side's process only (rank 0)"),
    Option("weight.sync.rollout_env", "str", "", "K=V[,K=V] added to the rollout side's processes only"),
)


@probe_check("comm.weight_sync", "comm", "Weight update train -> rollout: NCCL broadcast in a late group and CUDA IPC "
             "handoff, bit-exact, GB/s; NCCL env and libnccl compared across ranks", needs=("gpu", "live"),
             causes=("C5", "C3", "M3"), options=OPTIONS,
             probe=ProbeSpec("comm_weight_sync.py", "the weight-sync probe", deadline_s={"quick": 120, "full": 420},
                             phase_deadlines={"init": 90, "*": 90}, hang_causes=("C5", "C3", "M4"),
                             crash_causes=("C5", "C3"), teardown_behind=True,
                             starts_beside_teardown=True))
def weight_sync(ctx, run) -> List[Result]:
    """Rank 0 plays "train", the others "rollout" (one rank per GPU).

    The options (fault injection and A/B runs) add variables to one side's processes only, e.g.
    NCCL_CUMEM_ENABLE=1 on the rollout side, or LD_PRELOAD=<another libnccl.so.2>.
    """
    from envbuild.doctor import nccl_log
    from envbuild.doctor.probes import merged_result

    roles = ["train"] + ["rollout"] * (len(run.gpus) - 1)
    sides = {"train": parse_env_list(run.option("weight.sync.train_env")),
             "rollout": parse_env_list(run.option("weight.sync.rollout_env"))}
    run_dir = tempfile.mkdtemp(prefix="envbuild-weightsync-")
    # NCCL's log per rank first, so a side's own NCCL_DEBUG* setting still wins.
    per_rank = [dict(nccl_log.rank_log_env(run_dir, k), **sides[r], ENVBUILD_WS_ROLES=",".join(roles))
                for k, r in enumerate(roles)]
    outcome = run.launch_outcome(["--mode", run.mode], per_rank_env=per_rank, run_dir=run_dir)
    logs = [nccl_log.parse_files(nccl_log.rank_log_paths(run_dir, k)) for k in range(len(roles))]
    views = rank_views([r.result for r in outcome.ranks], per_rank, dict(os.environ), roles, logs)
    results = [compare_comm_env(views), compare_libnccl(views)]
    broken = run.failure(outcome, subject="transfer")
    if broken is not None:
        named = [c for r in results if r.status == Status.FAIL for c in r.causes]
        if named:  # the comparison names the cause of the crash or hang: that one, not the generic list
            broken.causes = list(dict.fromkeys(named))
        results.append(broken)
    else:
        transfer = merged_result(outcome, metric_ranks=None)
        transfer.subject = "transfer"
        results.append(transfer)
    return results


def parse_env_list(text: str) -> Dict[str, str]:
    """"A=1,B=/x/y" -> {"A": "1", "B": "/x/y"}; an item without "=" is a usage error."""
    from envbuild.errors import EnvbuildError

    out: Dict[str, str] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        if "=" not in item:
            raise EnvbuildError(f"comm.weight_sync env {item!r}: expected NAME=VALUE[,NAME=VALUE]")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def rank_views(results: List[Optional[Dict[str, Any]]], per_rank_env: List[Dict[str, str]],
               base_env: Dict[str, str], roles: List[str], logs: List["NcclLog"]) -> List[Dict[str, Any]]:
    """What is known of each rank: reported by the rank itself when it got that far, else the launch env;
    the transports and NCCL_* overrides its NCCL log (logs[k]) names."""
    from envbuild.doctor.launcher import NVLS_OFF

    views = []
    for k, role in enumerate(roles):
        ev = ((results[k] if k < len(results) else None) or {}).get("evidence") or {}
        facts = ev.get("facts_after") or ev.get("facts_before")
        launched = dict(base_env)
        launched.update(per_rank_env[k])
        launched.update(NVLS_OFF)
        view: Dict[str, Any] = {"rank": k, "role": role}
        if facts:
            view.update(source="reported by the rank", comm_env=facts.get("comm_env") or {},
                        libnccl=facts.get("libnccl_versions") or {}, ld_preload=facts.get("ld_preload"))
        else:
            view.update(source="launch environment (the rank reported nothing)",
                        comm_env={CUMEM: launched.get(CUMEM)}, libnccl=None, ld_preload=launched.get("LD_PRELOAD"))
        log = logs[k] if k < len(logs) else None
        view["transports"] = dict(log.transports) if log is not None and log.transports else None
        view["nccl_env_set"] = dict(log.env_overrides) if log is not None else None
        views.append(view)
    return views


def _who(v: Dict[str, Any]) -> str:
    return f"rank {v['rank']} ({v['role']})"


def compare_comm_env(views: List[Dict[str, Any]]) -> Result:
    """C5: NCCL_CUMEM_ENABLE (and the other communicator variables) must agree across the group."""
    ev = {"ranks": views}
    if len(views) < 2:
        return verdict(Status.SKIP, "one rank: no weight-sync group to compare "
                      "(needs 2 GPUs)", evidence=ev, subject="nccl_env")
    values = {v["rank"]: (v["comm_env"] or {}).get(CUMEM) for v in views}
    explicit = {val for val in values.values() if val not in (None, "")}
    listing = ", ".join(f"{_who(v)}={values[v['rank']] if values[v['rank']] not in (None, '') else 'unset'}"
                        for v in views)
    fams = {v["rank"]: {f for f in (v.get("transports") or {}) if f in ("P2P/CUMEM", "P2P/IPC")} for v in views}
    cumem_side = [v for v in views if "P2P/CUMEM" in fams[v["rank"]]]
    ipc_side = [v for v in views if "P2P/IPC" in fams[v["rank"]]]
    remedy = ("set NCCL_CUMEM_ENABLE to one value in every process of the group (slime sets 0 for its actors; "
              "make the rollout engine's environment match)")
    if len(explicit) > 1:
        seen = ""
        if cumem_side and ipc_side:
            seen = (f"; NCCL confirms: {', '.join(_who(v) for v in cumem_side)} connected via P2P/CUMEM, "
                    f"{', '.join(_who(v) for v in ipc_side)} via P2P/IPC")
        return verdict(Status.FAIL, f"NCCL_CUMEM_ENABLE differs inside the weight-sync "
                      f"group: {listing}{seen}", evidence={**ev, "explains": NCCL_FAILURES}, causes=["C5"],
                      subject="nccl_env", remediation=remedy)
    if cumem_side and ipc_side:
        return verdict(Status.FAIL, f"ranks of one communicator use different P2P "
                      f"transports: {', '.join(_who(v) for v in cumem_side)} via P2P/CUMEM, "
                      f"{', '.join(_who(v) for v in ipc_side)} via P2P/IPC ({listing})",
                      evidence={**ev, "explains": NCCL_FAILURES},
                      causes=["C5"], subject="nccl_env", remediation=remedy)
    others = _other_differences(views)
    if explicit and len([v for v in values.values() if v not in (None, "")]) < len(views):
        return verdict(Status.WARN, f"NCCL_CUMEM_ENABLE is set on some ranks only "
                      f"({listing}); the others take NCCL's default", evidence=ev, causes=["C5"],
                      subject="nccl_env", remediation=remedy)
    if others:
        return verdict(Status.WARN, "communicator variables differ between ranks: "
                      + "; ".join(others), evidence=ev, causes=["C4"], subject="nccl_env",
                      remediation="start train and rollout processes with the same NCCL_* settings")
    seen = sorted({f for v in views for f in (v.get("transports") or {})})
    return verdict(Status.PASS, f"NCCL_CUMEM_ENABLE agrees on all {len(views)} ranks "
                  f"({next(iter(explicit)) if explicit else 'unset: NCCL default'}); transports seen: "
                  f"{', '.join(seen) or 'none logged'}", evidence=ev, subject="nccl_env")


def _other_differences(views: List[Dict[str, Any]]) -> List[str]:
    names = sorted({k for v in views for k in (v["comm_env"] or {}) if k != CUMEM})
    out = []
    for name in names:
        vals = {(v["comm_env"] or {}).get(name) for v in views}
        if len(vals) > 1:
            out.append(f"{name}: " + ", ".join(f"{_who(v)}={(v['comm_env'] or {}).get(name)}" for v in views))
    return out


def compare_libnccl(views: List[Dict[str, Any]]) -> Result:
    """C3: every rank must map exactly one libnccl, and the same one."""
    ev = {"ranks": [{k: v.get(k) for k in ("rank", "role", "source", "libnccl", "ld_preload")} for v in views]}
    problems: List[str] = []
    for v in views:
        libs = v.get("libnccl")
        if libs is None:
            if "libnccl" in str(v.get("ld_preload") or ""):
                problems.append(f"{_who(v)} was started with LD_PRELOAD={v['ld_preload']} and died before "
                                "reporting its libraries")
            continue
        if len(libs) > 1:
            problems.append(f"{_who(v)} maps {len(libs)} libnccl copies: " + ", ".join(
                f"{p} ({ver or '?'})" for p, ver in sorted(libs.items())))
    reported = [v for v in views if v.get("libnccl") is not None]
    distinct = {tuple(sorted(v["libnccl"].items())) for v in reported}
    if len(distinct) > 1:
        problems.append("ranks run different NCCL builds: " + "; ".join(
            f"{_who(v)} " + ", ".join(f"{p} ({ver or '?'})" for p, ver in sorted(v["libnccl"].items()))
            for v in reported))
    if problems:
        return verdict(Status.FAIL, "; ".join(problems), evidence={**ev, "explains": NCCL_FAILURES}, causes=["C3"],
                      subject="libnccl", remediation="keep exactly one NCCL (torch's nvidia-nccl wheel): remove "
                      "other libnccl from LD_PRELOAD/LD_LIBRARY_PATH and point SGLANG_NCCL_SO_PATH at torch's copy")
    if not reported:
        return verdict(Status.SKIP, "no rank reported its mapped libraries", evidence=ev,
                      subject="libnccl")
    only = reported[0]["libnccl"]
    what = ", ".join(f"{p} ({ver or '?'})" for p, ver in sorted(only.items())) or "none mapped (static NCCL?)"
    return verdict(Status.PASS, f"all {len(reported)} ranks map the same libnccl: {what}",
                  evidence=ev, subject="libnccl")
