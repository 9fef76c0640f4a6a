"""Issue 25, third round: messages torch, CUDA, nvcc, flash-attn, torchvision, c10d and bash print in the failed runs
of RL and training stacks that explain did not read at all (each was `ok` or `unknown` before), named by the
cause the message itself states; and the warnings beside them that runs which went through print (in the
healthy-lines fixture) stay `ok`."""
import pytest

from explain_helpers import assert_top


@pytest.mark.parametrize("text, cause", [
    # a kernel fault alone is the kernel's or its inputs' bug; M5 (the poisoned context NCCL reports later) needs
    # NCCL's failing launch beside it (test_explain_round13.py)
    ("RuntimeError: CUDA error: misaligned address\n", "U2"),
    ("RuntimeError: CUDA error: an illegal instruction was encountered\n", "U2"),
    ("RuntimeError: FlashAttention only supports Ampere GPUs or newer.\n", "D10"),
    ("nvcc fatal   : Unsupported gpu architecture 'compute_90'\n", "D10"),
    ("RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a "
     "driver from http://www.nvidia.com/Download/index.aspx\n", "D5"),
    ("RuntimeError: Triton Error [CUDA]: out of memory\n", "U3"),
    # a CPU-only torch outranks the generic AssertionError's bug reading
    ("AssertionError: Torch not compiled with CUDA enabled\n", "U5"),
    ("RuntimeError: Error building extension 'fused_adam'\n", "C9"),
    ("OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install root.\n", "C9"),
    ("RuntimeError: Detected that PyTorch and torchvision were compiled with different CUDA major versions. PyTorch "
     "has CUDA Version=11.8 and torchvision has CUDA Version=12.1.\n", "C6"),
    ("RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and "
     "cuda:1!\n", "U2"),
    ("RuntimeError: CUDA error: operation not permitted when stream is capturing\n", "U2"),
    # the host OOM killer ended one process (U6), as node.host_oom_killer reads it; not the GPU running out (U3)
    ("./train.sh: line 12: 48211 Killed                  python train.py\n", "U6"),
])
def test_the_message_names_its_cause(explain_text, text, cause):
    proc, data = explain_text(text)
    assert proc.returncode == 1, proc.stderr
    assert_top(data, cause)


@pytest.mark.parametrize("text", [
    # 'Killed' inside a sentence or a kernel line is not bash's job report
    "INFO worker 3 killed the idle actor and went on\n",
    "[12345.678901] Killed process group cleanup finished\n",
])
def test_killed_inside_other_text_is_not_the_job_report(explain_text, text):
    _, data = explain_text(text)
    fired = {e["signature"] for c in data["causes"] for e in c["evidence"]}
    assert "node.shell_killed" not in fired, [(c["id"], c["score"]) for c in data["causes"]]
