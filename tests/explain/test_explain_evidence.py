"""No cause without evidence of its own, and recall on what people paste: a lone cu13 tag is no CUDA mix, an
empty CUDA_VISIBLE_DEVICES is not a code bug, an environment description raises nothing, and issue-style prose
names its cause."""
import json

from explain_helpers import beyond_the_ranker


def _result(explain, tmp_path, text):
    log = tmp_path / "x.log"
    log.write_text(text)
    return json.loads(explain(str(log), "--json", "-").stdout)


CVD_EMPTY = """\
torch 2.11.0+cu130 cuda 13.0
CUDA_VISIBLE_DEVICES='' device_count 0
Traceback (most recent call last):
  File "/tmp/prog/pg1.py", line 7, in <module>
    dist.init_process_group("nccl", store=store, rank=0, world_size=1, device_id=dev)
ValueError: device_id cuda:0 is out of range. Please use a device index less than the number of accelerators available: 0.
"""


def test_empty_visible_devices_is_named_not_a_code_bug(explain, tmp_path):
    data = _result(explain, tmp_path, CVD_EMPTY)
    assert data["top"] == "C11", [c["id"] for c in data["causes"]]
    u2 = [c for c in data["causes"] if c["id"] == "U2"]
    assert not u2 or u2[0]["label"] == "low"


def test_one_cuda_major_is_no_mix(explain, tmp_path):
    failure = "vm:1:1 [0] include/alloc.h:112 NCCL WARN Cuda failure 999 'unknown error'\n"
    alone = _result(explain, tmp_path, "torch 2.11.0+cu130\n[pip3] nvidia-nccl-cu13==2.28.9\n" + failure)
    assert "C6" not in [c["id"] for c in alone["causes"]]
    mixed = _result(explain, tmp_path, "torch 2.11.0+cu130\n[pip3] nvidia-nccl-cu13==2.28.9\n[pip3] nvidia-cublas-cu12==12.9.1.4\n" + failure)
    assert "C6" in [c["id"] for c in mixed["causes"]]


def test_an_environment_description_raises_nothing(explain, tmp_path):
    env = ("PyTorch version: 2.11.0+cu130\nCUDA used to build PyTorch: 13.0\nGPU models and configuration:\n"
           "GPU 0: NVIDIA H200\nNvidia driver version: 580.159.04\n[pip3] nvidia-nccl-cu13==2.28.9\n[pip3] torch==2.11.0+cu130\n"
           "vm:1:1 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0\n")
    data = _result(explain, tmp_path, env)
    assert data["verdict"] == "ok" and data["causes"] == []
    assert data["facts"]["gpu_model"][0]["value"] == "H200"


def test_issue_prose_names_its_cause(explain, tmp_path):
    prose = ("NCCL hangs in the case GPUs are linked through PXB or PIX\n"
             "all_reduce_perf works fine only with those linked through SYS. The rest will result in hanging.\n"
             "Setting NCCL_P2P_DISABLE=1 did workaround but got really low speed.\n")
    assert _result(explain, tmp_path, prose)["top"] == "N3"
    cpu = "pytorch installs cpu only version\ntorch.cuda.is_available() returns False\n"
    assert _result(explain, tmp_path, cpu)["top"] == "U5"


def test_evidence_that_fits_two_causes_equally_says_so(explain, tmp_path):
    log = tmp_path / "tie.log"
    log.write_text("RuntimeError: pidfd_getfd: Operation not permitted\n")
    proc = explain(str(log))
    data = json.loads(explain(str(log), "--json", "-").stdout)
    assert set(data["tied"]) == {"M3", "O3"}
    assert "the evidence fits" in proc.stdout.decode()


HEALTHY_NCCL_INFO = """\
h200:7:7 [0] NCCL INFO NCCL version 2.28.9+cuda13.0
h200:7:7 [0] NCCL INFO cudaDriverVersion 13000
h200:7:7 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0
h200:7:7 [0] NCCL INFO NCCL_CUMEM_ENABLE set by environment to 1.
h200:7:9 [0] NCCL INFO NVLS multicast support is available on dev 0 (NVLS_NCHANNELS 16)
h200:7:9 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
h200:7:9 [0] NCCL INFO ncclCommInitRank comm 0x55 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 6000 commId 0x1 - Init COMPLETE
torch 2.11.0+cu130
"""


def test_lines_every_healthy_run_prints_raise_no_cause(explain, tmp_path):
    healthy = _result(explain, tmp_path, HEALTHY_NCCL_INFO)
    assert healthy["verdict"] == "ok" and healthy["causes"] == []
    # beside a failure nothing names, they still add no cause of their own
    failed = _result(explain, tmp_path, HEALTHY_NCCL_INFO + "RuntimeError: flux capacitor overload\n")
    assert failed["verdict"] != "ok"
    assert beyond_the_ranker(failed) == [], beyond_the_ranker(failed)
