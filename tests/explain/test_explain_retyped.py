"""Issue 25, third round: text as people retype it in a thread, read the way a user sees it (exit code, verdict,
the JSON's ranking). An error message in another case, a workaround the reporter says worked (with spaces around
`=`, in Chinese), a CUDA message in its singular or cut form, a native extension's undefined symbol named in a
title, a native build refused for another CUDA toolkit than torch's; and the other side: a workaround that did not help, NCCL's echo of a variable, a bare command line."""
import re
from pathlib import Path

import pytest

from explain_helpers import beyond_the_ranker

from envbuild.errors import InputFileError
from envbuild.knowledge.signatures import load_signature_file



def _ranked(data):
    return [(c["id"], c["score"]) for c in data["causes"]]


@pytest.mark.parametrize("text, cause", [
    # vLLM's cumem allocator message retyped in lower case in a title
    ("cuda error: out of memory at /workspace/csrc/cumem_allocator.cpp:62\n", "U3"),
    ("RUNTIMEERROR: CUDA ERROR: AN ILLEGAL MEMORY ACCESS WAS ENCOUNTERED\n", "U2"),  # a bare kernel fault: test_explain_round13.py
    ("Got: No Kernel Image Is Available For Execution On The Device\n", "D10"),
    # the reporter's workaround, written with a space before '=' (an env var cannot hold one: a retyping)
    ("the training froze with 4 GPUs; the model works by setting NCCL_P2P_DISABLE =1 .\n", "N3"),
    ("多机训练出现 socketFinalizeAccept: wrong type 3 != 4 错误，指定NCCL_IB_DISABLE=1 程序就可以正常运行\n", "U4"),
    ("weight sync failed; setting NCCL_NVLS_ENABLE: 0 fixed it\n", "N1"),
    # CUDA's peer-access message outside NCCL, in the singular a reporter typed
    ("error: peer access is not supported between these two device\n", "N3"),
    # a native extension's undefined symbol: a title without the symbol, or the loader's line cut after 'undefined'
    ("flash_attn_2 undefined symbol\n", "C9"),
    ("`flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: undefined\n symbol: _ZN3c104impl3cow11cow_deleterEPv`\n", "C9"),
    # a native extension built with another CUDA toolkit than torch's (torch's check wraps over two lines; DeepSpeed's)
    ("RuntimeError:\nThe detected CUDA version (12.2) mismatches the version that was used to compile\nPyTorch (11.3). "
     "Please make sure to use the same CUDA versions.\n", "C9"),
    ("Exception: >- DeepSpeed Op Builder: Installed CUDA version 12.0 does not match the version torch was compiled "
     "with 11.7, unable to compile cuda/cpp extensions without a matching cuda version.\n", "C9"),
    # the store's client gave up: c10d's socket wording, without the TCPStore line
    ("[E516 10:05:30.089184418 socket.cpp:1023] [c10d] The client socket has timed out after 300000ms while trying "
     "to connect to (10.0.0.1, 51216).\n", "U4"),
    # another NCCL release was the workaround: the NCCL that ran had the bug
    ("[Bug]: crash on NCCL when loading a MoE model on 16 GPUs\nWA is update the nccl: pip install -U "
     "nvidia-nccl-cu12==2.26.2\n", "C2"),
    # the reporter's own words for running out of memory, in a title or in Chinese
    ("[Bug] GRPO training OOM with 8xA100 when rollout n=16\n", "U3"),
    ("训练时显存不足，rollout 阶段直接挂掉\n", "U3"),
    # NCCL's system error alone: /dev/shm is the usual cause and is named, with a low word
    ("RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)\n", "O1"),
])
def test_retyped_text_names_its_cause(explain_text, text, cause):
    proc, data = explain_text(text)
    assert proc.returncode == 1, proc.stderr
    assert data["verdict"] == "explained" and data["top"] == cause, _ranked(data)


def test_nccls_own_217_in_shm_stays_a_cumem_host_failure(explain_text):
    text = ("host:774:854 [0] transport/shm.cc:590 NCCL WARN Cuda failure 217 'peer access is not supported between "
            "these two devices'\n")
    _, data = explain_text(text)
    assert data["top"] == "M2", _ranked(data)


def test_duplicate_gpu_ranks_device_assignment_beside_a_bug(explain_text):
    text = "NCCL WARN Duplicate GPU detected: rank 0 and rank 2 both on CUDA device\n"
    _, data = explain_text(text)
    assert "C11" in [c["id"] for c in data["causes"][:3]], _ranked(data)


@pytest.mark.parametrize("text", [
    "training hangs; NCCL_P2P_DISABLE=1 did not help\n",
    "the job still fails, setting NCCL_IB_DISABLE=1 doesn't fix it\n",
    "it works fine without NCCL_P2P_DISABLE=1\n",
    "设置NCCL_IB_DISABLE=1还是报错\n",
    "NCCL hangs in all_reduce; updating nccl did not fix it\n",
])
def test_a_workaround_that_did_not_help_names_nothing(explain_text, text):
    _, data = explain_text(text)
    named = {"N3", "U4", "C2"} & {data["top"]}
    assert not named, _ranked(data)


@pytest.mark.parametrize("text", [
    "gpu1:1:1 [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 1\n",
    "mpirun -np 8 -x NCCL_IB_DISABLE=1 -x NCCL_P2P_DISABLE=1 ./all_reduce_perf -b 8 -e 1G\n",
    "docker run --gpus all --ipc=host --shm-size=16g image python train.py\n",
])
def test_settings_without_words_of_success_are_not_a_failure(explain_text, text):
    proc, data = explain_text(text)
    assert proc.returncode == 0 and data["verdict"] == "ok", _ranked(data)


def test_a_case_free_entry_loads_with_its_key_in_another_case(tmp_path: Path):
    """(?i) at a pattern's start makes its keys case-free too, so the loader accepts an example that holds the key
    in another case; without (?i) the same entry is refused (its pre-filter would never pass the example)."""
    entry = ('[[signature]]\nid = "t.x"\npattern = "{flag}unhandled system error"\nkey = "unhandled system error"\n'
             'means = "m"\nsupports = {{ O1 = 1.0 }}\nsource = "s"\nexample = "NCCL Unhandled System Error"\n')
    path = tmp_path / "t.toml"
    path.write_text(entry.format(flag="(?i)"))
    assert [s.id for s in load_signature_file(path)] == ["t.x"]
    path.write_text(entry.format(flag=""))
    with pytest.raises(InputFileError, match=re.escape("does not match its own example")):
        load_signature_file(path)


def test_rays_list_of_potential_causes_is_not_an_oom(explain_text):
    """Ray prints the OOM killer among the potential causes of every actor death: that is no evidence of one."""
    text = ("The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: "
            "Worker unexpectedly exits with a connection error code 2. End of file. There are some potential root "
            "causes. (1) The process is killed by SIGKILL by OOM killer due to high memory usage.\n")
    _, data = explain_text(text)
    assert data["verdict"] != "ok"
    assert "U3" not in [c for c, _ in beyond_the_ranker(data)], _ranked(data)


@pytest.mark.parametrize("where, u4_first", [
    ("on a single node with 8 A100s", False),
    ("单机8卡", False),
    ("it works on a single node but fails across two nodes", True),
])
def test_one_host_rules_out_the_network_between_nodes(explain_text, where, u4_first):
    """A store that cannot be reached is the network between nodes (U4) unless the job runs on one host."""
    text = f"training {where}\ntorch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined.\n"
    _, data = explain_text(text)
    assert (data["causes"][0]["id"] == "U4") == u4_first, _ranked(data)
