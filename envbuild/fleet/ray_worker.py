"""What runs inside a Ray worker on each node: the doctor, the audit and one rank of the cross-node collective.

The class is plain Python; ray_sweep.py turns it into an actor (`ray.remote(NodeAgent)`) with
max_concurrency=2, so that `phase()` answers while a long call runs: the driver polls it and, if the node
dies or hangs, reports what it was doing.
"""
from __future__ import annotations

import os
import socket
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional


def _children(pid: int) -> List[str]:
    """Command lines of this process's children (the doctor's probe processes), read from /proc."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != pid:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            out.append(f"pid {entry}: {cmd[:200]}")
        except (OSError, ValueError, IndexError):
            continue
    return sorted(out)


class NodeAgent:
    """One per node (or per GPU for the collective's ranks), placed in that node's placement-group bundle."""

    def __init__(self) -> None:
        self._phase = "started"
        self._since = time.monotonic()
        self._lock = threading.Lock()

    def _set(self, text: str) -> None:
        with self._lock:
            self._phase, self._since = text, time.monotonic()

    def phase(self) -> Dict[str, Any]:
        """What this worker is doing now, for how long, and which probe processes it has running."""
        with self._lock:
            text, since = self._phase, self._since
        return {"phase": text, "for_s": round(time.monotonic() - since, 1), "children": _children(os.getpid())}

    def identity(self) -> Dict[str, Any]:
        import ray

        from envbuild import __version__

        ctx = ray.get_runtime_context()
        return {"hostname": socket.gethostname(), "node_id": ctx.get_node_id(), "ip": ray.util.get_node_ip_address(),
                "pid": os.getpid(), "python": sys.executable, "envbuild_version": __version__,
                "gpu_ids": [int(g) for g in ray.get_gpu_ids() if str(g).isdigit()],
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}

    def doctor(self, options: Dict[str, Any]) -> Dict[str, Any]:
        """`envbuild doctor` in this worker's own process and environment; the node's report as a dict."""
        import json

        import ray

        from envbuild.doctor.session import DoctorOptions, run_doctor

        self._set(f"doctor ({options.get('mode', 'static')} checks)")
        job_env = (ray.get_runtime_context().runtime_env or {}).get("env_vars") or {}
        with tempfile.TemporaryDirectory(prefix="envbuild-ray-") as tmp:
            path = os.path.join(tmp, "report.json")
            opts = DoctorOptions(json_path=path, quiet=True, python=sys.executable,
                                 env_origins={k: "the job's runtime_env" for k in job_env}, **options)
            run_doctor(opts)
            with open(path) as f:
                data = json.load(f)
        self._set("doctor done")
        return data

    def audit(self, group: Optional[str] = None) -> Dict[str, Any]:
        from envbuild.fleet.audit import audit_process

        self._set("audit of the worker process")
        return audit_process(group=group)

    def free_port(self) -> int:
        from envbuild.fleet.collective import free_port

        return free_port()

    def collective(self, **kwargs: Any) -> Dict[str, Any]:
        from envbuild.fleet.collective import run_rank

        self._set("cross-node collective: importing torch")
        if kwargs.get("backend") == "nccl" and os.environ.get("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"):
            import ray  # slime's setting: Ray leaves CUDA_VISIBLE_DEVICES alone, so use the physical index

            ids = ray.get_gpu_ids()
            kwargs["gpu"] = int(ids[0]) if ids else None
        try:
            out = run_rank(on_phase=self._set, **kwargs)
        finally:
            self._set("collective done")
        return out
