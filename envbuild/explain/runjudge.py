"""Judging a recorded run's facts across its processes: what each process mapped and inherited, who failed
first, who went silent, what the flight recorder says. Each finding is an Adjustment (origin "record") whose
reason names host/pid/role and the file; structured facts outrank log text (RECORD_RAISE > any signature).
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Dict, List, Optional, Tuple

from envbuild.explain import flightrec
from envbuild.explain.rank import Adjustment
from envbuild.explain.rundir import Proc, Run

RECORD_RAISE = 6.0  # a recorded fact that names the cause outranks a log signature (at most 5)
SILENT_AFTER = 5.0  # seconds: a process that stopped writing this long before the others went silent first
NODE_WINDOW = 10.0  # seconds: processes of one node going silent within this window = the node was lost


def _adj(cause: str, reason: str, delta: float = RECORD_RAISE) -> Adjustment:
    return Adjustment(cause, delta=delta, reason=reason, origin="record")


def _odd_ones(procs: List[Proc], value: Any) -> Tuple[List[Proc], Any, List[Proc]]:
    """(the minority, the majority value, the majority) by value(proc); procs with None are left out."""
    vals = {id(p): value(p) for p in procs}
    count = Counter(v for v in vals.values() if v is not None)
    if len(count) < 2:
        return [], None, []
    major = count.most_common(1)[0][0]
    return ([p for p in procs if vals[id(p)] not in (None, major)], major, [p for p in procs if vals[id(p)] == major])


def _shared_group(a: Proc, others: List[Proc]) -> Optional[str]:
    ga = set(a.groups())
    for o in others:
        common = ga & set(o.groups())
        if common:
            return sorted(common, key=lambda g: g == "default_pg")[0]
    return None


def _libs(procs: List[Proc]) -> List[Adjustment]:
    out: List[Adjustment] = []
    for lib, cause in (("libnccl", "C3"), ("libcuda", "C1")):
        def key(p: Proc) -> Optional[str]:
            e = p.lib(lib)
            return None if not e else f"{e.get('version') or '?'} from {e.get('path')}"
        odd, major, rest = _odd_ones(procs, key)
        for p in odd[:3]:
            g = _shared_group(p, rest)
            where = f"; both sit in group {g}" if g else ""
            out.append(_adj(cause, f"{p.who} mapped {lib} {key(p)}; {len(rest)} other process(es) ({rest[0].who}, ...) mapped "
                                   f"{major}{where} [{p.file('libs.jsonl')}]"))
    for p in procs:  # the TMS hook built for another CUDA major than the process's runtime
        tms, rt = p.lib("torch_memory_saver"), p.lib("libcudart")
        tm, rm = (tms or {}).get("cuda_major"), str((rt or {}).get("version") or "").split(".")[0]
        if tm and rm and str(tm) != rm:
            out.append(_adj("C9", f"{p.who} loaded torch_memory_saver built for CUDA {tm} beside libcudart {rt.get('version')} "  # type: ignore[union-attr]
                                  f"[{p.file('libs.jsonl')}]"))
    return out


def _env(procs: List[Proc]) -> List[Adjustment]:
    out: List[Adjustment] = []
    for var, cause in (("NCCL_CUMEM_ENABLE", "C5"), ("LD_PRELOAD", None), ("NCCL_CUMEM_HOST_ENABLE", "C5"),
                       ("NCCL_NVLS_ENABLE", "C4"), ("NCCL_ALGO", "C4")):
        have = [p for p in procs if p.start]
        odd, major, rest = _odd_ones(have, lambda p: p.env.get(var, "(unset)"))
        for p in odd[:3]:
            val = p.env.get(var, "(unset)")
            c = cause
            if var == "LD_PRELOAD":
                c = "C3" if "libnccl" in val else "C1" if "libcuda" in val else "C4"
            g = _shared_group(p, rest)
            where = f" inside group {g}" if g else ""
            out.append(_adj(c, f"{p.who} runs with {var}={val}; {len(rest)} other process(es){where} ({rest[0].who}, ...) "
                               f"with {var}={major} [{p.file('start.json')}]"))
    return out


def first_failures(run: Run) -> List[Dict[str, Any]]:
    """Every process's own first failure, or its going silent, earliest first (the timeline's rows)."""
    rows: List[Dict[str, Any]] = []
    ends = [p.t_last for p in run.procs if p.t_last is not None]
    end = max(ends) if ends else None
    for p in run.procs:
        ff = p.first_failure()
        if ff:
            rows.append({"t": ff[0], "who": p.who, "host": p.host, "pid": p.pid, "role": p.role, "what": ff[1], "file": ff[2]})
        elif p.exit_code() is None and p.t_last is not None and end is not None and end - p.t_last >= SILENT_AFTER:
            rows.append({"t": p.t_last, "who": p.who, "host": p.host, "pid": p.pid, "role": p.role,
                         "what": f"went silent: no exit, no failure recorded, nothing written after this "
                                 f"({end - p.t_last:.0f} s before the last record of the run)",
                         "file": p.file("events.jsonl"), "silent": True})
    rows.sort(key=lambda r: r["t"])
    for i, r in enumerate(rows):
        r["first"] = i == 0
    return rows


def _in_collective(p: Proc) -> Optional[str]:
    last = p.events[-1] if p.events else {}
    if last.get("kind") == "collective" and last.get("state", "start") not in ("end", "completed"):
        return f"collective {last.get('name', '?')} seq {last.get('seq', '?')}"
    return None


def _liveness(run: Run, rows: List[Dict[str, Any]], fr: List[flightrec.Verdict], rank_of: Dict[Tuple[str, int], Proc]) -> List[Adjustment]:
    out: List[Adjustment] = []
    if not rows:
        return out
    silent = [r for r in rows if r.get("silent")]
    by_host: Dict[str, List[Proc]] = {}
    for p in run.procs:
        by_host.setdefault(p.host, []).append(p)
    lost = []
    if len(by_host) > 1:
        for host, ps in by_host.items():
            sil = [r for r in silent if r["host"] == host]
            if sil and len(sil) == len(ps) and max(r["t"] for r in sil) - min(r["t"] for r in sil) <= NODE_WINDOW:
                lost.append(host)
                out.append(_adj("U7", f"node {host}: all its {len(ps)} process(es) ({', '.join(p.who for p in ps[:3])}) stopped "
                                      f"writing within {NODE_WINDOW:.0f} s, with no exit and no failure, while the other nodes "
                                      f"went on [{host}/proc/*/events.jsonl]"))
    first = rows[0]
    if first.get("silent") and first["host"] not in lost:
        p = next(q for q in run.procs if q.who == first["who"])
        inside = _in_collective(p)
        hung = inside or any(v.kind in ("never_entered", "no_dump", "not_completed")
                             and any(rank_of.get((p.host, r)) is p for r in v.ranks) for v in fr)
        what = (f"stopped inside {inside}" if inside else "hung (the flight recorder shows its peers waiting on it)" if hung
                else "was killed (SIGKILL, the OOM killer) or died without a word")
        fr_txt = next((v.says for v in fr if any(rank_of.get((p.host, r)) is p for r in v.ranks)), "")
        out.append(_adj("U6", f"{p.who} {what}: its last record is the earliest failure of the run, before every other "
                              f"process's{'; ' + fr_txt if fr_txt else ''} [{first['file']}]"))
    elif not first.get("silent") and first["what"].startswith("signal"):
        out.append(_adj("U6", f"{first['who']} died first: {first['what']} [{first['file']}]", delta=4.0))
    for v in fr:
        if v.kind == "mismatch" or (v.kind == "never_entered" and not any(
                rank_of.get(k) and r.get("silent") and r["who"] == rank_of[k].who for k in rank_of for r in rows
                if k[1] in v.ranks)):
            if v.kind == "mismatch" or not first.get("silent"):
                out.append(_adj("U1", f"flight recorder: {v.says}", delta=4.5))
    return out


def _memory(run: Run, rows: List[Dict[str, Any]]) -> List[Adjustment]:
    out: List[Adjustment] = []
    for p in run.procs:
        mem = (p.failure or {}).get("gpu_memory")
        if not mem:
            mems = p.of_kind("gpu_memory")
            mem = mems[-1].get("gpus") if mems else None
        if not isinstance(mem, list) or not p.first_failure():
            continue
        for i, g in enumerate(mem):
            if isinstance(g, dict) and g.get("total") and g.get("used", 0) / g["total"] >= 0.97:
                out.append(_adj("U3", f"{p.who}: GPU {i} {g['used'] / 2**30:.1f} of {g['total'] / 2**30:.1f} GiB used at its "
                                      f"failure [{p.file('failure.json')}]", delta=3.0))
    return out


def judge(run: Run) -> Tuple[List[Adjustment], Dict[str, Any]]:
    """(adjustments, the 'run' section of the result)."""
    fr_problems: List[str] = []
    verdicts: List[flightrec.Verdict] = []
    rank_of: Dict[Tuple[str, int], Proc] = {}
    for p in run.procs:
        for g, e in p.groups().items():
            if g == "default_pg" and isinstance(e.get("rank"), int):
                rank_of[(p.host, e["rank"])] = p
    dumps: Dict[int, Dict[str, Any]] = {}
    host_of: Dict[int, str] = {}
    for d in run.fr_dirs:
        for r, dump in flightrec.read_dir(d, fr_problems).items():
            dumps[r], host_of[r] = dump, d.parent.name
    expected = sorted({r for (_, r) in rank_of})
    if dumps:
        verdicts = flightrec.analyse(dumps, expected)
        for (h, r), p in list(rank_of.items()):  # a rank without a dump lives on its own host
            rank_of.setdefault((host_of.get(r, h), r), p)
    for msg in fr_problems:
        run.note("fr/", msg)
    rows = first_failures(run)
    adj = _libs(run.procs) + _env(run.procs) + _liveness(run, rows, verdicts, rank_of) + _memory(run, rows)
    section = {
        "root": str(run.root), "schema": run.run.get("schema"), "envbuild_version": run.run.get("envbuild_version"),
        "nodes": sorted({p.host for p in run.procs} | set(run.nodes)),
        "processes": [{"host": p.host, "pid": p.pid, "role": p.role, "dir": f"{p.host}/proc/{p.key}",
                       "t_start": p.start.get("t_start"), "t_last": p.t_last, "exit": p.exit_code(),
                       "first_failure": (p.first_failure() or (None, None, None))[1],
                       "libnccl": (p.lib("libnccl") or {}).get("version"),
                       "envbuild_version": p.start.get("envbuild_version")} for p in run.procs],
        "first_failures": rows[:16],
        "flight_recorder": [{"group": v.group, "seq": v.seq, "op": v.op, "kind": v.kind, "ranks": v.ranks,
                             "says": v.says} for v in verdicts],
        "missing": run.missing,
    }
    return adj, section
