"""Recall on what people paste, as a user sees it (exit code, the verdict line, the JSON): a gloo timeout, a
forced NET plugin, a reporter's "NCCL timeout", two CUDA majors named in prose, a failure tied to one release,
a topology error, a TE without its torch extension. And the other side: lines that share these words in healthy
runs (a retry after 1.5 seconds, NCCL falling back from IB to sockets, an NCCL timeout setting) raise nothing."""
import json

import re

import pytest


def _run(explain, tmp_path, text, *args):
    log = tmp_path / "x.log"
    log.write_text(text)
    proc = explain(str(log), *args)
    data = json.loads(explain(str(log), "--json", "-").stdout)
    return proc, data


GLOO_TIMEOUT = """\
[rank0]:   File "/opt/torch/.venv/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py", line 3075, in all_reduce
[rank0]:     work.wait()
[rank0]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 20000ms for recv operation to complete
"""

NET_PLUGIN = """\
vm:4109:4109 [0] NCCL INFO NET/IB : No device found.
vm:4109:4109 [0] NCCL INFO Failed to initialize NET plugin IB
vm:4109:4109 [0] plugin/net.cc:379 NCCL WARN Failed to initialize any NET plugin
torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:93, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.28.9
"""


@pytest.mark.parametrize("text, cause", [
    (GLOO_TIMEOUT, "U1"),
    (NET_PLUGIN, "U4"),
    ("[BUG] training dies with an NCCL timeout in the allreduce after 2 hours\n", "U1"),
    ("Failed to find reverse path from remNode 0/41000 nlinks 2 to node 0/61000\n", "D10"),
])
def test_the_cause_is_named_first(explain, tmp_path, text, cause):
    proc, data = _run(explain, tmp_path, text)
    assert proc.returncode == 1, proc.stderr
    assert data["top"] == cause, [(c["id"], c["score"]) for c in data["causes"]]
    # a weak answer is worded as a guess ("low"); either way the verdict line names the cause
    assert re.search(rf"^verdict: (most likely|a guess, check it first:) {cause} ", proc.stdout.decode(), re.M)


@pytest.mark.parametrize("text, cause", [
    # the reporter names two CUDA majors: the mix is a candidate beside the symbol error's own cause
    ("undefined symbol ncclCommRegister\nI check the version of pytorch and cuda, i found cu11 and cu12 related packages\n", "C6"),
    # a failure tied to one build of the project: a regression, not only the node's memory
    ("CUDA error: out of memory after b1697\n", "U2"),
    # transformer_engine without its torch extension: a native piece built for another torch
    ("AttributeError: module 'transformer_engine' has no attribute 'pytorch'\n", "C9"),
    # the driver changed and the fabric broke: a support gap ranks beside the network error
    ("Deploying latest nvidia driver cuda 12.4 breaks TCPX\nNCCL INFO Call to connect returned Connection refused, retrying\n", "D10"),
])
def test_the_cause_is_among_the_first_three(explain, tmp_path, text, cause):
    _, data = _run(explain, tmp_path, text)
    assert data["verdict"] != "ok"
    assert cause in [c["id"] for c in data["causes"][:3]], [(c["id"], c["score"]) for c in data["causes"]]


def test_one_cuda_major_named_in_prose_is_no_mix(explain, tmp_path):
    _, data = _run(explain, tmp_path, "undefined symbol ncclCommRegister\nI installed the cu12 packages with torch 2.4.0+cu121\n")
    assert "C6" not in [c["id"] for c in data["causes"]]


HEALTHY_LOOKALIKES = """\
vm:7:7 [0] NCCL INFO NET/IB : No device found.
vm:7:7 [0] NCCL INFO Failed to initialize NET plugin IB
vm:7:7 [0] NCCL INFO NET/Socket : Using [0]eth0:192.0.2.2<0>
vm:7:7 [0] NCCL INFO Using network Socket
INFO 03-05 00:25:45 Retrying after 1.5 seconds
dist.init_process_group("nccl", timeout=timedelta(seconds=1800))
Setting NCCL timeout to 1800 seconds
  nccl timeout: 1800
NVIDIA-SMI 580.95.05   Driver Version: 580.95.05   CUDA Version: 13.0
torch 2.11.0+cu130
[pip3] nvidia-nccl-cu13==2.28.9
"""


def test_healthy_lines_sharing_the_new_words_raise_nothing(explain, tmp_path):
    proc, data = _run(explain, tmp_path, HEALTHY_LOOKALIKES)
    assert proc.returncode == 0, proc.stdout.decode()
    assert data["verdict"] == "ok" and data["causes"] == []


TORCH_OOM = """\
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 400.00 GiB. GPU 0 has a total capacity of 139.81 GiB of which 138.94 GiB is free. Of the allocated memory 0 bytes is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.
"""


@pytest.mark.parametrize("text, cause, absent", [
    # CUDA's own out-of-memory code from a VMM allocation (driver API), not torch's allocator message
    ("[torch_memory_saver.cpp] CUresult error  result=2 file=csrc/torch_memory_saver.cpp func=cu_mem_create\n", "U3", None),
    # expandable segments set for the run, then a CUDA IPC failure: VMM memory meets IPC
    ("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 sync.py\nRuntimeError: CUDA error: invalid argument\n", "M3", None),
    # torch's OOM advice names expandable segments in every OOM report: it says nothing about the run's settings
    (TORCH_OOM, "U3", "M3"),
])
def test_codes_and_settings_read_as_their_cause(explain, tmp_path, text, cause, absent):
    _, data = _run(explain, tmp_path, text)
    ids = [c["id"] for c in data["causes"]]
    assert data["verdict"] == "explained" and ids[0] == cause, [(c["id"], c["score"]) for c in data["causes"]]
    assert absent not in ids


def test_a_failure_told_in_chinese_is_not_ok(explain, tmp_path):
    """'After a few steps training hit this error' in the reporter's Chinese: a failure the log's lines may not show."""
    proc, data = _run(explain, tmp_path, "训练了几个step后遇到这样的错误\n训练机器：4x8H800 80G\n")
    assert data["verdict"] != "ok" and proc.returncode == 1
    _, calm = _run(explain, tmp_path, "训练机器：4x8H800 80G\n")
    assert calm["verdict"] == "ok"


def test_a_bounded_memlock_in_ulimit_listing_is_read_and_unlimited_is_not(explain, tmp_path):
    failing = "ibv_create_cq(cqe=4096) failed: Cannot allocate memory\nmax locked memory       (kbytes, -l) 64\n"
    _, data = _run(explain, tmp_path, failing)
    o2 = next(c for c in data["causes"] if c["id"] == "O2")
    assert "node.memlock_limited" in [e["signature"] for e in o2["evidence"]]
    _, fine = _run(explain, tmp_path, "max locked memory       (kbytes, -l) unlimited\n")
    assert fine["verdict"] == "ok" and fine["causes"] == []
