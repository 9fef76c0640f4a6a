"""The payload's reloadable process groups on CPU (gloo, two ranks): collectives through the wrappers,
destroy and re-create in place, and no reference kept to a destroyed group.

Needs torch: the ranks run under tests/torch_env.py's python (the CPU wheel, installed once a session).
"""
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest


CHECKS = Path(__file__).resolve().parent.parent / "checks"

RANK_PROGRAM = r"""
import gc, os, sys, weakref
sys.path.insert(0, sys.argv[1])
import torch, torch.distributed as dist
import train_moe_step as T
dist.init_process_group("gloo", rank=int(os.environ["RANK"]), world_size=2)
rank = dist.get_rank()
r = T.GroupReloader(); r.install()
pair = dist.new_group(ranks=[0, 1]); own = dist.new_group(ranks=[rank])  # both ranks create both
other = dist.new_group(ranks=[1 - rank])
assert type(pair).__name__ == "ReloadableGroup" and dist.get_process_group_ranks(pair) == [0, 1]

def exercise():
    t = torch.full((4,), float(rank + 1)); dist.all_reduce(t, group=pair); assert t.tolist() == [3.0] * 4
    out = torch.empty(8); dist.all_gather_into_tensor(out, torch.full((4,), float(rank)), group=pair)
    assert out.tolist() == [0.0] * 4 + [1.0] * 4
    o = torch.empty(4); dist.all_to_all_single(o, torch.arange(4.0) + 10 * rank, group=pair)
    assert o.tolist() == ([0.0, 1.0, 10.0, 11.0] if rank == 0 else [2.0, 3.0, 12.0, 13.0])
    with dist._coalescing_manager(group=pair, async_ops=False):
        x = torch.ones(2); dist.all_reduce(x, group=pair)
    assert x.tolist() == [2.0, 2.0]
    # pipeline parallel: megatron's p2p_communication sends activations with isend/irecv and
    # batch_isend_irecv on the (wrapped) pipeline group, naming peers by global rank
    peer = 1 - rank
    got = torch.empty(3)
    reqs = [dist.isend(torch.full((3,), float(rank)), dst=peer, group=pair), dist.irecv(got, src=peer, group=pair)]
    for q in reqs:
        q.wait()
    assert got.tolist() == [float(peer)] * 3
    got2 = torch.empty(2)
    ops = [dist.P2POp(dist.isend, torch.full((2,), 10.0 + rank), peer, group=pair),
           dist.P2POp(dist.irecv, got2, peer, group=pair)]
    for q in dist.batch_isend_irecv(ops):
        q.wait()
    assert got2.tolist() == [10.0 + peer] * 2

exercise()
for cycle in range(3):
    inner = weakref.ref(object.__getattribute__(pair, "_inner"))
    own_inner = weakref.ref(object.__getattribute__(own, "_inner"))
    assert r.destroy_all() == 2  # the pair and this rank's own one-rank group (eager NCCL comms leak otherwise)
    gc.collect()
    assert inner() is None and own_inner() is None, "a destroyed group is still referenced"
    try:
        dist.all_reduce(torch.ones(1), group=pair)
        raise AssertionError("a destroyed group still ran a collective")
    except (RuntimeError, ValueError):
        pass
    assert r.rebuild_all() == 2
    exercise()
print("OK", rank, r.destroyed, r.created, flush=True)
os._exit(0)  # skip interpreter teardown: gloo's threads sometimes abort there ("terminate called ...")
"""


def test_reloadable_groups_on_gloo(tmp_path, torch_env):
    python, torch_vars = torch_env
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in (0, 1):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   **torch_vars)
        procs.append(subprocess.Popen([python, "-c", RANK_PROGRAM, str(CHECKS)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, (out + err)[-3000:]
    # 2 groups destroyed per cycle x 3; 3 recorded new_group calls replayed 3 times on top of the first 3
    assert [o.split()[1:] for o, _ in outs] == [["0", "6", "12"], ["1", "6", "12"]]
