"""The last gate of `envbuild create` before the swap: the doctor's stack checks on the staged env.

Why here and not after: a stack that contradicts its profile (two NCCLs, a CPU torch, a missing pin) must
never replace a working env. The checks run with the staged prefix's python, static mode (no GPU work),
against the profile. Only `fail` results close the gate; warn/skip/error are reported and let it pass,
because a check that cannot run on this node (no GPU, no torch yet) is no verdict on the env.

The stack probe runs resolve-only (DoctorOptions.resolve_only, `stack_probe.py --resolve-only`,
checks/_loader_trace.py): the staged python's own dynamic loader, in trace mode, names the libnccl, libcudart,
libcudnn and libcuda copies torch's libraries would bind (torch's `_load_global_deps` opens preloaded first, as the
import does), and nothing of torch is loaded or initialised. Loading them was the peak of create's process tree
(the probe 409 MB resident, 0.45 s, on the slime torch 2.11 cu130 env); the trace is 26 MB and 0.24 s, and
`envbuild doctor --check stack` in one process with it 98 MB instead of 452 MB. The checks' statuses on that env
are the same either way; where the trace cannot stand in (a library not found, an unusual `_load_global_deps`),
the probe loads the libraries as `envbuild doctor` does. What only loading gives is lost on a GPU node: there the
full probe also initialises CUDA and a 1-rank NCCL group (stack.torch fails on a refusal, NCCL's banner names the
NCCL that ran); the gate leaves such node faults to `envbuild doctor` and still judges the libcuda the CUDA runtime
would open (stub, forward-compat, its driver's CUDA version, read in a child process).

A passing verdict is kept (envbuild.install.rerun_cache) under the hash of every input it depends on
(`gate_inputs`), and a create with the same inputs reuses it instead of running the stack probe again: on a
rerun it would trace the same bytes through the same loader on the same node and be judged by the same checks
against the same profile. What the gate proves is unchanged: a staged env whose
inputs differ in anything the verdict depends on is probed afresh, a failing verdict is never kept, and
`envbuild doctor` on the built env always runs the probe (it judges the node the training runs on).
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from envbuild.errors import EnvbuildError

if TYPE_CHECKING:
    from envbuild.profile import Profile

CACHE_KIND = "doctor-gate"
# Environment variables that can change what the probe's loader maps or what the stack checks read
# (a superset of what checks/stack_probe.py records: a variable too many only costs a cache miss).
_ENV_PREFIXES = ("LD_", "CUDA", "NCCL_", "PYTORCH_", "TORCH", "TMS_", "SGLANG_", "NVTE_", "RAY_", "VLLM_",
                 "CUBLAS_", "NVSHMEM_", "NVIDIA_", "CONDA", "PYTHON", "VIRTUAL_ENV", "PATH")


class DoctorGateFailed(EnvbuildError):
    """The staged env failed a stack check: exit 1 (a verdict, not bad input); the target is untouched."""

    exit_code = 1


@dataclass
class GateResult:
    results: list
    failed: list
    cached: bool = False  # the verdict of an earlier create with the same inputs (gate_inputs)

    @property
    def ok(self) -> bool:
        return not self.failed


def gate_inputs(prefix: Path, target: Path, profile: "Profile", lock_key: str, layers: Dict[str, Any],
                interpreter: Optional[Path]) -> Dict[str, Any]:
    """Everything the gate's verdict depends on, for the rerun cache's key:

    what is installed (`lock_key`: the locks, git commits and patches, builds, activation, --without; and
    `layers`: what the pip, git and build phases installed, with the wheels' sha256), the interpreter a venv
    env links to, the paths the checks see (staging prefix and target), the profile judged against (its
    bytes), the checks themselves (the payload programs, envbuild's stack checks and facts, envbuild's
    version), and what the loader sees on this node (its cache and preload file, the driver's version file,
    the environment variables above, the host)."""
    from envbuild import __version__
    from envbuild.install.rerun_cache import file_identity, tree_digest
    from envbuild.paths import payload_dir

    pkg = Path(__file__).resolve().parent.parent
    try:
        driver = Path("/proc/driver/nvidia/version").read_text(encoding="utf-8", errors="replace")
    except OSError:
        driver = None
    return {
        "lock_key": lock_key,
        "layers": layers,
        "interpreter": file_identity(interpreter) if interpreter else None,
        "prefix": str(prefix),
        "target": str(target),
        "profile": hashlib.sha256(Path(profile.path).read_bytes()).hexdigest(),
        "checks": [__version__, tree_digest(payload_dir(), pkg / "doctor" / "checks", pkg / "facts")],
        "loader": [file_identity("/etc/ld.so.cache"), file_identity("/etc/ld.so.preload"), driver],
        "env": sorted((k, v) for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES)),
        "host": list(os.uname()),
    }


def run_stack_checks(prefix: Path, profile: Profile, inputs: Optional[Dict[str, Any]] = None) -> GateResult:
    """The doctor's static stack checks against `prefix`'s python, run as one doctor session (the same
    selection, runner and report `envbuild doctor --check stack --prefix P --profile F` gives), so the
    runner's skip/error handling applies and only a real FAIL lands in `failed`.

    `inputs` (gate_inputs): a passing verdict is kept under their hash, and a verdict kept for the same
    inputs is returned (cached=True) without running the checks."""
    import json

    from envbuild.install import rerun_cache

    key = rerun_cache.key_of(CACHE_KIND, inputs) if inputs is not None else None
    kept = rerun_cache.get(CACHE_KIND, key) if key else None
    if kept is not None:
        try:
            results = _results(json.loads(kept))
            return GateResult(results=results, failed=_failed(results), cached=True)
        except (ValueError, KeyError, TypeError):
            pass  # an unreadable entry: judge afresh
    text = _run_doctor(prefix, profile)
    results = _results(json.loads(text))
    gate = GateResult(results=results, failed=_failed(results))
    if key and gate.ok:
        rerun_cache.put(CACHE_KIND, key, text)
    return gate


def _run_doctor(prefix: Path, profile: "Profile") -> str:
    """The JSON report text of `envbuild doctor --check stack --mode static` on the staged prefix."""
    import contextlib
    import io
    import tempfile

    from envbuild.doctor.session import DoctorOptions, run_doctor

    with tempfile.TemporaryDirectory(prefix="envbuild-gate-") as tmp:
        out = Path(tmp) / "report.json"
        opts = DoctorOptions(profile=str(profile.path), prefix=str(prefix), mode="static", checks=["stack"],
                             quiet=True, json_path=str(out), resolve_only=True)
        # the probe runs in the staged python and must leave no bytecode there: the staged tree is the same
        # whether or not the verdict was kept (envbuild.install.tree_cache keeps what relocation found in it)
        saved = os.environ.get("PYTHONDONTWRITEBYTECODE")
        os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # create keeps stdout clean; the UI prints the verdict
                run_doctor(opts)
        finally:
            if saved is None:
                os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
            else:
                os.environ["PYTHONDONTWRITEBYTECODE"] = saved
        return out.read_text(encoding="utf-8")


def _results(report: Dict[str, Any]) -> list:
    from envbuild.report.json_report import report_from_dict

    return report_from_dict(report).results


def _failed(results: list) -> List:
    from envbuild.report.model import Status

    return [r for r in results if r.status == Status.FAIL]
