"""What is known beside the log: a doctor report (--report), a capture bundle (--root) and the image's
profile (--profile), turned into score adjustments with their reasons.

A failed doctor check raises the causes it names (a failed stack.nccl_copies raises C3); a passed check
lowers the causes it can confirm (a passing node.fabric_manager lowers N2), because it looked and found them
absent. The profile's versions are compared with the versions the log shows the process ran (NCCL's own
banner, not what pip says).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from envbuild.errors import EnvbuildError, InputFileError, parse_input_json, read_input_text
from envbuild.explain.rank import RULED_OUT_FACTOR, Adjustment
from envbuild.explain.scan import ScanResult
from envbuild.explain.versions import (cuda_code_text, cuda_code_mm, driver_ahead, driver_behind, framework_torch_clash,
                                       toolkit_clash)

FAILED_RAISE = 3.5  # a failed check found the cause on the node: as strong as a signature that names it
WARNED_RAISE = 1.0
PASSED_FACTOR = 0.4
KERNEL_LOG_COMMANDS = ("journalctl-kernel", "dmesg")


def check_causes() -> Dict[str, Tuple[str, ...]]:
    """check id -> the causes it can confirm, from the doctor's registry (empty if it cannot be read)."""
    try:
        from envbuild.doctor.registry import all_checks

        return {c.id: tuple(c.causes) for c in all_checks()}
    except Exception:  # noqa: BLE001 - explain must work even when the doctor's package is mid-change
        return {}


def read_report(path: Path) -> Dict[str, Any]:
    """A doctor JSON report, checked only as far as explain reads it (results with check_id and status)."""
    data = parse_input_json(path, read_input_text(path, "the doctor report"), "the doctor report")
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list) or not all(isinstance(r, dict) and "check_id" in r and "status" in r for r in results):
        raise InputFileError(path, "not an envbuild doctor report (no results with check_id and status)")
    return data


def report_adjustments(report: Dict[str, Any], origin: str) -> List[Adjustment]:
    registry = check_causes()
    out: List[Adjustment] = []
    for r in report["results"]:
        cid, status = r["check_id"], r["status"]
        subject = f" [{r['subject']}]" if r.get("subject") else ""
        summary = str(r.get("summary", ""))[:160]
        if status in ("fail", "warn"):
            for cause in r.get("causes") or registry.get(cid, ()):
                out.append(Adjustment(cause, delta=FAILED_RAISE if status == "fail" else WARNED_RAISE,
                                      reason=f"{cid}{subject} {status}: {summary}", origin=origin))
        elif status == "pass":
            for cause in registry.get(cid, ()):
                out.append(Adjustment(cause, factor=PASSED_FACTOR, reason=f"{cid}{subject} passed", origin=origin))
    return out


def doctor_failed(report: Optional[Dict[str, Any]]) -> bool:
    return bool(report) and any(r["status"] == "fail" for r in report["results"])  # type: ignore[index]


def bundle_inputs(root: str) -> Tuple[Optional[Dict[str, Any]], List[Tuple[str, str]]]:
    """The doctor report a bundle holds (if any) and its kernel logs as (name, text) to scan like a log."""
    from envbuild.facts.source import BundleSource, FactUnavailable

    src = BundleSource(Path(root))
    report = None
    rpath = Path(root) / ".envbuild" / "report.json"
    if rpath.is_file():
        report = read_report(rpath)
    logs: List[Tuple[str, str]] = []
    for name in KERNEL_LOG_COMMANDS:
        try:
            res = src.command(name)
        except FactUnavailable:
            continue
        if res.stdout:
            logs.append((f"{root}:{name}", res.stdout))
    return report, logs


def log_adjustments(scan: ScanResult) -> List[Adjustment]:
    """What the facts of the log itself say beyond single lines: processes of one run printing different NCCL
    versions run different libnccl copies (C3) — give explain the logs of one run, or this misleads; packages
    built for two CUDA majors in one env (C6; one major alone, however many packages print it, is no mix)."""
    versions = _versions(scan, "nccl_version")
    out: List[Adjustment] = []
    if len(versions) > 1:
        out.append(Adjustment("C3", delta=1.5, reason=f"processes print different NCCL versions ({', '.join(versions)})",
                              origin="log"))
    wheels = _versions(scan, "nccl_wheel_version")
    ran = [v for v in versions if all(_ver_tuple(v) != _ver_tuple(w) for w in wheels)]
    if wheels and ran:
        out.append(Adjustment("C3", delta=3.5, reason=f"the run printed NCCL {', '.join(ran)}; the env's NCCL wheel is "
                              f"{', '.join(wheels)}: the process loaded another libnccl than the wheel", origin="log"))
    majors = _versions(scan, "cuda_package_major")
    if len(majors) > 1:
        out.append(Adjustment("C6", delta=3.0, reason=f"packages built for CUDA {' and '.join(majors)} in one environment "
                              "(their libraries overwrite or shadow each other)", origin="log"))

    # Versions the reporter states that cannot go together (a hint: a listing alone is not a failure).
    clash = framework_torch_clash(scan)
    if clash:
        out.append(Adjustment("U5", delta=2.5, reason=clash, origin="log-hint"))
    clash = toolkit_clash(scan)
    if clash:
        out.append(Adjustment("C9", delta=1.5, reason=clash, origin="log-hint"))

    inside = _raised_inside_packages(scan)
    if inside:
        out.append(Adjustment("U5", delta=2.5, reason=inside, origin="log-hint"))
    held = memory_held_elsewhere(scan)
    if held:
        # one holder outside the run: D7 over U3; the run's own engine or several holders: the two stay close
        one_holder, reason = held
        out.append(Adjustment("D7", delta=3.0 if one_holder else 1.5, reason=reason, origin="log-hint"))
        out.append(Adjustment("U3", factor=0.5 if one_holder else 0.75, reason=reason, origin="log-hint"))

    behind = driver_behind(scan)
    if behind:
        # A newer CUDA major than the driver runs is a contradiction in the log itself ("log"); a newer minor is what
        # minor-version compatibility covers every day, so it only weighs in when something failed ("log-hint").
        major = behind[0] == "major"
        out.append(Adjustment("D9", delta=3.0 if major else 1.0, reason=behind[1], origin="log" if major else "log-hint"))
    ahead = driver_ahead(scan)
    if ahead and not _names_itself(scan, "D9"):
        # the log's own versions clear D9: its score, the learned ranker's share included, is cut. Not where an
        # error points at D9 itself (222 "PTX ... unsupported toolchain", 35 "insufficient for CUDA runtime"): the
        # code that failed was built by something the log's version lines do not show (a Triton ptxas, an extension).
        out.append(Adjustment("D9", factor=RULED_OUT_FACTOR, reason=ahead, origin="log-hint"))
    return out


def _raised_inside_packages(scan: ScanResult) -> Optional[str]:
    """An API exception (a wrong number of arguments, a missing attribute or name, no dispatch for a type) whose
    traceback frames are all inside installed packages, none in the user's own code: one package called another
    that is not the version it was written for (U5), not a bug in code the user wrote (issue 25, round eighteen:
    unsloth #2148, #741; in the corpus of round eighteen it reads 7 logs: U5 6 times, C7 once (numba #8985,
    still C7 first), U2 never, while logs whose last frame is user code are not U2-specific either). A hint: it
    weighs 2.5, above the 2.0 the exception line gives U2, so U5 leads only where no frame is the user's."""
    package = _versions(scan, "frame_in_package")
    first = _first_value(scan, "exception_type")
    if not package or first is None or scan.facts.get("frame_in_user_code") or not scan.facts.get("api_mismatch"):
        return None  # a data or configuration error raised inside a framework's CLI is no API mismatch
    if first.rsplit(".", 1)[-1] not in _API_EXCEPTIONS:  # what failed first is another kind (a CUDA check, an OOM)
        return None
    return (f"{first} raised with every traceback frame inside installed packages "
            f"({_package_of(package[0])}{' ...' if len(package) > 1 else ''}), none in the user's code: "
            "one package calls another of another version")


_API_EXCEPTIONS = ("TypeError", "AttributeError", "NameError")


def _first_value(scan: ScanResult, fact: str) -> Optional[str]:
    """The value of `fact` the log shows first (by source, then line)."""
    values = scan.facts.get(fact, {})
    order = {s: i for i, s in enumerate(scan.sources)}
    firsts = sorted(values.values(), key=lambda v: (order.get(v.first.source, len(order)), v.first.line))
    return firsts[0].value if firsts else None


def _package_of(path: str) -> str:
    """The package a frame's file belongs to: the folder after site-packages / dist-packages, else after the Python
    library's lib/pythonX.Y (a standard module), else the file."""
    m = re.search(r"(?:site|dist)-packages[/\\]([^/\\]+)", path) or re.search(r"python\d\.\d+[/\\]([^/\\]+)", path)
    return m.group(1) if m else re.split(r"[/\\]", path)[-1]


def memory_held_elsewhere(scan: ScanResult) -> Optional[Tuple[bool, str]]:
    """(one holder, why) where other processes held most of the GPU when this one ran out of memory, else None.

    torch's out-of-memory message gives the GPU's capacity, what was free and what the failing process held: the
    rest was other processes'. When one other process holds several times what the failing one holds, and the log
    names no inference engine of its own, the memory was taken before this run asked for it, by a process left from
    an earlier run (D7) or another job on the same GPU, whose fix is the same (free the GPU, not a smaller batch), and
    not used up by this run (U3): one holder. Where the run has an engine of its own (vLLM, SGLang, or their memory
    settings gpu_memory_utilization / mem_fraction_static), or several processes hold memory, the holder may be the
    run's colocated engine or ranks (U3) as much as a left-over process: both stay open, U3 still first where the
    log holds nothing else. vLLM's own memory profile says as much when its device-wide non-torch memory is more
    than a CUDA context and NCCL's buffers: a colocated trainer or a left-over process holds it."""
    engine = bool({"vllm", "sglang"} & set(scan.facts.get("framework", {})) or scan.facts.get("vllm_version")
                  or scan.facts.get("engine_memory_setting"))
    splits = [_split(v) for v in scan.facts.get("oom_gpu_split", {})]
    held = [_held_pair(v) + (1,) for v in scan.facts.get("oom_memory_held", {})]
    other, own, holders = max(splits or held or [(0.0, 0.0, 0)])
    if other >= HELD_ELSEWHERE_GIB and other >= 4 * own:
        one_holder = not engine and holders <= 1 and len(scan.facts.get("oom_other_process", {})) <= 1
        if one_holder:
            return True, (f"another process held {other:.2f} GiB of the GPU when this one, holding {own:.2f} GiB, ran "
                          "out of memory: free it (nvidia-smi --query-compute-apps=pid,used_memory) before looking at "
                          "this run's batch size")
        return False, (f"other processes held {other:.2f} GiB of the GPU when this one, holding {own:.2f} GiB, ran out "
                       "of memory: the run's own engine or ranks on the same GPU, or a process left from an earlier "
                       "run (nvidia-smi --query-compute-apps=pid,used_memory tells which)")
    profiled = [_gib(v) for v in scan.facts.get("engine_non_torch_memory", {})]
    totals = [_gib(v) for v in scan.facts.get("engine_total_memory", {})]
    if profiled and max(profiled) >= HELD_ELSEWHERE_GIB and (not totals or max(profiled) >= 0.25 * max(totals)):
        return False, (f"the engine's memory profile counts {max(profiled):.2f} GiB of GPU memory outside its own torch "
                       "allocations, more than a CUDA context and NCCL's buffers: memory another process holds (a "
                       "colocated trainer, or a process left from an earlier run)")
    return None


HELD_ELSEWHERE_GIB = 8.0  # another process's share that is more than a CUDA context or a small neighbour
_GIB = {"K": 1 / (1 << 20), "M": 1 / 1024, "G": 1.0}
_SIZE = re.compile(r"(\d+(?:\.\d+)?) ?([KMG]iB|bytes)")


def _gib(text: str) -> float:
    """GiB of one '<number> <unit>' amount (KiB, MiB, GiB, or bytes)."""
    m = _SIZE.search(text)
    if m is None:
        return 0.0
    unit = m.group(2)
    return float(m.group(1)) / (1 << 30) if unit == "bytes" else float(m.group(1)) * _GIB[unit[0]]


def _split(value: str) -> Tuple[float, float, int]:
    """(GiB other processes held, GiB the failing process held, how many other processes the message lists) from
    one message's oom_gpu_split value: the capacity, less what was free, less the failing process's own."""
    amounts = [_gib(m.group(0)) for m in _SIZE.finditer(value)]
    total, free, own = amounts[0], amounts[1], amounts[-1]
    return max(0.0, total - free - own), own, value.count("Process ")


def _held_pair(value: str) -> Tuple[float, float]:
    """(the other process's GiB, this process's GiB) from one message's oom_memory_held value."""
    amounts = [_gib(m.group(0)) for m in _SIZE.finditer(value)]
    return amounts[0], amounts[-1]


def _names_itself(scan: ScanResult, cause: str) -> bool:
    """Whether a failure line the log holds points at `cause` first among the causes it supports (error 35's "driver
    is insufficient for the runtime" does for D9, at 2.5 beside C6 and C1), not as one of many."""
    for h in scan.hits.values():
        weights = h.signature.supports
        if h.signature.kind == "failure" and weights.get(cause, 0.0) >= 2.5 and weights[cause] == max(weights.values()):
            return True
    return False


def contradicts_itself(adjustments: List[Adjustment]) -> bool:
    """Whether the log's own facts disagree (two NCCL versions, a banner that is not the installed wheel): a
    finding even when no line is an error."""
    return any(a.origin == "log" for a in adjustments)


def _versions(scan: ScanResult, fact: str) -> List[str]:
    return sorted(scan.facts.get(fact, {}))


def _ver_tuple(v: str) -> Tuple[int, ...]:
    out = []
    for part in v.split("+")[0].split("."):
        if not part.isdigit():
            break
        out.append(int(part))
    return tuple(out)


def profile_adjustments(profile_name: str, scan: ScanResult) -> Tuple[List[Adjustment], List[Dict[str, Any]]]:
    """Compare the versions the log shows with the image's profile: (adjustments, comparison rows)."""
    from envbuild.profile import load_profile

    try:
        profile = load_profile(profile_name)
    except EnvbuildError:
        raise
    rows: List[Dict[str, Any]] = []
    adj: List[Adjustment] = []
    comp = profile.components

    def row(name: str, image: Optional[str], seen: List[str]) -> Optional[str]:
        if not image or not seen:
            rows.append({"component": name, "image": image, "log": seen, "verdict": "not in log" if image else "not in profile"})
            return None
        same = all(_ver_tuple(s) == _ver_tuple(image) for s in seen)
        rows.append({"component": name, "image": image, "log": seen, "verdict": "match" if same else "differs"})
        return "match" if same else "differs"

    nccl = comp.get("nccl")
    verdict = row("nccl", nccl.version if nccl else None, _versions(scan, "nccl_version"))
    if verdict == "differs":
        adj.append(Adjustment("C2", delta=2.0, reason=f"the log runs NCCL {', '.join(_versions(scan, 'nccl_version'))}, "
                              f"the image {nccl.version} ({profile.name})", origin="profile"))  # type: ignore[union-attr]
    elif verdict == "match":
        adj.append(Adjustment("C2", factor=0.4, reason=f"the log's NCCL equals the image's {nccl.version}", origin="profile"))  # type: ignore[union-attr]
    torch = comp.get("torch")
    if row("torch", torch.version if torch else None, _versions(scan, "torch_version")) == "differs":
        adj.append(Adjustment("U5", delta=0.8, reason=f"the log's torch differs from the image's {torch.version}", origin="profile"))  # type: ignore[union-attr]
    image_cuda = _ver_tuple(profile.cuda)[:2]
    drivers = [int(v) for v in _versions(scan, "cuda_driver_version") if v.isdigit()]
    rows.append({"component": "libcuda (cudaDriverVersion)", "image": profile.cuda,
                 "log": [cuda_code_text(d) for d in drivers], "verdict": "not in log" if not drivers else
                 ("older than the image's CUDA" if any(cuda_code_mm(d) < image_cuda for d in drivers) else "match")})
    if any(cuda_code_mm(d) < image_cuda for d in drivers):
        adj.append(Adjustment("C1", delta=2.0, reason=f"the libcuda NCCL loaded is CUDA {cuda_code_text(min(drivers))}, below the image's CUDA "
                              f"{profile.cuda}: the image would run a forward-compat libcuda", origin="profile"))
        adj.append(Adjustment("D9", delta=1.0, reason="driver older than the wheels' CUDA runtime", origin="profile"))
    builds = _versions(scan, "nccl_build_cuda")
    if builds and any(_ver_tuple(b)[:1] != (profile.cuda_major,) for b in builds):
        adj.append(Adjustment("C6", delta=2.0, reason=f"an NCCL built for CUDA {', '.join(builds)} runs in a CUDA "
                              f"{profile.cuda_major} image's stack", origin="profile"))
    return adj, rows
