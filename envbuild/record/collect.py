"""`envbuild record collect`: one run's directories from every node into one folder, and what is missing and why.

Two sources: RUN_DIR as it is (a shared filesystem: every node wrote into it), or `--ray ADDRESS`: a task pinned
to each alive node tars that node's RUN_DIR/<host> and returns it. What no record can say by itself is told from
the records together: a process without an exit event whose heartbeat stopped well before the run's last record
was killed (SIGKILL, the OOM killer), stopped (SIGSTOP) or lost with its node; Ray, when asked, says which nodes
are dead and why each actor died. Readers tolerate cut lines and missing files; so does this.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import socket
import tarfile
import time
from typing import Any, Dict, List, Optional

from envbuild.record.runenv import RecordInputError

SCHEMA = "envbuild.record.collect/1"
NODE_TAR_MAX = 512 << 20
FILE_MAX = 256 << 20
EVENTS_READ_MAX = 4 << 20


def collect(run_dir: str, out: str, address: Optional[str] = None) -> Dict[str, Any]:
    if os.path.exists(out) and not os.path.isdir(out):
        raise RecordInputError(f"{out} exists and is not a folder")
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as exc:
        raise RecordInputError(f"cannot create {out}: {exc.strerror or exc}") from None
    notes: List[str] = []
    ray_info: Dict[str, Any] = {}
    if address is None:
        if not os.path.isdir(run_dir):
            raise RecordInputError(f"{run_dir} is no run directory (not a folder)")
        _copy_tree(run_dir, out, notes)
    else:
        import contextlib
        import sys

        with contextlib.redirect_stdout(sys.stderr):  # Ray prints node-death notices to the driver's stdout
            ray_info = _from_ray(run_dir, out, address, notes)
    summary = analyze(out, ray_info)
    summary["notes"] = notes + summary.get("notes", [])
    summary["run_dir"], summary["source"] = run_dir, (f"ray {address}" if address else "files")
    with open(os.path.join(out, "collect.json"), "w") as f:
        json.dump(summary, f, indent=1, sort_keys=True)
    return summary


def _copy_tree(src: str, dst: str, notes: List[str]) -> None:
    for root, dirs, files in os.walk(src):
        rel = os.path.relpath(root, src)
        target = os.path.join(dst, rel) if rel != "." else dst
        os.makedirs(target, exist_ok=True)
        for name in files:
            if name.endswith(".tmp"):
                continue
            path = os.path.join(root, name)
            try:
                if os.path.getsize(path) > FILE_MAX:
                    notes.append(f"{os.path.join(rel, name)}: over {FILE_MAX >> 20} MiB, not copied")
                    continue
                shutil.copy2(path, os.path.join(target, name))
            except OSError as exc:
                notes.append(f"{os.path.join(rel, name)}: {exc.strerror or exc}")


def _reachable(address: str) -> None:
    host, _, port = address.rpartition(":")
    if address == "auto":
        return
    if not port.isdigit():
        raise RecordInputError(f"--ray {address}: give HOST:PORT of the Ray head (its GCS port)")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=3).close()
    except OSError as exc:
        raise RecordInputError(f"cannot reach Ray at {address}: {exc.strerror or exc}") from None


def _tar_node(run_dir: str, limit: int) -> Dict[str, Any]:
    """Runs on one node (pickled by value: the worker needs no envbuild): that node's RUN_DIR/<host> as tar bytes."""
    import io as _io
    import os as _os
    import socket as _socket
    import tarfile as _tarfile

    name = "".join(c if c.isalnum() or c in "._-" else "_" for c in (_socket.gethostname() or "unknown-host"))
    folder = _os.path.join(run_dir, name)
    if not _os.path.isdir(folder):
        return {"host": name, "error": f"no {folder} on this node (nothing recorded here)"}
    buf = _io.BytesIO()
    skipped = []
    with _tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for root, _dirs, files in _os.walk(folder):
            for f in files:
                p = _os.path.join(root, f)
                try:
                    if f.endswith(".tmp") or buf.tell() + _os.path.getsize(p) > limit:
                        skipped.append(_os.path.relpath(p, folder))
                        continue
                    tar.add(p, arcname=_os.path.relpath(p, run_dir))
                except OSError:
                    skipped.append(_os.path.relpath(p, folder))
    return {"host": name, "tar": buf.getvalue(), "skipped": skipped[:50]}


def _from_ray(run_dir: str, out: str, address: str, notes: List[str]) -> Dict[str, Any]:
    _reachable(address)
    try:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    except ImportError:
        raise RecordInputError("--ray needs the ray package in this environment") from None
    try:
        ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    except Exception as exc:
        raise RecordInputError(f"cannot connect to Ray at {address}: {str(exc).splitlines()[0][:200]}") from None
    try:
        nodes = ray.nodes()
        task = ray.remote(num_cpus=0, max_retries=0)(_tar_node)
        pending = {}
        info: Dict[str, Any] = {"nodes": [], "actors": _actors(ray)}
        for n in nodes:
            entry = {"node_id": n.get("NodeID"), "ip": n.get("NodeManagerAddress"), "alive": bool(n.get("Alive")),
                     "ray_host": n.get("NodeManagerHostname"),
                     "death": n.get("DeathReasonMessage") or n.get("DeathReason") or None}
            info["nodes"].append(entry)
            if entry["alive"]:
                ref = task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(entry["node_id"], soft=False)) \
                    .remote(run_dir, NODE_TAR_MAX)
                pending[entry["node_id"]] = ref
        seen_hosts: Dict[str, str] = {}
        for node_id, ref in pending.items():
            entry = next(e for e in info["nodes"] if e["node_id"] == node_id)
            try:
                got = ray.get(ref, timeout=120)
            except Exception as exc:
                entry["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                if "doesn't exist any more" in str(exc):  # listed alive until Ray's health check gives up on it
                    entry["alive"] = False
                    entry["death"] = entry["death"] or "Ray cannot schedule on it any more (node lost)"
                continue
            entry["host"] = got.get("host")
            if got.get("error"):
                entry["error"] = got["error"]
                continue
            if got["host"] in seen_hosts:
                entry["same_host_as"] = seen_hosts[got["host"]]
                continue  # several Ray nodes on one machine share its host folder
            seen_hosts[got["host"]] = node_id
            with tarfile.open(fileobj=io.BytesIO(got["tar"]), mode="r:gz") as tar:
                tar.extractall(out, filter="data")
            for s in got.get("skipped", []):
                notes.append(f"{got['host']}: {s} not gathered (size limit or unreadable)")
        return info
    finally:
        ray.shutdown()


def _actors(ray: Any) -> Dict[str, Dict[str, Any]]:
    """actor_id -> state, class, node, pid and death cause, from the GCS (no dashboard needed)."""
    try:
        from ray._private import state

        raw = state.actors()
    except Exception:
        return {}
    out = {}
    for actor_id, a in (raw or {}).items():
        cause = a.get("DeathCause") or a.get("death_cause")
        out[actor_id] = {"state": a.get("State"), "class": a.get("ActorClassName"), "pid": a.get("Pid"),
                         "node_id": (a.get("Address") or {}).get("NodeID"), "death": _short(cause)}
    return out


def _short(cause: Any) -> Optional[str]:
    """Ray's death cause (a protobuf's text or dict) as its error message."""
    import re

    if not cause:
        return None
    text = json.dumps(cause, default=str) if not isinstance(cause, str) else cause
    m = re.search(r'error_?[mM]essage\\?"?:\s*\\?"(.*?)\\?"(?:\\n|\n|,|})', text)
    return (m.group(1) if m else text)[:300].replace("\\\\", "")


def _read_json(path: str) -> Optional[Dict[str, Any]]:
    try:
        with open(path) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def read_events(path: str) -> List[Dict[str, Any]]:
    """events.jsonl, at most its last EVENTS_READ_MAX bytes, cut lines skipped."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            f.seek(max(0, size - EVENTS_READ_MAX))
            data = f.read()
    except OSError:
        return []
    out = []
    for line in data.decode(errors="replace").splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if isinstance(ev, dict):
            out.append(ev)
    return out


def analyze(out: str, ray_info: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    ray_info = ray_info or {}
    actors = ray_info.get("actors", {})
    dead_nodes = {n["node_id"]: n for n in ray_info.get("nodes", []) if not n.get("alive")}
    procs: List[Dict[str, Any]] = []
    hosts = sorted(h for h in os.listdir(out) if os.path.isdir(os.path.join(out, h, "proc")))
    for host in hosts:
        base = os.path.join(out, host, "proc")
        for name in sorted(os.listdir(base)):
            d = os.path.join(base, name)
            start = _read_json(os.path.join(d, "start.json")) or {}
            events = read_events(os.path.join(d, "events.jsonl"))
            alive = _read_json(os.path.join(d, "alive.json")) or {}
            failure = _read_json(os.path.join(d, "failure.json"))
            ctx = next((e for e in reversed(events) if e.get("kind") == "ray_context"), None) or start.get("ray") or {}
            times = [e.get("t") for e in events if isinstance(e.get("t"), (int, float))]
            last = max([t for t in times + [alive.get("t")] if isinstance(t, (int, float))], default=None)
            p = {"host": host, "dir": f"{host}/proc/{name}", "pid": start.get("pid") or _pid_of(name),
                 "role": start.get("role"), "actor_class": ctx.get("actor_class"), "actor_id": ctx.get("actor_id"),
                 "node_id": ctx.get("node_id"), "last_seen": last,
                 "heartbeat_s": start.get("heartbeat_s") or 10,
                 "exited": any(e.get("kind") == "exit" for e in events),
                 "failure": f"{failure.get('type')}: {str(failure.get('message'))[:160]}" if failure else None,
                 "hang": next((e.get("collective") or e.get("frame") for e in events if e.get("kind") == "hang"), None),
                 "fatal_signal": _fatal(os.path.join(d, "faulthandler.log"))}
            if not start:
                p["note"] = "no start.json (the process died within its first moments, or the file was cut)"
            procs.append(p)
    end = max((p["last_seen"] for p in procs if p["last_seen"]), default=None)
    missing: List[str] = []
    for p in procs:
        p["status"], p["reason"] = _status(p, end, actors, dead_nodes)
        if p["status"] in ("lost", "killed or stopped"):
            missing.append(f"{p['dir']} ({p['actor_class'] or p['role']}): {p['reason']}")
    nodes = []
    for n in ray_info.get("nodes", []):
        line = dict(n)
        if not n.get("alive"):
            line["status"] = "dead"
            missing.append(f"node {n['node_id'][:12]} ({n.get('ip')}) is dead: its node-local records could not be "
                           f"gathered" + (f" (Ray: {n['death']})" if n.get("death") else ""))
        elif n.get("error"):
            line["status"] = "no records"
            missing.append(f"node {n['node_id'][:12]} ({n.get('ip')}): {n['error']}")
        else:
            line["status"] = "gathered" if not n.get("same_host_as") else "same host as another node"
        nodes.append(line)
    recorded_actors = {p["actor_id"] for p in procs if p.get("actor_id")}
    for actor_id, a in actors.items():
        if actor_id not in recorded_actors and a.get("state") != "DEPENDENCIES_UNREADY":
            missing.append(f"actor {a.get('class')} {actor_id[:12]} has no record"
                           + (f" (Ray: {a['state']}; {a['death']})" if a.get("death") else f" (Ray: {a.get('state')})"))
    return {"schema": SCHEMA, "collected": time.time(), "hosts": hosts, "nodes": nodes, "processes": procs,
            "missing": missing, "last_record": end}


def _pid_of(name: str) -> Optional[int]:
    head = name.split("-")[0]
    return int(head) if head.isdigit() else None


def _fatal(path: str) -> Optional[str]:
    try:
        with open(path, errors="replace") as f:
            text = f.read(65536)
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Fatal Python error:"):
            return line.split(":", 1)[1].strip()
    return None


def _status(p: Dict[str, Any], end: Optional[float], actors: Dict[str, Any], dead_nodes: Dict[str, Any]):
    actor = actors.get(p.get("actor_id") or "") or {}
    ray_says = f" (Ray: {actor['death']})" if actor.get("death") else ""
    if p["fatal_signal"]:
        return "fatal signal", p["fatal_signal"] + ray_says
    if p["failure"]:
        return "failed", p["failure"]
    if p["exited"]:
        return "exited", "exit event recorded"
    if p.get("node_id") in dead_nodes:
        return "lost", "its Ray node died; no exit was recorded" + ray_says
    if p["last_seen"] is None or end is None:
        return "unknown", "no event with a time"
    gap = end - p["last_seen"]
    if gap > 3 * float(p["heartbeat_s"]) + 1:
        return "killed or stopped", (f"no exit; its heartbeat stopped {gap:.0f} s before the run's last record "
                                     "(SIGKILL, the OOM killer, SIGSTOP, or its node lost)" + ray_says)
    return "running", "heartbeat current, no exit yet" + ray_says


def render(summary: Dict[str, Any]) -> str:
    procs = summary["processes"]
    counts: Dict[str, int] = {}
    for p in procs:
        counts[p["status"]] = counts.get(p["status"], 0) + 1
    lines = [f"{len(procs)} process(es) on {len(summary['hosts'])} host(s) from {summary['source']}: "
             + ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))]
    for p in procs:
        if p["status"] not in ("exited", "running"):
            lines.append(f"  {p['status']:<18} {p['dir']} {p['actor_class'] or p['role'] or ''}: {p['reason']}")
    for m in summary["missing"]:
        lines.append(f"missing: {m}")
    for n in summary.get("notes", []):
        lines.append(f"note: {n}")
    return "\n".join(lines)
