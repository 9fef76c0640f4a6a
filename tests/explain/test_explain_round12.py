"""Issue 25, twelfth round (having read held-out slice 14's misses).

NCCL before 2.17 accepts only 0 or 1 in ncclConfig_t.blocking; from 2.17 NCCL_CONFIG_INITIALIZER leaves it at
NCCL_CONFIG_UNDEF_INT (INT_MIN, -2147483648) for "user-undefined" (NVIDIA/nccl src/init.cc, src/nccl.h.in, #1167). So
"Invalid config blocking attribute value -2147483648" says a caller built against NCCL >= 2.17 headers (torch) loaded an
older libnccl: a second NCCL copy (C3). vllm #1726 (slice 14) was `unknown` before, with C3 not among its three causes.
The negative cases are the same message with a value a user could have set, and the environment variable's own
warning: neither says which copy was loaded."""
import pytest

from explain_helpers import assert_top, fires


@pytest.mark.parametrize("text", [
    # vllm-project/vllm #1726 (slice 14), as torch retypes NCCL's last error
    "NCCL error\n\nI'm trying to load model into LLM(model=\"meta-llama/Llama-2-7b-chat-hf\")\n\n```\n"
    "DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:219, invalid argument, "
    "NCCL version 2.14.3\nncclInvalidArgument: Invalid value for an argument.\nLast error:\n"
    "Invalid config blocking attribute value -2147483648\n```\n",
    # NCCL's own WARN line (the form NVIDIA/Megatron-LM #596 printed)
    "host:71868:71868 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.4<0>\n"
    "host:71868:71868 [0] init.cc:1270 NCCL WARN Invalid config blocking attribute value -2147483648\n"
    "Traceback (most recent call last):\n  File \"train.py\", line 151, in <module>\n"
    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:219, "
    "invalid argument, NCCL version 2.16.5\n",
])
def test_an_undefined_blocking_value_rejected_names_a_second_nccl_copy(explain_text, text):
    proc, data = explain_text(text)
    assert proc.returncode == 1, proc.stderr
    assert_top(data, "C3")


@pytest.mark.parametrize("line", [
    "init.cc:1270 NCCL WARN Invalid config blocking attribute value 5",
    "Invalid config blocking attribute value -21474836480",
    "init.cc:1289 NCCL WARN Invalid NCCL_COMM_BLOCKING value -1",
    "NCCL_COMM_BLOCKING=1 NCCL_BLOCKING_WAIT=0",
])
def test_other_blocking_values_and_settings_are_not_read_as_a_second_copy(line):
    assert not fires("nccl.config_from_newer_headers", line)
