"""Weight-sync probe: slime's two ways of moving trained weights into the rollout engine, verified bit-exact.

1. NCCL broadcast (slime's update_weights_from_distributed): "train" ranks first build their training
   groups and run a collective on them; then a weight-update group of the train source plus every
   "rollout" rank is created, and buckets of bf16 tensors are broadcast from the train source. Receivers
   compare every element with the pattern. GB/s = bytes / time of the timed round.
2. CUDA IPC handoff (colocated update_weights_from_tensor): each rank hands a bucket of tensors to a
   second process on the same GPU, through sglang's MultiprocessingSerializer when sglang is installed,
   else torch.multiprocessing.reductions.reduce_tensor; the receiver copies them into its own buffers
   (as the engine's weight loader does) and compares. GB/s = bytes / (serialize -> verified).

Also written per rank, so the envbuild side can compare ranks even when NCCL fails or hangs (a first
result is emitted before NCCL starts and overwritten at the end): libnccl paths mapped by this process
and their ncclGetVersion (C3: two copies, or ranks on different builds), and the communicator-relevant
NCCL_* variables. NCCL's own INFO log (the transport of every connection; C5: "via P2P/CUMEM" on one
side, "P2P/IPC" on the other) goes to the NCCL_DEBUG_FILE the check sets per rank, and the check parses
it with envbuild/doctor/nccl_log.py, the one NCCL log parser.

Env from the check: ENVBUILD_WS_ROLES (e.g. "train,rollout"), per-rank overrides are the launcher's.
Args: --mode quick|full.
"""
from __future__ import annotations

import base64
import os
import pickle
import time
from typing import Any, Dict, List

from _harness import Probe, exact_fill, mismatches, parse_mode

SIZES = {"quick": {"bucket_bytes": 256 << 20, "buckets": 4, "ipc_tensors": 4, "ipc_tensor_bytes": 128 << 20},
         "full": {"bucket_bytes": 512 << 20, "buckets": 8, "ipc_tensors": 8, "ipc_tensor_bytes": 256 << 20}}
CHILD_TIMEOUT_S = 120.0


def _fill(torch, numel: int, salt: int, device):
    """bf16 integers 0..256 (exact in bf16), distinct per tensor: the harness's exact fill for one rank."""
    return exact_fill(numel, 0, 1, torch.bfloat16, device, salt)


def _serializer():
    """sglang's own serializer when sglang is importable (what its update_weights_from_tensor decodes)."""
    for mod in ("sglang.srt.utils", "sglang.srt.utils.common"):
        try:
            m = __import__(mod, fromlist=["MultiprocessingSerializer"])
            return "sglang", m.MultiprocessingSerializer
        except Exception:
            continue
    return "torch.reduce_tensor", None


def _serialize(kind: str, ser, named) -> bytes:
    if kind == "sglang":
        return ser.serialize(named)
    from torch.multiprocessing.reductions import reduce_tensor

    return pickle.dumps([(name, reduce_tensor(t)) for name, t in named])


def _deserialize(kind: str, ser, data: bytes):
    if kind == "sglang":
        return ser.deserialize(data)
    return [(name, fn(*args)) for name, (fn, args) in pickle.loads(data)]


def serve_engine(sock) -> None:
    """The stand-in rollout engine (forked by _ipc.Helper): receive a serialized bucket, load it into own
    buffers, compare."""
    from _ipc import recv_msg, send_msg

    import torch

    while True:
        msg, _ = recv_msg(sock)
        if msg["op"] == "exit":
            send_msg(sock, {"ok": True})
            return
        reply: Dict[str, Any] = {"ok": False}
        try:
            dev = torch.device("cuda", int(msg["device"]))
            torch.cuda.set_device(dev)
            named = _deserialize(msg["kind"], _serializer()[1], base64.b64decode(msg["payload"]))
            loaded = [(name, t.clone()) for name, t in named]  # the engine's weight copy
            torch.cuda.synchronize(dev)
            del named
            bad = 0
            for k, (_name, t) in enumerate(loaded):
                bad += mismatches(t, _fill(torch, t.numel(), 100 + k, dev))
            reply.update(ok=True, mismatched=bad, tensors=len(loaded))
            torch.cuda.ipc_collect()
        except Exception as exc:
            reply["error"] = f"{type(exc).__name__}: {exc}"[:400]
        send_msg(sock, reply)


def main(p: Probe) -> None:
    from _ipc import Helper
    from _rankfacts import self_facts

    mode = parse_mode().mode
    import torch

    # The engine process of the IPC handoff, forked now: after `import torch` (it inherits the loaded torch
    # instead of paying 3.5-5 s for its own on an H200 node) and before this rank's first CUDA call.
    engine = Helper(serve_engine, timeout_s=CHILD_TIMEOUT_S)
    size = SIZES[mode]
    roles = (os.environ.get("ENVBUILD_WS_ROLES") or ",".join(
        ["train"] + ["rollout"] * (p.world_size - 1))).split(",")
    role = roles[p.rank]
    with p.phase("facts"):
        p.evidence.update({"mode": mode, "role": role, "roles": roles, "facts_before": self_facts()})
        # A first record: if NCCL then errors or hangs, the envbuild side still sees this rank's env/libs.
        p.emit({"status": "error", "summary": "did not finish (first record: env and libraries only)",
                "preliminary": True})
    train_ranks = [r for r, x in enumerate(roles) if x == "train"]
    rollout_ranks = [r for r, x in enumerate(roles) if x == "rollout"]
    problems: List[str] = []
    with p.phase("init"):
        dist = p.init_dist()
        dev = p.device
        p.evidence["torch_nccl_version"] = ".".join(map(str, torch.cuda.nccl.version()))
    p.settle()  # the broadcast and the IPC handoff are timed (GB/s): not beside an earlier probe's exit
    with p.phase("training groups"):
        train_group = dist.new_group(ranks=train_ranks)
        if p.rank in train_ranks:
            t = torch.ones(1 << 16, device=dev)
            dist.all_reduce(t, group=train_group)
            if int(t[0].item()) != len(train_ranks):
                problems.append("training-group all_reduce wrong")
    if rollout_ranks and train_ranks:
        src = train_ranks[0]
        with p.phase("weight-sync group"):
            ws_group = dist.new_group(ranks=[src] + rollout_ranks)
        if p.rank == src or p.rank in rollout_ranks:
            numel = size["bucket_bytes"] // 2
            bucket = [(_fill(torch, numel, k, dev) if p.rank == src else torch.empty(numel, dtype=torch.bfloat16,
                                                                                   device=dev))
                      for k in range(size["buckets"])]
            with p.phase("broadcast warm-up"):
                dist.broadcast(bucket[0], src=src, group=ws_group)
                torch.cuda.synchronize(dev)
            with p.phase("broadcast"):
                if p.rank != src:
                    for t in bucket:
                        t.zero_()
                dist.barrier(group=ws_group, device_ids=[dev.index])
                torch.cuda.synchronize(dev)
                t0 = time.perf_counter()
                for t in bucket:
                    dist.broadcast(t, src=src, group=ws_group)
                torch.cuda.synchronize(dev)
                secs = time.perf_counter() - t0
            total = numel * 2 * len(bucket)
            gbps = round(total / secs / 1e9, 2)
            bad = 0
            if p.rank != src:
                bad = sum(mismatches(t, _fill(torch, numel, k, dev)) for k, t in enumerate(bucket))
            p.evidence["broadcast"] = {"bytes": total, "seconds": round(secs, 5), "gbps": gbps,
                                       "mismatched": bad, "src": src, "group": [src] + rollout_ranks}
            p.metric("broadcast_gbps", gbps, "GB/s")
            if bad:
                problems.append(f"broadcast delivered {bad} wrong elements")
            del bucket
    else:
        p.evidence["broadcast"] = {"skipped": "needs a train and a rollout rank on different GPUs (NCCL allows one "
                                              f"rank per GPU in a communicator); world size {p.world_size}"}
    with p.phase("ipc handoff"):
        p.evidence["ipc"] = _ipc_handoff(torch, dev, size, engine)
        if p.evidence["ipc"].get("error"):
            problems.append(f"CUDA IPC handoff failed: {p.evidence['ipc']['error']}")
        elif p.evidence["ipc"].get("mismatched"):
            problems.append(f"CUDA IPC handoff delivered {p.evidence['ipc']['mismatched']} wrong elements")
        else:
            p.metric("ipc_gbps", p.evidence["ipc"]["gbps"], "GB/s")
    with p.phase("facts after"):
        dist.barrier(device_ids=[dev.index])
        p.evidence["facts_after"] = self_facts()
    bc = p.evidence.get("broadcast", {})
    done = [f"broadcast {bc['gbps']} GB/s" if "gbps" in bc else "no broadcast (one GPU)",
            f"CUDA IPC ({p.evidence['ipc'].get('serializer')}) {p.evidence['ipc'].get('gbps')} GB/s"]
    p.finish("fail" if problems else "pass", "; ".join(problems) if problems else
             f"{role} rank: weights bit-exact; " + ", ".join(done))


def _ipc_handoff(torch, dev, size: Dict[str, int], engine) -> Dict[str, Any]:
    """Hand tensors to the engine process (an _ipc.Helper forked by main) and time it."""
    kind, ser = _serializer()
    numel = size["ipc_tensor_bytes"] // 2
    named = [(f"layers.{k}.weight", _fill(torch, numel, 100 + k, dev)) for k in range(size["ipc_tensors"])]
    torch.cuda.synchronize(dev)
    out: Dict[str, Any] = {"serializer": kind, "bytes": numel * 2 * len(named), "tensors": len(named),
                           "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF")}
    try:
        # The first round pays the engine's CUDA context; the second is timed.
        for rnd in ("warm-up", "timed"):
            t0 = time.perf_counter()
            payload = base64.b64encode(_serialize(kind, ser, named)).decode()
            reply = engine.ask({"op": "load", "kind": kind, "payload": payload, "device": dev.index})
            secs = time.perf_counter() - t0
            if not reply.get("ok"):
                out["error"] = reply.get("error")
                break
            out["mismatched"] = reply["mismatched"]
            if rnd == "timed":
                out["seconds"] = round(secs, 5)
                out["gbps"] = round(out["bytes"] / secs / 1e9, 2)
    except OSError as exc:
        out["error"] = f"engine process: {type(exc).__name__}: {exc}"
    finally:
        engine.close()
    return out


if __name__ == "__main__":
    Probe.run(main)
