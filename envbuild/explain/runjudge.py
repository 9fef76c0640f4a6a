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
SILENT_BEATS = 3  # heartbeats missed (plus 1 s) before the run's last record: the process went silent
NODE_WINDOW = 10.0  # seconds: processes of one node going silent within this window = the node was lost
NODE_MIN_PROCS = 2  # one silent process alone is a killed process, not a lost node
PRELOAD_CAUSES = (("libnccl", "C3"), ("libcudart", "C1"), ("libcuda", "C1"))


def _adj(cause: str, reason: str, delta: float = RECORD_RAISE) -> Adjustment:
    return Adjustment(cause, delta=delta, reason=reason, origin="record")


def _odd_ones(procs: List[Proc], value: Any, usual: Any = None) -> Tuple[List[Proc], Any, List[Proc]]:
    """(the minority, the majority value, the majority) by value(proc); procs with None are left out.

    On a tie for the most processes, `usual` (the value a process has when nobody set anything: LD_PRELOAD unset,
    expandable segments off) is the majority when it is among the tied: a trainer and a rollout engine, one of them
    with a setting of its own, are a 1:1 tie, and the odd one out is the one with the setting, whichever process
    the run dir happened to list first."""
    vals = {id(p): value(p) for p in procs}
    count = Counter(v for v in vals.values() if v is not None)
    if len(count) < 2:
        return [], None, []
    ranked = count.most_common()
    major = ranked[0][0]
    if usual is not None and count.get(usual) == ranked[0][1]:
        major = usual
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
    for p in procs:
        nccl = p.lib("libnccl") or {}
        copies = nccl.get("copies") if isinstance(nccl.get("copies"), list) else []
        if len(copies) > 1:
            what = ", ".join(f"{c.get('version') or '?'} from {c.get('path')}" for c in copies[:3] if isinstance(c, dict))
            out.append(_adj("C3", f"{p.who} mapped {len(copies)} copies of libnccl: {what} [{p.file('libs.jsonl')}]"))
    for p in procs:  # the TMS hook built for another CUDA major than the process's runtime (audit.json)
        tms, rt = p.audit.get("tms_hook") or {}, p.lib("libcudart") or {}
        tm, rm = tms.get("cuda_major") if isinstance(tms, dict) else None, str(rt.get("version") or "").split(".")[0]
        if tm and rm.isdigit() and str(tm) != rm:
            out.append(_adj("C9", f"{p.who} loaded torch_memory_saver built for CUDA {tm} beside libcudart {rt.get('version')} "
                                  f"[{p.file('audit.json')}]"))
    return out


def _env(procs: List[Proc]) -> List[Adjustment]:
    """A steering variable that differs: inside one communicator (processes that share a torch.distributed group)
    for NCCL's, the odd process named against the value most of the job's processes set; LD_PRELOAD of another
    libnccl/libcuda in some processes only (a preloaded TMS hook is no finding here)."""
    out: List[Adjustment] = []
    have = [p for p in procs if p.start]
    for var, cause in (("NCCL_CUMEM_ENABLE", "C5"), ("NCCL_CUMEM_HOST_ENABLE", "C5"), ("NCCL_NVLS_ENABLE", "C4"),
                       ("NCCL_ALGO", "C4"), ("NCCL_PROTO", "C4")):
        out += _differs_in_group(have, var, cause)
    odd, major, rest = _odd_ones(have, lambda p: _expandable(p.env.get("PYTORCH_CUDA_ALLOC_CONF", "")), usual="off")
    for p in odd[:3]:
        if _expandable(p.env.get("PYTORCH_CUDA_ALLOC_CONF", "")) == "on":
            out.append(_adj("M3", f"{p.who} runs with PYTORCH_CUDA_ALLOC_CONF={p.env['PYTORCH_CUDA_ALLOC_CONF']} (expandable "
                                  f"segments: VMM memory); {len(rest)} other process(es) ({rest[0].who}, ...) without: "
                                  f"CUDA IPC of its tensors needs pidfd_getfd [{p.file('start.json')}]"))
    odd, major, rest = _odd_ones(have, lambda p: p.env.get("LD_PRELOAD", "(unset)"), usual="(unset)")
    for p in odd[:3]:
        val = p.env.get("LD_PRELOAD", "")
        c = next((c for lib, c in PRELOAD_CAUSES if lib in val), None)
        if c is None:
            continue
        g = _shared_group(p, rest)
        where = f" inside group {g}" if g else ""
        out.append(_adj(c, f"{p.who} runs with LD_PRELOAD={val}; {len(rest)} other process(es){where} ({rest[0].who}, ...) "
                           f"with LD_PRELOAD={major} [{p.file('start.json')}]"))
    return out


def _expandable(conf: str) -> str:
    """'on' or 'off': whether a PYTORCH_CUDA_ALLOC_CONF turns expandable segments on (the last setting wins)."""
    val = "off"
    for part in conf.replace(";", ",").split(","):
        k, _, v = part.partition(":")
        if k.strip() == "expandable_segments":
            val = "on" if v.strip().lower() == "true" else "off"
    return val


def _differs_in_group(have: List[Proc], var: str, cause: str) -> List[Adjustment]:
    explicit = Counter(p.env[var] for p in have if var in p.env)
    if len(set(p.env.get(var, "(unset)") for p in have)) < 2:
        return []
    groups: Dict[str, List[Proc]] = {}
    for p in have:
        for g in p.groups():
            groups.setdefault(g, []).append(p)
    if not groups:  # no group recorded: the whole job is the one communicator we know of
        groups = {"": have}
    out: List[Adjustment] = []
    named = set()
    for g, members in sorted(groups.items()):
        vals = Counter(p.env.get(var, "(unset)") for p in members)
        if len(vals) < 2:
            continue
        top = vals.most_common()
        major = top[0][0] if top[0][1] > top[1][1] else (explicit.most_common(1)[0][0] if explicit else top[0][0])
        for p in members:
            val = p.env.get(var, "(unset)")
            if val == major or id(p) in named:
                continue
            named.add(id(p))
            peers = [q for q in members if q.env.get(var, "(unset)") == major]
            where = f"inside group {g}" if g else "in this job"
            most = f" (as {explicit[major]} of the job's processes set it)" if explicit.get(major) else ""
            out.append(_adj(cause, f"{p.who} runs with {var}={val} {where}; {len(peers)} other member(s) "
                                   f"({', '.join(q.who for q in peers[:2])}) with {var}={major}{most} "
                                   f"[{p.file('start.json')}]"))
    return out


def silent(p: Proc, end: Optional[float], parent: Optional[Proc] = None) -> bool:
    """No exit, no failure, and nothing written (the heartbeat included) for more than SILENT_BEATS heartbeats
    before the run's last record: killed (SIGKILL, the OOM killer), stopped (SIGSTOP) or lost with its node. A
    child whose heartbeat stopped when its parent exited ended with it (multiprocessing terminates its daemon
    children at exit, and a signal's default death writes nothing): not silent."""
    if p.exited or p.first_failure() is not None or p.t_last is None or end is None:
        return False
    grace = SILENT_BEATS * p.heartbeat_s + 1.0
    if parent is not None and parent.exited:
        t_exit = parent.of_kind("exit")[-1].get("t")
        if isinstance(t_exit, (int, float)) and p.t_last >= t_exit - grace:
            return False
    return end - p.t_last > grace


def first_failures(run: Run) -> List[Dict[str, Any]]:
    """Every process's own first failure, or its going silent, earliest first (the timeline's rows)."""
    rows: List[Dict[str, Any]] = []
    ends = [p.t_last for p in run.procs if p.t_last is not None]
    end = max(ends) if ends else None
    nodes = node_of(run)
    by_pid = {(p.host, p.pid): p for p in run.procs}
    for p in run.procs:
        ff = p.first_failure()
        row = {"who": p.who, "host": p.host, "node": nodes[id(p)], "pid": p.pid, "role": p.role}
        if ff:
            rows.append({"t": ff[0], **row, "what": ff[1], "file": ff[2]})
        elif silent(p, end, by_pid.get((p.host, str(p.start.get("ppid"))))):
            last = "alive.json" if p.alive.get("t") == p.t_last else "events.jsonl"
            rows.append({"t": p.t_last, **row, "what": f"went silent: no exit, no failure, its heartbeat stopped "
                                                      f"{end - p.t_last:.0f} s before the run's last record",  # type: ignore[operator]
                         "file": p.file(last), "silent": True})
    rows.sort(key=lambda r: r["t"])
    for i, r in enumerate(rows):
        r["first"] = i == 0
    return rows


def node_of(run: Run) -> Dict[int, str]:
    """id(proc) -> its node: the Ray node id (several Ray nodes may share one host), a child's from its parent
    (by ppid on the same host), else the host."""
    by_pid = {(p.host, p.pid): p for p in run.procs}
    out: Dict[int, str] = {}

    def node(p: Proc, depth: int = 0) -> str:
        if id(p) in out:
            return out[id(p)]
        nid = p.ray.get("node_id")
        if nid:
            label = f"{p.host} (Ray node {str(nid)[:12]})"
        else:
            parent = by_pid.get((p.host, str(p.start.get("ppid"))))
            label = node(parent, depth + 1) if parent is not None and parent is not p and depth < 8 else p.host
        out[id(p)] = label
        return label

    for p in run.procs:
        node(p)
    return out


def _in_collective(p: Proc) -> Optional[str]:
    last = p.events[-1] if p.events else {}
    if last.get("kind") == "collective" and last.get("state", "start") not in ("end", "completed"):
        return f"collective {last.get('name', '?')} seq {last.get('seq', '?')}"
    return None


def _waiting_peers(run: Run, p: Proc) -> List[str]:
    """The processes sharing a group with p whose hang watchdog caught them waiting after p went silent."""
    out = []
    mine = set(p.groups())
    for q in run.procs:
        if q is p or not (mine & set(q.groups())):
            continue
        hangs = [e for e in q.of_kind("hang") if isinstance(e.get("t"), (int, float)) and e["t"] >= (p.t_last or 0)]
        if hangs:
            h = hangs[0]
            inside = f"in {h['collective']}" if h.get("collective") else f"at {h.get('frame')}"
            out.append(f"{q.who} waited {inside} for {h.get('stuck_s', '?')} s after it "
                       f"[{q.file('events.jsonl')} hang, {q.file('faulthandler.log')}]")
    return out


def _liveness(run: Run, rows: List[Dict[str, Any]], fr: List[flightrec.Verdict], rank_of: Dict[Tuple[str, int], Proc]) -> List[Adjustment]:
    out: List[Adjustment] = []
    if not rows:
        return out
    nodes = node_of(run)
    by_node: Dict[str, List[Proc]] = {}
    for p in run.procs:
        by_node.setdefault(nodes[id(p)], []).append(p)
    silent_rows = [r for r in rows if r.get("silent")]
    lost = []
    if len(by_node) > 1:
        for name, ps in sorted(by_node.items()):
            sil = [r for r in silent_rows if r["node"] == name]
            if len(ps) >= NODE_MIN_PROCS and len(sil) == len(ps) and \
                    max(r["t"] for r in sil) - min(r["t"] for r in sil) <= NODE_WINDOW:
                lost.append(name)
                out.append(_adj("U7", f"node {name}: all its {len(ps)} process(es) ({', '.join(p.who for p in ps[:3])}) stopped "
                                      f"writing within {NODE_WINDOW:.0f} s, with no exit and no failure, while the other nodes "
                                      f"went on [{ps[0].host}/proc/*/alive.json]"))
    first = rows[0]
    if first.get("silent") and first["node"] not in lost:
        p = next(q for q in run.procs if q.who == first["who"])
        inside = _in_collective(p)
        peers = _waiting_peers(run, p)
        in_fr = [v for v in fr if any(rank_of.get((p.host, r)) is p for r in v.ranks)]
        what = (f"stopped inside {inside}" if inside else
                "stopped or hung (its peers waited on it)" if peers or in_fr else
                "was killed (SIGKILL, the OOM killer) or stopped, without a word")
        more = "".join(f"; {t}" for t in peers[:2]) + "".join(f"; flight recorder: {v.says}" for v in in_fr[:1])
        out.append(_adj("U6", f"{p.who} {what}: its last record is the earliest failure of the run, before every other "
                              f"process's [{first['file']}]{more}"))
    elif not first.get("silent") and first["what"].startswith(("signal", "fatal signal")):
        p = next(q for q in run.procs if q.who == first["who"])
        in_fr = [v for v in fr if any(rank_of.get((p.host, r)) is p for r in v.ranks)]
        more = "".join(f"; flight recorder: {v.says}" for v in in_fr[:1])
        out.append(_adj("U6", f"{first['who']} died first: {first['what']} [{first['file']}]{more}", delta=4.0))
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
    by_key = {(p.host, p.key): p for p in run.procs}
    for d in run.fr_dirs:
        for dump in flightrec.read_dir(d, fr_problems):
            host = d.parent.name
            if dump.rank in dumps:  # one rank number in two communicators (trainer and rollout): the newer one wins
                fr_problems.append(f"{dump.name}: rank {dump.rank} dumped by more than one process; the newest is judged")
            dumps[dump.rank] = dump.data
            writer = by_key.get((host, dump.writer))
            if writer is not None:
                rank_of[(host, dump.rank)] = writer
    expected = sorted({r for (_, r) in rank_of})
    if dumps:
        verdicts = flightrec.analyse(dumps, expected)
    for msg in fr_problems:
        run.note("fr/", msg)
    rows = first_failures(run)
    adj = _libs(run.procs) + _env(run.procs) + _liveness(run, rows, verdicts, rank_of) + _memory(run, rows)
    nodes = node_of(run)
    section = {
        "root": str(run.root), "schema": run.run.get("schema"), "envbuild_version": run.run.get("envbuild_version"),
        "nodes": sorted(set(nodes.values()) or set(run.nodes)),
        "processes": [{"host": p.host, "node": nodes[id(p)], "pid": p.pid, "role": p.role, "dir": f"{p.host}/proc/{p.key}",
                       "actor_id": p.ray.get("actor_id"), "t_start": p.start.get("t_start"), "t_last": p.t_last,
                       "exited": p.exited, "exit": p.exit_code(),
                       "first_failure": (p.first_failure() or (None, None, None))[1],
                       "libnccl": (p.lib("libnccl") or {}).get("version"),
                       "envbuild_version": p.start.get("envbuild_version")} for p in run.procs],
        "first_failures": rows[:16],
        "flight_recorder": [{"group": v.group, "seq": v.seq, "op": v.op, "kind": v.kind, "ranks": v.ranks,
                             "says": v.says} for v in verdicts],
        "missing": run.missing,
    }
    return adj, section
