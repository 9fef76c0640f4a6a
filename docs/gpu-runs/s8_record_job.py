"""One Ray job on one GPU shaped like slime's colocated run, recorded by `envbuild record`, with one fault injected
(s8-record.sh runs it once per fault). Run by the driver: python3 s8_record_job.py ADDRESS FAULT RUN_DIR RESULT.

Shape: a Trainer and a Rollout actor share the GPU (num_gpus=0.5 each, as slime colocates its Megatron actors and
sglang engine). Every step: the trainer builds its NCCL group (one rank), does a step (a bf16 GEMM and an
all_reduce of the "gradient" on that group) and destroys the group; it hands its weights to the rollout through
CUDA IPC (torch's reduce_tensor handle passed through Ray, as slime's update_weights_from_tensor); the rollout
rebuilds the tensor, checks it, and pauses and resumes its own weights with torch_memory_saver when that is
installed; both meet in a two-rank gloo group (rebuilt every step) that stands for the weight-sync handshake
(NCCL allows no two ranks on one GPU).

Faults: none; preload (the rollout runs with the system libnccl in LD_PRELOAD); expandable (the trainer, whose
tensors the rollout maps, runs with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True); sigstop (the rollout is
SIGSTOPped while it waits inside the gloo all_reduce of step 1; the trainer then waits on it until gloo's
timeout); ncclhang (the trainer's NCCL all_reduce of step 1 is queued behind a 60 s GPU kernel: NCCL's watchdog
times out after 10 s, PyTorch's flight recorder dumps, the process is aborted).
"""
from __future__ import annotations

import datetime
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict

STEPS = 3
GLOO_TIMEOUT_S = 15
NCCL_TIMEOUT_S = 10
SYSTEM_NCCL = "/lib/x86_64-linux-gnu/libnccl.so.2"


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def actors():
    import ray

    @ray.remote(num_gpus=0.5, num_cpus=1)
    class Trainer:
        def __init__(self) -> None:
            import torch

            torch.cuda.set_device(0)
            torch.manual_seed(0)
            self.w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
            self.shared = None

        def pid(self) -> int:
            return os.getpid()

        def train_step(self, port: int, hang_s: float = 0.0) -> float:
            import torch
            import torch.distributed as dist

            dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1,
                                    timeout=datetime.timedelta(seconds=NCCL_TIMEOUT_S),
                                    device_id=torch.device("cuda:0"))
            try:
                x = torch.randn(2048, 4096, device="cuda", dtype=torch.bfloat16)
                loss = float((x @ self.w).float().pow(2).mean())
                grad = torch.randn_like(self.w) * 1e-3
                if hang_s:
                    torch.cuda._sleep(int(hang_s * 2e9))  # the collective below waits behind this kernel
                dist.all_reduce(grad)
                torch.cuda.synchronize()
                self.w -= grad
                return loss
            finally:
                dist.destroy_process_group()

        def handoff(self):
            """The weights as a CUDA IPC handle (torch.multiprocessing's reduce_tensor) and their checksum."""
            import torch
            from torch.multiprocessing.reductions import reduce_tensor

            self.shared = self.w.clone()  # kept alive here while the rollout maps it
            torch.cuda.synchronize()
            return reduce_tensor(self.shared), float(self.shared.float().sum())

        def sync(self, port: int, delay: float = 0.0) -> float:
            return _gloo_sync(port, 0, delay)

        def dump_flight_recorder(self, path: str) -> int:
            """The flight recorder's buffer now (pickled), for the replayed fixtures; bytes written."""
            import torch

            c10d = torch._C._distributed_c10d  # the name changed across releases
            data = (getattr(c10d, "_dump_nccl_trace", None) or getattr(c10d, "_dump_fr_trace"))()
            Path(path).write_bytes(data)
            return len(data)

    @ray.remote(num_gpus=0.5, num_cpus=1)
    class Rollout:
        def __init__(self) -> None:
            import importlib.util

            import torch

            torch.cuda.set_device(0)
            self.tms = None
            self.tms_note = "torch_memory_saver not installed"
            if importlib.util.find_spec("torch_memory_saver"):
                try:
                    from torch_memory_saver import torch_memory_saver as tms

                    tms.hook_mode = "torch"
                    with tms.region(tag="weights", enable_cpu_backup=True):
                        self.w = torch.empty(4096, 4096, device="cuda", dtype=torch.bfloat16)
                    self.tms, self.tms_note = tms, "torch_memory_saver (torch hook mode)"
                except Exception as exc:  # noqa: BLE001 - recorded in the result, the job goes on
                    self.tms_note = f"torch_memory_saver failed: {type(exc).__name__}: {str(exc)[:200]}"
            if self.tms is None:
                self.w = torch.empty(4096, 4096, device="cuda", dtype=torch.bfloat16)

        def pid(self) -> int:
            return os.getpid()

        def receive(self, handle, checksum: float) -> Dict[str, Any]:
            import torch

            fn, args = handle
            t0 = time.perf_counter()
            got = fn(*args)
            self.w.copy_(got)
            torch.cuda.synchronize()
            ok = abs(float(self.w.float().sum()) - checksum) <= 1e-3 * abs(checksum) + 1.0
            del got
            return {"ok": ok, "s": time.perf_counter() - t0}

        def offload(self) -> Dict[str, Any]:
            if self.tms is None:
                return {"tms": self.tms_note}
            import torch

            before = float(self.w.float().sum())
            t0 = time.perf_counter()
            self.tms.pause("weights")
            t1 = time.perf_counter()
            self.tms.resume("weights")
            torch.cuda.synchronize()
            return {"tms": self.tms_note, "pause_s": t1 - t0, "resume_s": time.perf_counter() - t1,
                    "kept": float(self.w.float().sum()) == before}

        def sync(self, port: int, delay: float = 0.0) -> float:
            return _gloo_sync(port, 1, delay)

    return Trainer, Rollout


def _gloo_sync(port: int, rank: int, delay: float) -> float:
    """The two-rank gloo group of a step: built, one all_reduce, destroyed."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=GLOO_TIMEOUT_S))
    try:
        if delay:
            time.sleep(delay)
        t = torch.ones(1024) * (rank + 1)
        dist.all_reduce(t)
        return float(t[0])
    finally:
        dist.destroy_process_group()


def drive(address: str, fault: str, run_dir: str, out_dir: str) -> Dict[str, Any]:
    import ray

    made = subprocess.run([sys.executable, "-m", "envbuild", "record", "env", "--dir", run_dir, "--json",
                           "--hang-s", "5", "--heartbeat-s", "1"], capture_output=True, text=True)
    if made.returncode != 0:  # its one line says why (session 10: detect-secrets was not on the node)
        raise SystemExit(f"envbuild record env exited {made.returncode}: {made.stderr.strip()[-500:]}")
    renv = json.loads(made.stdout)
    ray.init(address=address, runtime_env=renv, log_to_driver=False, logging_level="ERROR")
    Trainer, Rollout = actors()
    base = {"NCCL_NVLS_ENABLE": "0", "NCCL_CUMEM_ENABLE": "0"}
    t_env = dict(base, **({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"} if fault == "expandable" else {}))
    r_env = dict(base, **({"LD_PRELOAD": SYSTEM_NCCL} if fault == "preload" else {}))
    trainer = Trainer.options(runtime_env={"env_vars": t_env}).remote()
    rollout = Rollout.options(runtime_env={"env_vars": r_env}).remote()
    res: Dict[str, Any] = {"fault": fault, "steps": [], "errors": {}}
    res["pids"] = {"trainer": ray.get(trainer.pid.remote(), timeout=120),
                   "rollout": ray.get(rollout.pid.remote(), timeout=120), "driver": os.getpid()}
    for step in range(STEPS):
        row: Dict[str, Any] = {"step": step}
        try:
            hang = 60.0 if fault == "ncclhang" and step == 1 else 0.0
            row["loss"] = ray.get(trainer.train_step.remote(free_port(), hang), timeout=NCCL_TIMEOUT_S * 6)
        except Exception as exc:  # noqa: BLE001 - the fault's effect, kept in the result
            res["errors"][f"train{step}"] = f"{type(exc).__name__}: {str(exc)[:400]}"
            break
        if fault == "none" and step == STEPS - 1:  # a healthy buffer for the replayed fixtures
            try:
                res["fr_manual_bytes"] = ray.get(trainer.dump_flight_recorder.remote(
                    os.path.join(out_dir, "fr-manual-trainer.pkl")), timeout=60)
            except Exception as exc:  # noqa: BLE001
                res["fr_manual_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        try:
            handle, checksum = ray.get(trainer.handoff.remote(), timeout=60)
            row["ipc"] = ray.get(rollout.receive.remote(handle, checksum), timeout=60)
            row["offload"] = ray.get(rollout.offload.remote(), timeout=60)
        except Exception as exc:  # noqa: BLE001
            res["errors"][f"handoff{step}"] = f"{type(exc).__name__}: {str(exc)[:400]}"
        port = free_port()
        stop_now = fault == "sigstop" and step == 1
        refs = [trainer.sync.remote(port, 3.0 if stop_now else 0.0), rollout.sync.remote(port)]
        if stop_now:
            time.sleep(1.5)  # the rollout waits inside all_reduce for the trainer, which comes at 3 s
            os.kill(res["pids"]["rollout"], signal.SIGSTOP)
            res["sigstop_at"] = time.time()
        try:
            row["sync"] = ray.get(refs[0], timeout=GLOO_TIMEOUT_S * 3)
            if not stop_now:
                ray.get(refs[1], timeout=GLOO_TIMEOUT_S * 3)
        except Exception as exc:  # noqa: BLE001
            res["errors"][f"sync{step}"] = f"{type(exc).__name__}: {str(exc)[:400]}"
        res["steps"].append(row)
        if stop_now:
            time.sleep(2.0)
            os.kill(res["pids"]["rollout"], signal.SIGKILL)  # a stopped rank is never resumed
            break
    ray.shutdown()
    return res


if __name__ == "__main__":
    address, fault, run_dir, out_dir = sys.argv[1:5]
    t0 = time.time()
    result = drive(address, fault, run_dir, out_dir)
    result["wall_s"] = round(time.time() - t0, 1)
    Path(out_dir, "result.json").write_text(json.dumps(result, indent=1, default=str))
    print(json.dumps({k: result[k] for k in ("fault", "errors", "wall_s")}, default=str))
