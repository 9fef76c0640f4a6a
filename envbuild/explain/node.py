"""What the node, its env and its image are, from structured records, and what follows when a log disagrees.

A log's free text is the weakest witness: a GPU model read from a driver function name, a version quoted in a
question. A capture bundle (--root: NVML, the stack probe), a doctor report (--report: its checks' evidence)
say the same things in known fields, so they win: their values are the node's facts, and every fact the log
states is checked against them. A disagreement is often the answer itself ("the run printed NCCL 2.28.3; this
env's torch carries 2.28.9; the system copy on the loader path is 2.28.3: the run loaded the system copy"), so
it becomes an adjustment strong enough to rank that cause first, with the sentence as its reason.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from envbuild.explain.rank import Adjustment
from envbuild.explain.scan import ScanResult
from envbuild.explain.versions import cuda_code_text

MISMATCH_RAISE = 5.0  # a version the run printed that the node contradicts names the cause: as strong as a signature can be


@dataclass
class NodeFacts:
    """The node's facts, each value with where it was read."""

    values: Dict[str, List[Tuple[str, str]]] = field(default_factory=dict)  # fact id -> [(value, origin)]
    nccl_copies: List[Dict[str, Any]] = field(default_factory=list)  # {path, version, origins, mapped}

    def add(self, fact: str, value: Any, origin: str) -> None:
        if value is None or value == "":
            return
        v = str(value)
        if v not in [x for x, _ in self.values.get(fact, [])]:
            self.values.setdefault(fact, []).append((v, origin))

    def first(self, fact: str) -> Optional[str]:
        vals = self.values.get(fact)
        return vals[0][0] if vals else None

    def to_dict(self) -> Dict[str, Any]:
        return {"values": {k: [{"value": v, "origin": o} for v, o in vs] for k, vs in sorted(self.values.items())},
                "nccl_copies": self.nccl_copies}

    def __bool__(self) -> bool:
        return bool(self.values or self.nccl_copies)


def _gpu(name: str) -> str:
    return name.replace("NVIDIA ", "").strip()


def from_bundle(root: str) -> NodeFacts:
    """NVML's and the stack probe's records in a capture bundle (what is missing from it is simply not known)."""
    from envbuild.facts.source import BundleSource, FactUnavailable

    facts = NodeFacts()
    src = BundleSource(Path(root))
    try:
        nv = src.nvml()
        for d in nv.get("devices") or []:
            facts.add("gpu_model", _gpu(d.get("name") or ""), "bundle nvml.json (NVML device name)")
        facts.add("driver_version", nv.get("driver_version"), "bundle nvml.json (NVML driver version)")
        facts.add("cuda_driver_version", nv.get("cuda_driver_version"), "bundle nvml.json (the driver's CUDA version)")
    except FactUnavailable:
        pass
    try:
        _stack_facts(facts, src.stack(), "bundle stack.json")
    except FactUnavailable:
        pass
    return facts


def _stack_facts(facts: NodeFacts, stack: Dict[str, Any], origin: str) -> None:
    torch = stack.get("torch") or {}
    facts.add("torch_version", torch.get("version"), f"{origin} (torch.__version__)")
    facts.add("cuda_runtime", torch.get("cuda"), f"{origin} (torch.version.cuda)")
    facts.add("torch_nccl", torch.get("nccl_version"), f"{origin} (torch.cuda.nccl.version())")
    driver = stack.get("cuda_driver") or {}
    facts.add("cuda_driver_version", driver.get("version_code"), f"{origin} (cuDriverGetVersion of the mapped libcuda)")
    mapped = {m.get("realpath") or m.get("path") for m in stack.get("mapped") or [] if m.get("family") == "libnccl"}
    seen = set()
    for m in stack.get("reachable") or []:
        if m.get("family") != "libnccl" or not m.get("version"):
            continue
        real = m.get("realpath") or m.get("path")
        if real in seen:
            continue
        seen.add(real)
        facts.nccl_copies.append({"path": m.get("path"), "version": m["version"], "origins": m.get("origins") or [],
                                  "mapped": real in mapped, "origin": origin})


def from_report(report: Dict[str, Any], origin: str = "doctor report") -> NodeFacts:
    """The same facts from a doctor report: its GPU list and the evidence of the checks that read them."""
    facts = NodeFacts()
    for g in report.get("gpus") or []:
        if isinstance(g, dict) and g.get("name"):
            facts.add("gpu_model", _gpu(g["name"]), f"{origin} (gpus)")
    for r in report.get("results") or []:
        ev = r.get("evidence") if isinstance(r.get("evidence"), dict) else {}
        cid = r.get("check_id")
        if cid == "stack.torch":
            facts.add("torch_version", ev.get("version"), f"{origin} stack.torch")
            facts.add("cuda_runtime", ev.get("cuda"), f"{origin} stack.torch")
            facts.add("torch_nccl", ev.get("nccl_version"), f"{origin} stack.torch (torch.cuda.nccl.version())")
        elif cid == "node.driver_version":
            facts.add("cuda_driver_version", ev.get("cuda_driver_version"), f"{origin} node.driver_version")
            text = str(ev.get("proc_driver_version") or "")
            import re

            m = re.search(r"Kernel Module(?: for \w+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
            if m:
                facts.add("driver_version", m.group(1), f"{origin} node.driver_version (/proc/driver/nvidia/version)")
        elif cid == "stack.nccl_copies":
            mapped = {m.get("path") for m in ev.get("mapped") or []}
            for row in ev.get("reachable") or []:
                if row.get("version"):
                    facts.nccl_copies.append({"path": row.get("path"), "version": row["version"],
                                              "origins": row.get("origins") or [],
                                              "mapped": bool(row.get("mapped")) or row.get("path") in mapped,
                                              "origin": f"{origin} stack.nccl_copies"})
    return facts


def merge(first: NodeFacts, second: NodeFacts) -> NodeFacts:
    out = NodeFacts()
    for f in (first, second):
        for k, vs in f.values.items():
            for v, o in vs:
                out.add(k, v, o)
        for c in f.nccl_copies:
            if all(c["path"] != d["path"] for d in out.nccl_copies):
                out.nccl_copies.append(c)
    return out


def _log_values(scan: ScanResult, fact: str) -> List[str]:
    return [v.value for v in sorted(scan.facts.get(fact, {}).values(), key=lambda v: -v.count)]


def _release(v: str) -> Tuple[int, ...]:
    out = []
    for part in v.split("+")[0].split("."):
        if not part.isdigit():
            break
        out.append(int(part))
    return tuple(out)


def cross_check(scan: ScanResult, node: NodeFacts) -> Tuple[List[Dict[str, Any]], List[Adjustment]]:
    """Every fact the log states against the node's; each row says what follows. A version mismatch in NCCL
    or the CUDA driver raises the cause it names by MISMATCH_RAISE (origin "node")."""
    rows: List[Dict[str, Any]] = []
    adj: List[Adjustment] = []
    if not node:
        return rows, adj

    logged = _log_values(scan, "nccl_version")
    torch_nccl = node.first("torch_nccl")
    if logged and (torch_nccl or node.nccl_copies):
        for v in logged:
            says, cause = _nccl_sentence(v, torch_nccl, node.nccl_copies)
            rows.append({"fact": "nccl_version", "log": v, "node": torch_nccl, "verdict": "match" if cause is None else "differs",
                         "says": says})
            if cause:
                adj.append(Adjustment(cause, delta=MISMATCH_RAISE, reason=says, origin="node"))
    logged_drv = [v for v in _log_values(scan, "cuda_driver_version") if v.isdigit()]
    node_drv = node.first("cuda_driver_version")
    if logged_drv and node_drv and node_drv.isdigit():
        for v in logged_drv:
            if int(v) == int(node_drv):
                says = (f"the run's libcuda reports CUDA {cuda_code_text(int(v))}, the node's driver CUDA "
                        f"{cuda_code_text(int(node_drv))}: the same driver")
                rows.append({"fact": "cuda_driver_version", "log": v, "node": node_drv, "verdict": "match", "says": says})
                continue
            newer = int(v) > int(node_drv)
            says = (f"the run's libcuda reports CUDA {cuda_code_text(int(v))}; the node's driver supports CUDA {cuda_code_text(int(node_drv))}: the run "
                    + ("loaded a forward-compatible libcuda (cuda-compat), not the node's driver" if newer
                       else "loaded another, older libcuda than the node's driver"))
            rows.append({"fact": "cuda_driver_version", "log": v, "node": node_drv, "verdict": "differs", "says": says})
            adj.append(Adjustment("C1", delta=MISMATCH_RAISE, reason=says, origin="node"))
            if newer:
                adj.append(Adjustment("C8", delta=MISMATCH_RAISE / 2, reason=says, origin="node"))
    for fact, label in (("driver_version", "driver"), ("gpu_model", "GPU"), ("torch_version", "torch")):
        lv, nv = _log_values(scan, fact), [v for v, _ in node.values.get(fact, [])]
        if not lv or not nv:
            continue
        for v in lv[:2]:
            same = any(v == n or v.startswith(n) or n.startswith(v) for n in nv)
            rows.append({"fact": fact, "log": v, "node": ", ".join(nv), "verdict": "match" if same else "differs",
                         "says": (f"the log names {label} {v}, as the node" if same else
                                  f"the log names {label} {v}; the node has {', '.join(nv)}: the log comes from another "
                                  f"machine or env, or the text quotes something else")})
    return rows, adj


def _nccl_sentence(logged: str, torch_nccl: Optional[str], copies: List[Dict[str, Any]]) -> Tuple[str, Optional[str]]:
    """What a printed NCCL version says against torch's NCCL and the copies on disk: (sentence, cause or None)."""
    lv = _release(logged)
    head = f"the run printed NCCL {logged}"
    if torch_nccl and _release(torch_nccl) == lv:
        return f"{head}; this env's torch carries {torch_nccl}: the run used torch's NCCL", None
    others = [c for c in copies if _release(str(c["version"])) == lv and not (torch_nccl and _release(str(c["version"])) == _release(torch_nccl))]
    parts = [head]
    if torch_nccl:
        parts.append(f"this env's torch carries {torch_nccl}")
    if others:
        c = others[0]
        where = "the system copy on the loader path" if set(c["origins"]) & {"ldconfig", "LD_LIBRARY_PATH"} else "another copy"
        parts.append(f"{where} ({c['path']}) is {c['version']}")
        return "; ".join(parts) + ": the run loaded that copy, not torch's", "C3"
    return "; ".join(parts) + ": no copy of that version is on this node; the run used another NCCL than this env's (another env or image)", "C2"
