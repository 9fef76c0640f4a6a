"""cuMem + CUDA IPC probe: every way colocated RL hands GPU memory between processes, verified.

Sub-tests (each one verdict in the result's evidence["subtests"]):
- vmm.churn          cuMemCreate/AddressReserve/Map/SetAccess/Unmap/Release at GB sizes, K cycles, data
                     checked every cycle, free memory compared before and after (torch_memory_saver and
                     NCCL's cuMem mode live on exactly these calls; envbuild/knowledge/causes.toml M1).
- posix_fd.same_gpu  a cuMem POSIX-FD handle passed to a second process over SCM_RIGHTS, imported,
- posix_fd.peer_gpu  mapped (on the same GPU / with access from a peer GPU), read back, written, and the
                     write seen by the owner.
- cudaipc.same_gpu   legacy cuIpcGetMemHandle/cuIpcOpenMemHandle on plain cuMemAlloc memory
- cudaipc.peer_gpu   (what torch.multiprocessing uses without expandable segments).
- torch_mp.expandable_off / torch_mp.expandable_on
                     torch.multiprocessing's reduce_tensor between two helper processes, with
                     PYTORCH_CUDA_ALLOC_CONF expandable_segments False / True. The True path imports the
                     producer's fds with pidfd_getfd, which yama ptrace_scope / missing CAP_SYS_PTRACE /
                     seccomp refuse (M3, O3).
- fabric             a FABRIC handle round trip where the device reports support; skipped otherwise.
Evidence also records whether legacy IPC accepts cuMem memory (it does not: the M3 mechanism).

Never creates multicast objects. Runs as one process that sees every selected GPU (nranks=1) plus
helper processes it starts itself (children in its process group, so the launcher's kill reaches them).
Args: --mode quick|full.  Fault hook: ENVBUILD_FAULT_IPC_BLOCK_PTRACE=seccomp (consumer side only).
"""
from __future__ import annotations

import base64
import os
import pickle
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional

from _harness import Probe, mismatches, parse_mode, word_pattern
from _ipc import Helper

SIZES = {
    "quick": {"churn_bytes": 1 << 30, "churn_cycles": 4, "share_bytes": 256 << 20},
    "full": {"churn_bytes": 4 << 30, "churn_cycles": 16, "share_bytes": 1 << 30},
}
LEAK_TOLERANCE_BYTES = 64 << 20
CHILD_TIMEOUT_S = 120.0


def _round_up(n: int, g: int) -> int:
    return (n + g - 1) // g * g


# ----------------------------------------------------------------------------------------------------
# Helper processes. One "importer" serves the handle tests; torch_mp uses a producer/consumer pair per
# allocator setting because PYTORCH_CUDA_ALLOC_CONF is read once per process.
# ----------------------------------------------------------------------------------------------------
def serve_helper(role: str, sock) -> None:
    """A helper's request loop (forked by _ipc.Helper from the probe, which imported torch and never touched CUDA)."""
    from _ipc import apply_fault_hooks, recv_msg, send_msg

    fault = apply_fault_hooks() if role == "tm_consumer" else None
    import torch

    from _cudrv import Driver, describe_error

    try:  # a refused setting is every answer's error, not a helper that dies without a word
        alloc_conf = apply_alloc_conf(torch) if role.startswith("tm_") else None
        setup_error = None
    except Exception as exc:
        alloc_conf, setup_error = None, describe_error(exc)
    drv = None
    keep: Dict[str, Any] = {}
    while True:
        msg, fds = recv_msg(sock)
        op = msg["op"]
        if op == "exit":
            send_msg(sock, {"ok": True})
            return
        reply: Dict[str, Any] = {"ok": False, "fault_hook": fault, "alloc_conf": alloc_conf}
        if setup_error is not None:
            reply.update(setup_error)
            send_msg(sock, reply)
            continue
        t0 = time.perf_counter()
        try:
            dev = int(msg.get("device", 0))
            torch.cuda.set_device(dev)
            torch.zeros(1, device=f"cuda:{dev}")
            if drv is None and op in ("import_fd", "import_fabric", "ipc_open"):
                drv = Driver()
            if op in ("import_fd", "import_fabric"):
                nbytes = int(msg["nbytes"])
                if op == "import_fd":
                    h = drv.import_fd(fds[0])
                    os.close(fds[0])
                else:
                    h = drv.import_fabric(bytes.fromhex(msg["handle"]))
                ptr = drv.map_handle(h, nbytes, [dev])
                got = torch.empty(nbytes // 4, dtype=torch.int32, device=f"cuda:{dev}")
                drv.memcpy(got.data_ptr(), ptr, nbytes)
                reply["mismatched_words"] = mismatches(got, word_pattern(nbytes // 4, msg["seed"], dev))
                back = word_pattern(nbytes // 4, msg["seed_back"], dev)
                torch.cuda.synchronize(dev)
                drv.memcpy(ptr, back.data_ptr(), nbytes)
                drv.unmap_free(ptr, nbytes)
                drv.release(h)
                reply["ok"] = True
            elif op == "ipc_open":
                nbytes = int(msg["nbytes"])
                ptr = drv.ipc_open(bytes.fromhex(msg["handle"]))
                got = torch.empty(nbytes // 4, dtype=torch.int32, device=f"cuda:{dev}")
                drv.memcpy(got.data_ptr(), ptr, nbytes)
                reply["mismatched_words"] = mismatches(got, word_pattern(nbytes // 4, msg["seed"], dev))
                drv.ipc_close(ptr)
                reply["ok"] = True
            elif op == "share":  # tm_producer
                t = word_pattern(int(msg["nbytes"]) // 4, msg["seed"], dev)
                torch.cuda.synchronize(dev)
                from torch.multiprocessing.reductions import reduce_tensor

                fn, args = reduce_tensor(t)
                keep["t"] = t
                # what the allocator setting really did: the tensor lies in an expandable segment or not
                reply["expandable_segment"] = any(seg.get("is_expandable") for seg in torch.cuda.memory_snapshot())
                reply["payload"] = base64.b64encode(pickle.dumps((fn, args))).decode()
                reply["ok"] = True
            elif op == "rebuild":  # tm_consumer
                fn, args = pickle.loads(base64.b64decode(msg["payload"]))
                t = fn(*args)
                reply["device"] = str(t.device)
                want = word_pattern(int(msg["nbytes"]) // 4, msg["seed"], t.device)
                reply["mismatched_words"] = mismatches(t, want)
                del t, want
                torch.cuda.ipc_collect()
                reply["ok"] = True
        except Exception as exc:  # reported to the parent, which owns the verdict
            reply.update(describe_error(exc))
        reply["seconds"] = round(time.perf_counter() - t0, 4)
        send_msg(sock, reply)


# ----------------------------------------------------------------------------------------------------
# The parent: sub-tests
# ----------------------------------------------------------------------------------------------------
def _sub(name: str, status: str, summary: str, causes=(), **data: Any) -> Dict[str, Any]:
    return {"name": name, "status": status, "summary": summary, "causes": list(causes), **data}


def _free_bytes(torch, drv) -> int:
    """Device free memory with torch's caching allocator emptied first: blocks torch keeps cached (the
    comparison temporaries, or segments grown under expandable_segments) are not a cuMem leak."""
    torch.cuda.synchronize(0)
    torch.cuda.empty_cache()
    return drv.mem_info()[0]


def _churn(torch, drv, size: Dict[str, int]) -> Dict[str, Any]:
    g = drv.granularity(0)
    nbytes = _round_up(size["churn_bytes"], g)
    src = word_pattern(nbytes // 4, 0x1234, "cuda:0")
    dst = torch.empty_like(src)
    free_before = _free_bytes(torch, drv)
    cycles: List[float] = []
    bad = 0
    for c in range(size["churn_cycles"]):
        t0 = time.perf_counter()
        h = drv.create(0, nbytes)
        ptr = drv.map_handle(h, nbytes, [0])
        drv.memcpy(ptr, src.data_ptr(), nbytes)
        dst.zero_()
        torch.cuda.synchronize(0)
        drv.memcpy(dst.data_ptr(), ptr, nbytes)
        bad += mismatches(dst, src)
        drv.unmap_free(ptr, nbytes)
        drv.release(h)
        cycles.append(round(time.perf_counter() - t0, 4))
    free_after = _free_bytes(torch, drv)
    leak = free_before - free_after
    data = {"bytes": nbytes, "cycles": len(cycles), "cycle_s": cycles, "granularity": g,
            "free_before": free_before, "free_after": free_after, "mismatched_words": bad}
    if bad:
        return _sub("vmm.churn", "fail", f"cuMem data corrupted: {bad} words differ after map/copy",
                    ("M1", "D8"), **data)
    if leak > LEAK_TOLERANCE_BYTES:
        return _sub("vmm.churn", "fail", f"{leak / 2**20:.0f} MiB not returned after {len(cycles)} "
                    "create/map/unmap/release cycles", ("M1", "D8"), **data)
    return _sub("vmm.churn", "pass", f"{len(cycles)} x {nbytes / 2**30:.1f} GiB cuMem cycles, data exact, "
                f"no leak ({max(leak, 0) / 2**20:.0f} MiB)", **data)


def _posix_fd(torch, drv, child: Helper, nbytes: int, dev: int) -> Dict[str, Any]:
    name = "posix_fd.same_gpu" if dev == 0 else "posix_fd.peer_gpu"
    causes = ("M1", "D8") + (("N3",) if dev else ())
    nbytes = _round_up(nbytes, drv.granularity(0))
    h = drv.create(0, nbytes)
    ptr = drv.map_handle(h, nbytes, [0])
    try:
        src = word_pattern(nbytes // 4, 0x2000 + dev, "cuda:0")
        torch.cuda.synchronize(0)
        drv.memcpy(ptr, src.data_ptr(), nbytes)
        fd = drv.export_fd(h)
        try:
            reply = child.ask({"op": "import_fd", "nbytes": nbytes, "device": dev, "seed": 0x2000 + dev,
                               "seed_back": 0x3000 + dev}, fds=[fd])
        finally:
            os.close(fd)
        if not reply.get("ok"):
            return _sub(name, "fail", f"import in a second process failed: {reply.get('call', '')} "
                        f"{reply.get('error')}", causes, child=reply)
        seen = torch.empty_like(src)
        drv.memcpy(seen.data_ptr(), ptr, nbytes)
        back_bad = mismatches(seen, word_pattern(nbytes // 4, 0x3000 + dev, "cuda:0"))
    finally:
        drv.unmap_free(ptr, nbytes)
        drv.release(h)
    data = {"bytes": nbytes, "importer_device": dev, "child": reply, "owner_mismatched_words": back_bad}
    if reply.get("mismatched_words") or back_bad:
        return _sub(name, "fail", f"data differs across processes (importer {reply.get('mismatched_words')} "
                    f"words, owner {back_bad} words)", causes, **data)
    where = "the same GPU" if dev == 0 else f"peer GPU {dev}"
    return _sub(name, "pass", f"fd passed over SCM_RIGHTS, imported and mapped on {where}; both ways exact",
                **data)


def _legacy_ipc(torch, drv, child: Helper, nbytes: int, dev: int) -> Dict[str, Any]:
    name = "cudaipc.same_gpu" if dev == 0 else "cudaipc.peer_gpu"
    causes = ("O4", "D8") + (("N3",) if dev else ())
    ptr = drv.mem_alloc(nbytes)
    try:
        src = word_pattern(nbytes // 4, 0x4000 + dev, "cuda:0")
        torch.cuda.synchronize(0)
        drv.memcpy(ptr, src.data_ptr(), nbytes)
        handle = drv.ipc_get(ptr)
        reply = child.ask({"op": "ipc_open", "nbytes": nbytes, "device": dev, "seed": 0x4000 + dev,
                           "handle": handle.hex()})
    finally:
        drv.mem_free(ptr)
    if not reply.get("ok"):
        return _sub(name, "fail", f"cuIpcOpenMemHandle in a second process failed: {reply.get('error')}",
                    causes, child=reply)
    if reply.get("mismatched_words"):
        return _sub(name, "fail", f"{reply['mismatched_words']} words differ through a legacy IPC handle",
                    causes, child=reply)
    where = "the same GPU" if dev == 0 else f"peer GPU {dev}"
    return _sub(name, "pass", f"legacy cudaIpc handle opened on {where}; data exact", bytes=nbytes, child=reply)


def _legacy_on_vmm(drv) -> Dict[str, Any]:
    """Does legacy IPC accept cuMem memory? (It should refuse: why TMS/expandable memory cannot use it.)"""
    from _cudrv import CudaError

    g = drv.granularity(0)
    h = drv.create(0, g)
    ptr = drv.map_handle(h, g, [0])
    try:
        drv.ipc_get(ptr)
        answer = "accepted"
    except CudaError as exc:
        answer = f"refused: {exc.code} {exc.name}"
    finally:
        drv.unmap_free(ptr, g)
        drv.release(h)
    return {"legacy_ipc_on_cumem_memory": answer}


def torch_mp_env(expandable: bool) -> Dict[str, str]:
    """The environment of a torch_mp producer/consumer pair (the allocator setting is read once per process)."""
    env = dict(os.environ)
    env["PYTORCH_CUDA_ALLOC_CONF"] = f"expandable_segments:{'True' if expandable else 'False'}"
    env.pop("PYTORCH_ALLOC_CONF", None)
    return env


def apply_alloc_conf(torch) -> Optional[str]:
    """Apply this helper's PYTORCH_CUDA_ALLOC_CONF to torch's allocator: a forked helper inherits the allocator
    settings the probe's torch may already have parsed, and the allocator reads its variable once per process.
    Returns the setting applied (None when the variable is unset)."""
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
    if conf is None:
        return None
    setter = getattr(torch._C, "_accelerator_setAllocatorSettings", None)  # torch >= 2.9
    if setter is None:
        setter = torch.cuda.memory._set_allocator_settings
    setter(conf)
    return conf


def _torch_mp(expandable: bool, nbytes: int, producer: Helper, consumer: Helper) -> Dict[str, Any]:
    name = "torch_mp.expandable_on" if expandable else "torch_mp.expandable_off"
    try:
        shared = producer.ask({"op": "share", "nbytes": nbytes, "device": 0, "seed": 0x5000 + expandable})
        if not shared.get("ok"):
            return _sub(name, "fail", f"reduce_tensor in the producer failed: {shared.get('error')}",
                        ("M3",), producer=shared)
        reply = consumer.ask({"op": "rebuild", "payload": shared["payload"], "nbytes": nbytes, "device": 0,
                              "seed": 0x5000 + expandable})
    finally:
        consumer.close()
        producer.close()
    data = {"bytes": nbytes, "alloc_conf": torch_mp_env(expandable)["PYTORCH_CUDA_ALLOC_CONF"], "consumer": reply,
            "producer_expandable_segment": shared.get("expandable_segment")}
    if not reply.get("ok"):
        err = str(reply.get("error"))
        causes = ("M3", "O3") if expandable else ("O4", "D8")
        return _sub(name, "fail", f"the consumer could not open the shared tensor: {err[:200]}", causes, **data)
    if reply.get("mismatched_words"):
        return _sub(name, "fail", f"{reply['mismatched_words']} words differ in the shared tensor",
                    ("M3",) if expandable else ("D8",), **data)
    return _sub(name, "pass", f"CUDA tensor shared via torch.multiprocessing "
                f"(expandable_segments {'on' if expandable else 'off'}); data exact", **data)


def _fabric(torch, drv, child: Helper, nbytes: int) -> Dict[str, Any]:
    from _cudrv import HANDLE_FABRIC, CudaError

    if not drv.attribute("handle_type_fabric", 0):
        return _sub("fabric", "skip", "the device reports no FABRIC handle support "
                    "(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED = 0)")
    try:
        g = drv.granularity(0, HANDLE_FABRIC)
        nbytes = _round_up(nbytes, g)
        h = drv.create(0, nbytes, HANDLE_FABRIC)
    except CudaError as exc:
        return _sub("fabric", "skip", f"FABRIC allocation refused ({exc.code} {exc.name}): usually no IMEX "
                    "channel (/dev/nvidia-caps-imex-channels) is granted to this process; single-node IPC "
                    "does not need it")
    ptr = drv.map_handle(h, nbytes, [0])
    try:
        src = word_pattern(nbytes // 4, 0x6000, "cuda:0")
        torch.cuda.synchronize(0)
        drv.memcpy(ptr, src.data_ptr(), nbytes)
        try:
            data = drv.export_fabric(h)
        except CudaError as exc:
            return _sub("fabric", "skip", f"FABRIC export refused ({exc.code} {exc.name}); no IMEX channel?")
        reply = child.ask({"op": "import_fabric", "nbytes": nbytes, "device": 0, "seed": 0x6000,
                           "seed_back": 0x6001, "handle": data.hex()})
    finally:
        drv.unmap_free(ptr, nbytes)
        drv.release(h)
    if not reply.get("ok"):
        if reply.get("code") in (800, 801):  # CUDA_ERROR_NOT_PERMITTED / NOT_SUPPORTED: IMEX policy
            return _sub("fabric", "skip", f"FABRIC import refused ({reply.get('error')}): no IMEX channel "
                        "for this process", child=reply)
        return _sub("fabric", "fail", f"FABRIC import failed: {reply.get('error')}", ("N2",), child=reply)
    if reply.get("mismatched_words"):
        return _sub("fabric", "fail", f"{reply['mismatched_words']} words differ through a FABRIC handle",
                    ("N2",), child=reply)
    return _sub("fabric", "pass", "FABRIC handle exported, imported in a second process, data exact",
                bytes=nbytes, child=reply)


def _guard(name: str, fn, *args) -> Dict[str, Any]:
    """Run one sub-test; a driver error is that sub-test's failure, not the probe's end."""
    from _cudrv import describe_error

    t0 = time.perf_counter()
    try:
        out = fn(*args)
    except Exception as exc:
        err = describe_error(exc)
        out = _sub(name, "fail", f"{err.get('call', name)}: {err.get('error')}",
                   ("M1", "D8") if "cuMem" in str(err.get("call", "")) else ("D8",), **err)
    out["seconds"] = round(time.perf_counter() - t0, 3)
    return out


def start_helpers() -> Dict[str, Helper]:
    """Every helper process, forked at once after `import torch` and before the probe's first CUDA call.

    A helper waits for its first request before it touches CUDA (serve_helper), so starting all five at once
    costs no GPU memory and cannot move the vmm.churn free-memory reading. Each is still used, and closed, at
    the same point of the sequence as when each was a fresh interpreter started one stage at a time (three
    serial start-ups, 4.8-5.3 s each on the lent H200 machine, of which 0.24-0.28 s was their work), except the two
    torch.multiprocessing pairs, which since session 12 run side by side: four helper CUDA contexts at once there
    (about 0.5 GiB each), for 0.3-0.5 s less of the probe."""
    from functools import partial

    import torch  # loaded once here, inherited by every helper

    if torch.cuda.is_initialized():  # a CUDA context does not survive fork(): helpers must fork before it
        raise RuntimeError("gpu.cumem_ipc: CUDA was initialised before the helpers were forked")

    helpers: Dict[str, Helper] = {}
    try:
        helpers["importer"] = Helper(partial(serve_helper, "importer"), timeout_s=CHILD_TIMEOUT_S)
        for expandable in (False, True):
            env = torch_mp_env(expandable)
            helpers[f"tm_producer.{expandable}"] = Helper(partial(serve_helper, "tm_producer"), env, CHILD_TIMEOUT_S)
            helpers[f"tm_consumer.{expandable}"] = Helper(partial(serve_helper, "tm_consumer"), env, CHILD_TIMEOUT_S)
    except BaseException:
        close_helpers(helpers)
        raise
    return helpers


def close_helpers(helpers: Dict[str, Helper]) -> None:
    """Close every helper still held, even when closing one of them fails."""
    first: Optional[BaseException] = None
    for name in list(helpers):
        try:
            helpers.pop(name).close()
        except Exception as exc:  # the others are closed all the same
            first = first or exc
    if first is not None:
        raise first


def main(p: Probe) -> None:
    mode = parse_mode().mode
    with p.phase("start helpers"):
        helpers = start_helpers()
    p.evidence["helpers"] = "forked from this probe after import torch, before its first CUDA call"
    try:
        _main(p, mode, helpers)
    finally:
        close_helpers(helpers)


def _main(p: Probe, mode: str, helpers: Dict[str, Helper]) -> None:
    import torch

    from _cudrv import Driver
    from _rankfacts import expandable_segments_on, self_facts

    size = SIZES[mode]
    with p.phase("init"):
        n = torch.cuda.device_count()
        for i in range(n):
            torch.zeros(1, device=f"cuda:{i}")
        torch.cuda.set_device(0)
        drv = Driver()
        facts = self_facts()
        p.evidence.update({"mode": mode, "device_count": n, "driver_version": drv.driver_version(),
                           "attributes": {k: drv.attribute(k, 0) for k in
                                          ("virtual_memory_management", "handle_type_posix_fd",
                                           "handle_type_fabric", "gpu_direct_rdma_with_vmm")},
                           "privileges": facts["privileges"], "alloc_conf": facts["alloc_conf"],
                           "fault_hook": os.environ.get("ENVBUILD_FAULT_IPC_BLOCK_PTRACE") or None})
        try:
            import cuda.bindings

            p.evidence["cuda_python"] = getattr(cuda.bindings, "__version__", "present")
        except ImportError:
            p.evidence["cuda_python"] = None
    subs: List[Dict[str, Any]] = []
    if not drv.attribute("virtual_memory_management", 0):
        p.finish("fail", "the driver reports no virtual memory management (cuMem) support on GPU 0",
                 causes=["M1", "D8"])
        return
    p.settle()  # the sub-tests time their cycles: an earlier probe's context going away must not be in them
    with p.phase("vmm churn"):
        subs.append(_guard("vmm.churn", _churn, torch, drv, size))
    child = helpers["importer"]
    try:
        with p.phase("posix fd same gpu"):
            subs.append(_guard("posix_fd.same_gpu", _posix_fd, torch, drv, child, size["share_bytes"], 0))
        with p.phase("posix fd peer gpu"):
            subs.append(_guard("posix_fd.peer_gpu", _posix_fd, torch, drv, child, size["share_bytes"], 1)
                        if n > 1 else _sub("posix_fd.peer_gpu", "skip", f"needs 2 GPUs; {n} visible"))
        with p.phase("legacy ipc same gpu"):
            subs.append(_guard("cudaipc.same_gpu", _legacy_ipc, torch, drv, child, size["share_bytes"], 0))
        with p.phase("legacy ipc peer gpu"):
            subs.append(_guard("cudaipc.peer_gpu", _legacy_ipc, torch, drv, child, size["share_bytes"], 1)
                        if n > 1 else _sub("cudaipc.peer_gpu", "skip", f"needs 2 GPUs; {n} visible"))
        with p.phase("fabric"):
            subs.append(_guard("fabric", _fabric, torch, drv, child, size["share_bytes"]))
    finally:
        helpers.pop("importer").close()
    with p.phase("legacy ipc on cumem"):
        try:
            p.evidence.update(_legacy_on_vmm(drv))
        except Exception as exc:
            p.evidence["legacy_ipc_on_cumem_memory"] = f"probe failed: {exc}"
    # The two pairs are separate processes with nothing in common: run side by side, each pair's CUDA start-up
    # (most of its 0.5-0.6 s on the H100, docs/faults.md) overlaps the other's.
    with p.phase("torch_mp expandable off and on"):
        pairs = {expandable: (helpers.pop(f"tm_producer.{expandable}"), helpers.pop(f"tm_consumer.{expandable}"))
                 for expandable in (False, True)}
        with ThreadPoolExecutor(max_workers=2) as pool:
            done = {expandable: pool.submit(_guard, f"torch_mp.expandable_{'on' if expandable else 'off'}",
                                            _torch_mp, expandable, size["share_bytes"], *pair)
                    for expandable, pair in pairs.items()}
        subs.extend(done[expandable].result() for expandable in (False, True))
    p.evidence["subtests"] = subs
    p.evidence["env_enables_expandable_segments"] = expandable_segments_on(facts["alloc_conf"])
    failed = [s["name"] for s in subs if s["status"] == "fail"]
    p.finish("fail" if failed else "pass",
             f"failed: {', '.join(failed)}" if failed else f"{sum(s['status'] == 'pass' for s in subs)} "
             "sub-tests passed")


if __name__ == "__main__":
    Probe.run(main)
