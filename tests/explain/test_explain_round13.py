"""Issue 25, thirteenth round (having read held-out slices 15 and 16): a kernel fault is the kernel's bug unless NCCL
reports it.

`an illegal memory access was encountered` (and the other sticky kernel faults: misaligned address, illegal
instruction) was read as M5 first, "a poisoned context reported later by NCCL", even where no NCCL line is in the
log. Every corpus log that prints one alone was labelled U2 by its thread (simpleRL-reason #73, nccl #393; slice 16's
DeepSpeed #3429, vllm #1518, vllm #17295, the three that came out M5 first), and none M5. So the fault alone names
U2 first, and M5 comes first only with NCCL's own failing kernel launch (`enqueue.cc ... NCCL WARN Cuda failure`)."""
import pytest

from explain_helpers import assert_top


@pytest.mark.parametrize("text", [
    "RuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be asynchronously "
    "reported at some other API call, so the stacktrace below might be incorrect.\nFor debugging consider passing "
    "CUDA_LAUNCH_BLOCKING=1\n",
    "  File \"model.py\", line 88, in forward\n    out = self.attn(q, k, v)\n"
    "torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n",
    "RuntimeError: CUDA error: misaligned address\n",
])
def test_a_kernel_fault_alone_is_the_kernels_bug(explain_text, text):
    proc, data = explain_text(text)
    assert proc.returncode == 1, proc.stderr
    assert_top(data, "U2")


def test_a_kernel_fault_that_nccl_reports_is_the_poisoned_context(explain_text):
    proc, data = explain_text(
        "node1:555:555 [0] enqueue.cc:1556 NCCL WARN Cuda failure 'an illegal memory access was encountered'\n"
        "node1:555:555 [0] NCCL INFO group.cc:245 -> 1\n"
        "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error, NCCL version 2.21.5\n"
        "ncclUnhandledCudaError: Call to CUDA function failed.\n"
        "Last error:\nCuda failure 'an illegal memory access was encountered'\n")
    assert proc.returncode == 1, proc.stderr
    assert_top(data, "M5")
