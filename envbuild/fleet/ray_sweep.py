"""`envbuild doctor --ray ADDRESS`: the doctor on every node of a Ray cluster, placed by Ray itself.

One bundle per alive node in a STRICT_SPREAD placement group (slime places its actors the same way); in each
bundle a NodeAgent actor (ray_worker.py) runs the doctor in the Ray worker's own process, so the checks see the
environment the job's actors get (the `ray start` shell plus the job's runtime_env), not the driver's shell.
With --quick/--full every GPU of every node then joins one all-reduce and one all-to-all (NCCL; gloo on a
cluster without GPUs), busbw per node, the slowest node named against the median. The node reports are
merged by fleet/merge.py, the same code as `envbuild report merge`.

Nothing waits without a deadline: every ray.get goes through ray.wait with a timeout; a node that dies is
reported with the phase it was in, one that hangs is ray.kill-ed at the sweep's deadline and reported the same.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from envbuild.errors import EnvbuildError
from envbuild.fleet.merge import FleetReport, NodeReport, error_node, merge, node_from_dict
from envbuild.report.model import Metric, Result, Status

DEADLINES = {"static": 120.0, "quick": 600.0, "full": 1800.0}  # whole sweep, seconds
SLOW_NODE = 0.8  # a node below 0.8 x the fleet's median busbw is named (a relative rule of envbuild's own:
# nccl-tests#212 and azurehpc-health-checks give absolute floors per link type, which a mixed fleet cannot share)
POLL_S = 1.0
SHIPPED_CHECK = "fleet.envbuild_shipped"


@dataclass
class RaySweepOptions:
    address: str = "auto"
    doctor: Dict[str, Any] = field(default_factory=dict)  # DoctorOptions fields for every node's run
    deadline_s: Optional[float] = None
    runtime_env: Optional[Dict[str, Any]] = None
    audit: bool = False
    collective_mb: Optional[float] = None  # default 64 MB on GPUs, 8 MB on gloo
    collective_iters: int = 5
    json_path: Optional[str] = None
    junit_path: Optional[str] = None
    prom_path: Optional[str] = None
    quiet: bool = False


def _import_ray():
    try:
        import ray
    except ImportError:
        raise EnvbuildError("--ray needs Ray in envbuild's Python: pip install 'envbuild[ray]'") from None
    return ray


def _reachable(address: str) -> None:
    """Refuse an address nothing listens on in 5 s (ray.init would retry for a minute)."""
    if address in ("auto", "local") or address.startswith("ray://"):
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise EnvbuildError(f"--ray {address}: expected HOST:PORT of the Ray head (GCS), or auto")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise EnvbuildError(f"--ray {address}: cannot reach a Ray head there ({exc.strerror or exc}); "
                            "is `ray start --head` running, and is this the GCS port (default 6379)?") from None


def connect(ray, address: str, runtime_env: Optional[Dict[str, Any]]) -> None:
    _reachable(address)
    try:
        ray.init(address=address, runtime_env=runtime_env, log_to_driver=False, logging_level="ERROR",
                 include_dashboard=False) if address != "local" else ray.init(runtime_env=runtime_env)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise EnvbuildError(f"--ray {address}: cannot connect: {str(exc).splitlines()[0]}") from None


def _names(idents: Dict[int, Dict[str, Any]], ray_nodes: Dict[str, Dict[str, Any]]) -> Dict[int, str]:
    """A name per bundle: the host name, or host@<Ray node name or id> where several Ray nodes share a host."""
    hosts: Dict[str, int] = {}
    for ident in idents.values():
        hosts[ident["hostname"]] = hosts.get(ident["hostname"], 0) + 1
    out = {}
    for i, ident in idents.items():
        host = ident["hostname"]
        if hosts[host] > 1:
            node_name = ray_nodes.get(ident["node_id"], {}).get("NodeName") or ""
            tag = node_name if node_name and node_name != ident["ip"] else ident["node_id"][:8]
            host = f"{host}@{tag}"
        out[i] = host
    return out


ENVBUILD_MISSING = "envbuild is not importable by this node's Ray workers"


TORCH_MISSING = "torch is not importable by this node's Ray workers (the job's runtime_env has no torch)"
GONE_IN_WORDS = {  # Ray's exception for a call whose actor is gone, said in plain words
    "ActorUnavailableError": "the node's Ray worker stopped answering (its process, or the node, is unreachable)",
    "ActorDiedError": "the node's Ray worker process died (killed, crashed or out of memory), or its node is down",
    "RayActorError": "the node's Ray worker process died (killed, crashed or out of memory), or its node is down",
    "NodeDiedError": "the Ray node died (its raylet is gone)",
    "WorkerCrashedError": "the node's Ray worker process crashed",
}


def _why(ray, exc: BaseException) -> str:
    """What went wrong with a call, in words an admin acts on (not Ray's exception text). An agent that cannot
    import envbuild dies in its creation task, so Ray reports it as a dead actor: the missing module is looked
    for first, since it decides what the sweep does next (ship the driver's envbuild)."""
    text = str(exc)
    if "No module named 'envbuild" in text:
        return f"{ENVBUILD_MISSING} (No module named 'envbuild')"
    if _actor_gone(ray, exc):
        name = type(exc).__name__
        return f"{GONE_IN_WORDS.get(name, GONE_IN_WORDS['RayActorError'])} (Ray: {name})"
    cause = getattr(exc, "cause", None)  # a RayTaskError carries the exception the call raised
    if isinstance(cause, EnvbuildError):
        return f"{USAGE}: {cause}"
    if "No module named 'torch'" in text:
        return TORCH_MISSING
    lines = [l for l in text.splitlines() if l.strip()]
    return f"{type(exc).__name__}: " + (lines[-1] if lines else "")[:300]


USAGE = "the doctor refused its options"


def _reason(problem: str) -> str:
    """A problem without its `(while: ...)` tail: the part that can be the same on every node."""
    return problem.split(" (while: ")[0]


def shared_reason(problems: Dict[int, str], total: int) -> Optional[str]:
    """The one reason every one of `total` calls failed for, when they all failed the same way (no torch in the
    job's env, an option the doctor refuses): the fleet's problem, not each node's. None otherwise."""
    reasons = {_reason(p) for p in problems.values()}
    if len(problems) == total and total > 1 and len(reasons) == 1:
        return reasons.pop()
    return None


def _say(text: str) -> None:
    """A progress line on stderr (the sweep takes minutes on a big fleet; the report goes to stdout)."""
    import sys

    print(f"envbuild --ray: {text}", file=sys.stderr, flush=True)


def _actor_gone(ray, exc: BaseException) -> bool:
    """True when the actor (its process or node) is gone, not when the call merely raised."""
    gone = tuple(getattr(ray.exceptions, n) for n in ("RayActorError", "ActorUnavailableError", "NodeDiedError",
                                                      "WorkerCrashedError") if hasattr(ray.exceptions, n))
    return isinstance(exc, gone)


class _Waiter:
    """ray.wait with a deadline over named refs, polling each actor's phase() meanwhile."""

    def __init__(self, ray, actors: Dict[int, Any], deadline: float, names: Optional[Dict[int, str]] = None,
                 abort_on_death: bool = False):
        self.ray, self.actors, self.deadline = ray, actors, deadline
        self.names = names or {}
        self.abort_on_death = abort_on_death  # a collective cannot finish once one rank is gone: stop the rest
        self.dead: List[int] = []
        self.phase: Dict[int, Dict[str, Any]] = {i: {"phase": "starting"} for i in actors}

    def run(self, refs: Dict[int, Any]) -> Tuple[Dict[int, Any], Dict[int, str]]:
        """(values, problems): each ref's value, or why there is none (died / no answer by the deadline)."""
        ray = self.ray
        values: Dict[int, Any] = {}
        problems: Dict[int, str] = {}
        pending = dict(refs)
        while pending:
            left = self.deadline - time.monotonic()
            if left <= 0:
                break
            ready, _ = ray.wait(list(pending.values()), num_returns=len(pending), timeout=min(POLL_S, left))
            for i, ref in list(pending.items()):
                if ref in ready:
                    del pending[i]
                    try:
                        values[i] = ray.get(ref, timeout=5)
                    except Exception as exc:  # the worker or its node died, or the call raised
                        problems[i] = f"{_why(ray, exc)} (while: {self._said(i)})"
                        if _actor_gone(ray, exc):
                            self.dead.append(i)
            if self.abort_on_death and problems and pending:
                self._abort(pending, problems)
                return values, problems
            self._poll(list(pending))
        for i in pending:
            problems[i] = f"no answer within the sweep's deadline; it was: {self._said(i)}"
            self.dead.append(i)
            self._kill(i)
        return values, problems

    def _abort(self, pending: Dict[int, Any], problems: Dict[int, str]) -> None:
        """One rank failed: the collective cannot finish. A pending rank whose worker still answers is stopped;
        one that does not answer in 3 s is the one whose node died or hung (a peer's error often comes back
        before Ray has noticed the death)."""
        pings = {i: self.actors[i].phase.remote() for i in pending}
        ready, _ = self.ray.wait(list(pings.values()), num_returns=len(pings), timeout=3)
        answered = set()
        for i, ref in pings.items():
            if ref in ready:
                try:
                    self.phase[i] = self.ray.get(ref, timeout=1)
                    answered.add(i)
                except Exception:
                    pass
        for i in pending:
            if i not in answered:
                self.dead.append(i)
                problems[i] = (f"the node's Ray worker does not answer (its process died or hung, or the node is down) "
                               f"(while: {self._said(i)})")
        gone = ", ".join(sorted({self.names.get(i, str(i)) for i in self.dead})) or \
            ", ".join(sorted({self.names.get(i, str(i)) for i in problems if i not in pending}))
        for i in answered:
            problems[i] = f"stopped: a peer on {gone} is gone or failed (this rank was: {self._said(i)})"
        for i in pending:
            self._kill(i)

    def _kill(self, i: int) -> None:
        try:
            self.ray.kill(self.actors[i])
        except Exception:
            pass

    def _poll(self, which: List[int]) -> None:
        if not which:
            return
        refs = {i: self.actors[i].phase.remote() for i in which}
        ready, _ = self.ray.wait(list(refs.values()), num_returns=len(refs), timeout=0.5)
        for i, ref in refs.items():
            if ref in ready:
                try:
                    self.phase[i] = self.ray.get(ref, timeout=1)
                except Exception:
                    pass

    def _said(self, i: int) -> str:
        p = self.phase.get(i, {})
        text = f"{p.get('phase', 'unknown')}" + (f" for {p['for_s']} s" if "for_s" in p else "")
        if p.get("children"):
            text += "; running " + "; ".join(p["children"][:3])
        return text


def run_sweep(o: RaySweepOptions) -> FleetReport:
    """The whole sweep; returns the merged fleet report (the caller writes and prints it)."""
    ray = _import_ray()
    mode = o.doctor.get("mode", "static")
    deadline = time.monotonic() + (o.deadline_s or DEADLINES.get(mode, 600.0))
    connect(ray, o.address, o.runtime_env)
    cleanup: List[str] = []
    try:
        return _sweep(ray, o, mode, deadline, cleanup)
    finally:
        ray.shutdown()
        for folder in cleanup:
            shutil.rmtree(folder, ignore_errors=True)


def _sweep(ray, o: RaySweepOptions, mode: str, deadline: float, cleanup: List[str]) -> FleetReport:
    from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from envbuild.fleet.ray_worker import NodeAgent

    all_nodes = ray.nodes()
    alive = sorted((n for n in all_nodes if n.get("Alive")), key=lambda n: n["NodeID"])
    ray_nodes = {n["NodeID"]: n for n in alive}
    probes = mode in ("quick", "full")
    gpus = {n["NodeID"]: int(n.get("Resources", {}).get("GPU", 0)) for n in alive}
    bundles = [{"CPU": 0.01, **({"GPU": gpus[n["NodeID"]]} if probes and gpus[n["NodeID"]] else {})} for n in alive]
    pg = placement_group(bundles, strategy="STRICT_SPREAD", name="envbuild-doctor")
    # The agents are asked for before the group is placed, and a static sweep's doctor with them: Ray starts
    # each node's worker as soon as its bundle is placed, and the driver's round trips overlap those starts
    # (a worker's start is most of a node's static sweep).
    agent_cls = ray.remote(NodeAgent)
    actors: Dict[int, Any] = {}
    for i in range(len(bundles)):
        actors[i] = agent_cls.options(
            num_cpus=0, num_gpus=bundles[i].get("GPU", 0), max_concurrency=2, name=None,
            scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i)).remote()
    early = {i: a.doctor.remote(dict(o.doctor)) for i, a in actors.items()} if not probes else {}
    place_s = max(5.0, min(60.0, deadline - time.monotonic()))
    ready, _ = ray.wait([pg.ready()], timeout=place_s)
    if not ready:
        for a in actors.values():
            ray.kill(a)
        remove_placement_group(pg)
        raise EnvbuildError(f"--ray: Ray did not place one bundle on each of the {len(alive)} alive nodes within "
                            f"{place_s:.0f} s (STRICT_SPREAD {bundles[:2]}...): GPUs held by another job, or a node "
                            "without free CPU? See `ray status`")
    _say(f"{len(alive)} alive node(s), one STRICT_SPREAD bundle each, placed")
    table = placement_group_table(pg)
    bundle_node = {int(k): v for k, v in table.get("bundles_to_node_id", {}).items()}
    waiter = _Waiter(ray, actors, min(deadline, time.monotonic() + 120))
    idents, problems = waiter.run({i: a.identity.remote() for i, a in actors.items()})
    shipped, ship_env = _ship_where_missing(ray, o, agent_cls, pg, bundles, actors, waiter, idents, problems,
                                            cleanup)
    waiter.deadline = deadline
    for i in problems:  # a worker that cannot start: name it by the Ray node it was placed on
        nid = bundle_node.get(i, "?")
        idents[i] = None  # type: ignore[assignment]
        problems[i] = f"Ray node {ray_nodes.get(nid, {}).get('NodeManagerAddress', '?')} ({nid[:8]}): {problems[i]}"
    good = {i: v for i, v in idents.items() if v}
    # a node without a worker is named from Ray's node table the way the others name themselves (host, or
    # host@<node name> where hosts repeat), so its row sits where an admin looks for that host
    seen = dict(good)
    for i in problems:
        nid = bundle_node.get(i, "")
        info = ray_nodes.get(nid, {})
        host = info.get("NodeManagerHostname") or info.get("NodeName") or nid[:8] or f"bundle{i}"
        seen[i] = {"hostname": host, "node_id": nid or f"bundle{i}", "ip": info.get("NodeManagerAddress", "")}
    names = _names(seen, ray_nodes)
    nodes: Dict[int, NodeReport] = {i: error_node(names[i], f"ray:{bundle_node.get(i, '?')}", msg)
                                    for i, msg in problems.items()}
    doc_refs = {i: early[i] for i in good if i in early and i not in shipped}
    for i in good:
        if i not in doc_refs:
            opts = dict(o.doctor)
            if probes and good[i]["gpu_ids"]:
                opts["gpus"] = good[i]["gpu_ids"]
            doc_refs[i] = actors[i].doctor.remote(opts)
    _say(f"doctor ({mode}) running on {len(doc_refs)} node(s)")
    reports, died = waiter.run(doc_refs)
    shared = shared_reason(died, len(doc_refs)) if not reports else None
    if shared is not None and shared.startswith(USAGE):  # the same refusal everywhere: the command line, not nodes
        raise EnvbuildError(f"--ray: on every node {shared}")
    for i, data in reports.items():
        n = node_from_dict(data, f"ray:{good[i]['node_id']}", names[i])
        n.node = names[i]
        nodes[i] = n
    for i, msg in died.items():
        nodes[i] = error_node(names[i], f"ray:{good[i]['node_id']}", f"node {names[i]}: {msg}")
    for i, why in shipped.items():
        nodes[i].findings.append(Result(
            SHIPPED_CHECK, "fleet", Status.WARN,
            f"{why.split(' (while:')[0]}: this sweep shipped the driver's envbuild {good[i]['envbuild_version']} "
            "to it (runtime_env py_modules), so this report is that envbuild's",
            evidence={"python": good[i]["python"], "shipped_envbuild": good[i]["envbuild_version"]},
            remediation="install envbuild (pip install 'envbuild[ray]') in the Python environment of this node's "
                        "Ray workers, for doctor runs outside this sweep"))
    live = sorted(reports)
    fleet_results: List[Result] = [Result(
        "fleet.ray_nodes", "fleet", Status.PASS if not problems and not died else Status.ERROR,
        f"{len(alive)} alive Ray node(s), one STRICT_SPREAD bundle each; {len(live)} returned a report",
        evidence={"alive": len(alive), "dead_in_table": len(all_nodes) - len(alive), "mode": mode})]
    if o.audit:
        _audit(ray, waiter, actors, live, nodes)
    if probes:
        ship = {i: ship_env for i in shipped}
        fleet_results += _collectives(ray, o, waiter, actors, agent_cls, pg, live, good, names, nodes, gpus, deadline,
                                      ship)
    for a in actors.values():
        try:
            ray.kill(a)
        except Exception:
            pass
    remove_placement_group(pg)
    return merge(list(nodes.values()), fleet_results, strict=bool(o.doctor.get("strict")))


def _ship_where_missing(ray, o: RaySweepOptions, agent_cls, pg, bundles, actors: Dict[int, Any], waiter: _Waiter,
                        idents: Dict[int, Any], problems: Dict[int, str],
                        cleanup: List[str]) -> Tuple[Dict[int, str], Dict[str, Any]]:
    """Nodes whose agent could not import envbuild get a second agent that brings the driver's (fleet/ship.py).
    Returns ({bundle: why it was shipped}, the runtime_env that ships it, for those nodes' later actors); a node
    where that fails too keeps its problem, with both reasons."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from envbuild import __version__
    from envbuild.fleet.ship import shipping_env

    lacking = sorted(i for i, msg in problems.items() if msg.startswith(ENVBUILD_MISSING))
    if not lacking:
        return {}, {}
    _say(f"envbuild is not importable by the Ray workers of {len(lacking)} node(s): shipping the driver's envbuild "
         f"{__version__} to them (runtime_env py_modules)")
    try:
        env, folder = shipping_env(o.runtime_env)
    except RuntimeError as exc:
        for i in lacking:
            problems[i] = (f"{problems[i].split(' (while:')[0]}, and the driver could not ship its envbuild to it "
                           f"({exc}); install envbuild[ray] in the Python environment of this node's Ray workers")
        return {}, {}
    cleanup.append(folder)
    for i in lacking:
        try:
            ray.kill(actors[i])
        except Exception:
            pass
        actors[i] = agent_cls.options(
            num_cpus=0, num_gpus=bundles[i].get("GPU", 0), max_concurrency=2, runtime_env=env,
            scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i)).remote()
    again, still = waiter.run({i: actors[i].identity.remote() for i in lacking})
    shipped = {}
    for i, ident in again.items():
        idents[i] = ident
        shipped[i] = problems.pop(i)
    for i, msg in still.items():
        problems[i] = (f"{problems[i].split(' (while:')[0]}, and shipping the driver's envbuild to it (runtime_env "
                       f"py_modules) failed too: {msg}; install envbuild[ray] in the Python environment of this "
                       "node's Ray workers")
    return shipped, env


def _audit(ray, waiter: _Waiter, actors, live: List[int], nodes: Dict[int, NodeReport]) -> None:
    """The audit of each node's worker process against the driver's shell (this process)."""
    from envbuild.fleet.audit import audit_process, check_process

    shell = audit_process(group="driver shell")
    audits, died = waiter.run({i: actors[i].audit.remote(group="doctor --ray") for i in live})
    for i, a in audits.items():
        nodes[i].findings += check_process(a, shell)
        nodes[i].findings.append(Result("fleet.audit", "stack", Status.PASS,
                                        f"audit of Ray worker pid {a['pid']} on {a['host']}", evidence={"audit": a}))
    for i, msg in died.items():
        nodes[i].findings.append(Result("fleet.audit", "stack", Status.ERROR, f"audit did not finish: {msg}"))


def _collectives(ray, o: RaySweepOptions, waiter: _Waiter, actors, agent_cls, pg, live, good, names, nodes,
                 gpus, deadline, ship: Dict[int, Dict[str, Any]]) -> List[Result]:
    """One all-reduce and one all-to-all over every GPU of every node (one rank per node on gloo); `ship`: the
    runtime_env of the nodes that got the driver's envbuild, for their rank actors too."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    if len(live) < 2:
        return [Result("comm.fleet_collectives", "comm", Status.SKIP,
                       f"needs at least 2 nodes with a report; {len(live)} here")]
    use_nccl = all(gpus.get(good[i]["node_id"], 0) > 0 for i in live)
    backend = "nccl" if use_nccl else "gloo"
    ranks: List[Tuple[int, Any]] = []  # (bundle index, actor)
    if use_nccl:
        for i in live:  # the doctor actors hold the node's GPUs: hand them to one rank actor per GPU
            ray.kill(actors[i])
        for i in live:
            for _ in range(gpus[good[i]["node_id"]]):
                extra = {"runtime_env": ship[i]} if i in ship else {}
                ranks.append((i, agent_cls.options(num_cpus=0, num_gpus=1, max_concurrency=2, **extra,
                                                   scheduling_strategy=PlacementGroupSchedulingStrategy(
                                                       pg, placement_group_bundle_index=i)).remote()))
    else:
        ranks = [(i, actors[i]) for i in live]
    rank_actors = {r: a for r, (_, a) in enumerate(ranks)}
    rank_names = {r: names[ranks[r][0]] for r in rank_actors}
    w = _Waiter(ray, rank_actors, min(deadline, time.monotonic() + 60), names=rank_names, abort_on_death=True)
    port, bad = w.run({0: rank_actors[0].free_port.remote()})
    master = good[ranks[0][0]]["ip"]
    size = int((o.collective_mb or (64.0 if use_nccl else 8.0)) * 1e6)
    left = deadline - time.monotonic()
    w.deadline = deadline
    refs = {} if bad else {r: a.collective.remote(rank=r, world=len(ranks), master=master, port=port[0],
                                                  backend=backend, size_bytes=size, iters=o.collective_iters,
                                                  timeout_s=max(10.0, left - 5))
                           for r, a in rank_actors.items()}
    _say(f"collectives: {backend} all-reduce and all-to-all over {len(ranks)} ranks on {len(live)} nodes")
    values, problems = w.run(refs) if refs else ({}, {0: bad.get(0, "no port")})
    out: List[Result] = []
    where = {r: ranks[r][0] for r in rank_actors}
    failed_nodes = sorted({names[where[r]] for r in w.dead}) or sorted({names[where[r]] for r in problems})
    raised = {r: m for r, m in problems.items() if not m.startswith("stopped: ")}
    shared = shared_reason(raised, len(ranks)) if not w.dead else None
    for r, msg in sorted(problems.items()) if shared is None else ():  # shared: one fleet-wide finding below
        i = where[r]
        nodes[i].findings.append(Result("comm.fleet_collectives", "comm", Status.ERROR,
                                        f"rank {r} of {len(ranks)} ({backend}) on {names[i]}: {msg}",
                                        causes=["U4"]))
    per_node: Dict[int, Dict[str, float]] = {}
    for r, v in values.items():
        i = where[r]
        bw = per_node.setdefault(i, {"allreduce": float("inf"), "alltoall": float("inf"), "ok": 1.0})
        bw["allreduce"] = min(bw["allreduce"], v["allreduce"]["busbw_gbps"])
        bw["alltoall"] = min(bw["alltoall"], v["alltoall"]["busbw_gbps"])
        bw["ok"] = min(bw["ok"], float(v["allreduce_ok"] and v["alltoall_ok"]))
    if problems:
        evidence = {"problems": {str(k): v for k, v in problems.items()}}
        if shared is not None:
            out.append(Result("comm.fleet_collectives", "comm", Status.ERROR,
                              f"the {backend} collectives over {len(ranks)} ranks could not run: every rank failed "
                              f"the same way, so it is the job's environment, not a node: {shared}",
                              evidence=evidence, causes=["U4"],
                              remediation="give the job's runtime_env a Python with torch (--runtime-env "
                                          "'{\"py_executable\": \"/path/to/env/bin/python\"}' or pip)"
                              if shared == TORCH_MISSING else "fix the cause above and rerun"))
        elif w.dead:
            out.append(Result("comm.fleet_collectives", "comm", Status.ERROR,
                              f"the {backend} collectives over {len(ranks)} ranks did not complete: rank(s) on "
                              f"{', '.join(failed_nodes) or '?'} died or hung, the others were stopped",
                              evidence=evidence, causes=["U4"],
                              remediation="check the named nodes (`ray status`, dmesg) and rerun; the other nodes' "
                                          "numbers are not comparable without them"))
        else:
            out.append(Result("comm.fleet_collectives", "comm", Status.ERROR,
                              f"the {backend} collectives over {len(ranks)} ranks did not complete: rank(s) on "
                              f"{', '.join(failed_nodes) or '?'} failed, the others were stopped (see those nodes' "
                              "comm.fleet_collectives)", evidence=evidence, causes=["U4"]))
        return out
    for op in ("allreduce", "alltoall"):
        med = statistics.median(bw[op] for bw in per_node.values())
        slow_i = min(per_node, key=lambda i: (per_node[i][op], names[i]))
        slow = per_node[slow_i][op]
        wrong = [names[i] for i, bw in per_node.items() if bw["ok"] < 1]
        for i, bw in per_node.items():
            status = Status.FAIL if bw["ok"] < 1 else (Status.WARN if med > 0 and bw[op] < SLOW_NODE * med else Status.PASS)
            nodes[i].findings.append(Result(
                f"comm.fleet_{op}", "comm", status,
                f"{op} busbw {bw[op]:.3f} GB/s ({backend}, {len(ranks)} ranks; fleet median {med:.3f})"
                + ("; WRONG RESULT" if bw["ok"] < 1 else ""),
                metrics=[Metric("busbw", bw[op], "GB/s", expect=f">= {SLOW_NODE} x fleet median {med:.3f} GB/s",
                                source="envbuild relative rule (ray_sweep.SLOW_NODE)")],
                causes=["U4"] if status != Status.PASS else []))
        status = Status.FAIL if wrong else (Status.WARN if med > 0 and slow < SLOW_NODE * med else Status.PASS)
        text = (f"{op} over {len(ranks)} {backend} ranks on {len(per_node)} nodes: median busbw {med:.3f} GB/s, "
                f"slowest {names[slow_i]} {slow:.3f} GB/s ({slow / med if med else 0:.2f} x median)")
        if wrong:
            text += f"; wrong results on {', '.join(sorted(wrong))}"
        if not use_nccl:
            text += "; no GPU in the cluster: gloo over TCP measures the host network, not NCCL"
        out.append(Result(f"comm.fleet_{op}", "comm", status, text,
                          evidence={"per_node_busbw_gbps": {names[i]: bw[op] for i, bw in sorted(per_node.items())},
                                    "backend": backend, "size_bytes": size, "iters": o.collective_iters},
                          metrics=[Metric("median_busbw", med, "GB/s"), Metric("slowest_busbw", slow, "GB/s",
                                   expect=f">= {SLOW_NODE} x median", source="envbuild relative rule")],
                          remediation=f"look at {names[slow_i]}: NIC/IB link state, PCIe width, NCCL_SOCKET_IFNAME"
                          if status != Status.PASS else None, causes=["U4"] if status != Status.PASS else []))
    return out


def parse_runtime_env(value: Optional[str]) -> Optional[Dict[str, Any]]:
    """--runtime-env: inline JSON or a JSON file, as `ray job submit --runtime-env-json` takes."""
    if not value:
        return None
    text = value
    if not value.lstrip().startswith("{"):
        if not os.path.isfile(value):
            raise EnvbuildError(f"--runtime-env {value}: neither JSON nor a file")
        with open(value) as f:
            text = f.read()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EnvbuildError(f"--runtime-env: line {exc.lineno}: {exc.msg}") from None
    if not isinstance(data, dict):
        raise EnvbuildError("--runtime-env: expected a JSON object")
    return data
