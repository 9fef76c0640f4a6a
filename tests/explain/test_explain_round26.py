"""Issue 25, session 26: readings written from the misses of held-out slices 64-67 (in-sample for those slices)."""
import pytest

from explain_helpers import CORPUS, assert_top, fires


@pytest.mark.parametrize("line", [
    "0: ip-10-1-29-23:183654:183654 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ^docker,lo,veth",
    "export NCCL_SOCKET_IFNAME=^lo,docker0,veth",
])
def test_an_interface_named_in_an_exclusion_list_is_no_suspect_interface(line):
    # '^' makes the list one NCCL keeps away from: the veth it names is the interface it will not pick
    assert not fires("net.suspect_interface", line)


@pytest.mark.parametrize("line", [
    "node1:2211:2211 [0] NCCL INFO Bootstrap : Using veth3fa1c2:172.17.0.2<0>",
    "export NCCL_SOCKET_IFNAME=veth0",
    "NCCL picks the 169.254.3.1 link-local NIC for bootstrap",
])
def test_an_interface_nccl_picks_or_is_told_to_use_is_still_suspect(line):
    assert fires("net.suspect_interface", line)


_OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 79.18 GiB "
        "of which 9.75 GiB is free. {procs}Including non-PyTorch memory, this process has {own} memory in use. Of the "
        "allocated memory 0 bytes is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated.\n")


def _causes(data):
    return [(c["id"], c["label"]) for c in data["causes"][:3]]


def _memory_hint_for_d7(data) -> bool:
    return any(a["origin"] == "log-hint" for c in data["causes"] if c["id"] == "D7" for a in c["adjustments"])


def test_several_processes_holding_the_gpu_keep_a_left_over_process_and_the_runs_own_memory_both_open(explain_text):
    # three holders, one of them an engine the run names: its own colocated engine, or one an earlier run left
    text = ("[rollout-server pid 1327] gpu_memory_utilization=0.75: KV cache pool 59.4 GiB\n"
            + _OOM.format(procs="Process 1327 has 59.89 GiB memory in use. Process 1337 has 4.51 GiB memory in use. "
                                "Process 1338 has 4.51 GiB memory in use. ", own="518.00 MiB"))
    proc, data = explain_text(text)
    assert proc.returncode == 1, proc.stderr
    top2 = [c["id"] for c in data["causes"][:2]]
    assert set(top2) == {"D7", "U3"}, _causes(data)
    assert data["causes"][0]["label"] != "high", _causes(data)
    d7 = next(c for c in data["causes"] if c["id"] == "D7")
    assert any("other processes held 68.92 GiB" in a["reason"] for a in d7["adjustments"]), d7


def test_a_run_that_holds_the_memory_itself_is_out_of_memory_with_no_left_over_process(explain_text):
    proc, data = explain_text(_OOM.format(procs="", own="69.40 GiB"))
    assert proc.returncode == 1, proc.stderr
    assert data["top"] == "U3", _causes(data)
    assert not _memory_hint_for_d7(data)


_PROFILE = ("the current engine instance can use total_gpu_memory (139.80GiB) x gpu_memory_utilization (0.90) = "
            "125.82GiB\n"
            "model weights take {weights}GiB; non_torch_memory takes {non_torch}GiB; PyTorch activation peak memory "
            "takes 0.04GiB; the rest of the memory reserved for KV Cache is -3.55GiB.\n"
            "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
            "initializing the engine.\n")


@pytest.mark.parametrize("weights, non_torch, elsewhere", [("0.01", "129.32", True), ("120.01", "0.67", False)])
def test_an_engine_profile_names_another_holder_only_when_most_of_the_gpu_is_non_torch_memory(
        explain_text, weights, non_torch, elsewhere):
    proc, data = explain_text(_PROFILE.format(weights=weights, non_torch=non_torch))
    assert proc.returncode == 1, proc.stderr
    assert _memory_hint_for_d7(data) == elsewhere, _causes(data)
    if elsewhere:
        assert "D7" in [c["id"] for c in data["causes"][:3]], _causes(data)
        assert data["causes"][0]["label"] != "high", _causes(data)


@pytest.mark.parametrize("text, cause", [
    # a write past ulimit -f: Python ignores SIGXFSZ and gets EFBIG (a shell reports the signal itself)
    ("Traceback (most recent call last):\n  File \"train.py\", line 88, in save\n    torch.save(state, path)\n"
     "OSError: [Errno 27] File too large\n", "O2"),
    ("./run.sh: line 4: 3312 File size limit exceeded (core dumped) python train.py\n", "O2"),
    # gloo's size check, with the words pytorch/gloo #456 gave it and without them
    ("terminate called after throwing an instance of 'gloo::EnforceNotMet'\n  what():  [enforce fail at "
     "/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:456] op.preamble.length <= op.nbytes. 264196 vs 4. Received "
     "data size doesn't match expected size. Is there a distributed collective mismatch in your code?\n", "U1"),
    ("gloo::EnforceNotMet: [enforce fail at fbcode/gloo/transport/tcp/pair.cc:456] op.preamble.length <= op.nbytes. "
     "194478720 vs 4\n", "U1"),
])
def test_the_message_names_its_cause(explain_text, text, cause):
    proc, data = explain_text(text)
    assert proc.returncode == 1, proc.stderr
    assert_top(data, cause)


@pytest.mark.parametrize("sid, line", [
    ("node.file_size_limit", "INFO checkpoint too large for one file, sharding it into 4 parts"),
    ("node.file_size_limit", "file size (blocks, -f) unlimited"),
    ("gloo.size_mismatch", "[Gloo] Rank 0 is connected to 1 peer ranks. Expected number of connected peer ranks is : 1"),
])
def test_lines_that_only_look_like_them_do_not_fire(sid, line):
    assert not fires(sid, line)


def test_a_warning_that_says_after_a_comma_it_retries_another_way_is_a_failure_the_run_went_past(explain_text):
    # ComfyUI's VAE decode out of memory, retried tiled (krita-ai-diffusion #86, slice 73, read after its score)
    proc, data = explain_text("[VAE MEMORY ERROR]\nGetting this error when running any prompt:\n\nWarning: Ran out of "
                              "memory when regular decoding, retrying with tiled VAE decoding.\n")
    assert data["verdict"] == "ok" or data["causes"][0]["label"] == "low", [(c["id"], c["label"]) for c in data["causes"]]


def test_a_comma_without_a_fallback_after_it_is_still_a_failure(explain_text):
    proc, data = explain_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB, retries "
                              "exhausted\nWARNING: ran out of memory in the backward pass, aborting the run\n")
    assert proc.returncode == 1
    assert_top(data, "U3")


def test_a_symbol_another_library_cannot_find_keeps_the_build_and_the_driver_open(explain_text):
    # cuDNN's cudaErrorSymbolNotFound in a container (alphafold3 #79, slice 75, read after its score: a host driver
    # too old): a kernel image for another architecture stays first, but not as NCCL's launch failure is
    proc, data = explain_text("E1119 10:37:39.248565  283298 cuda_dnn.cc:502] There was an error before creating cudnn "
                              "handle (500): cudaErrorSymbolNotFound : named symbol not found\n"
                              "jaxlib.xla_extension.XlaRuntimeError: FAILED_PRECONDITION: DNN library initialization "
                              "failed. Look at the errors above for more details.\n")
    assert proc.returncode == 1, proc.stderr
    ids = [c["id"] for c in data["causes"][:3]]
    assert ids[0] == "D10" and "D9" in ids, [(c["id"], c["label"]) for c in data["causes"]]
    assert data["causes"][0]["label"] != "high", [(c["id"], c["label"]) for c in data["causes"]]
    line = "c76d92cccb6e:72:457 [1] enqueue.cc:47 NCCL WARN Cuda failure 'named symbol not found'"
    assert fires("nccl.named_symbol", line) and not fires("cuda.named_symbol", line)


@pytest.mark.parametrize("text, cause", [
    # nvidia-container-cli waiting on a driver that re-initialises for every client (nvidia-docker #628, #723)
    ("docker: Error response from daemon: OCI runtime create failed: container_linux.go:348: starting container "
     "process caused \"process_linux.go:402: container init caused \\\"running prestart hook 1 caused \\\\\\\"error "
     "running hook: exit status 1, stdout: , stderr: nvidia-container-cli: initialization error: driver error: timed "
     "out\\\\\\\\n\\\\\\\"\\\"\": unknown.\n", "D6"),
    # DeepSpeed's launcher killing the rest after one worker exited 1 (LlamaFactory #2444)
    ("[2024-02-18 10:02:11,114] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python', '-u', 'train_bash.py', "
     "'--stage', 'ppo'] exits with return code = 1\n", "U6"),
    # ... and one that died of SIGBUS: the code is the signal (DeepSpeed #4000, #4002)
    ("[2023-07-20 15:45:13,980] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 3966\n"
     "[2023-07-20 15:45:13,982] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python3', '-u', 'main.py'] exits "
     "with return code = -7\n", "O1"),
])
def test_launchers_and_the_container_toolkit_name_the_cause(explain_text, text, cause):
    proc, data = explain_text(text)
    assert proc.returncode == 1, proc.stderr
    assert_top(data, cause)
    assert data["causes"][0]["evidence"], "named from a line's own evidence, not the learned ranker's guess alone"


def test_a_tool_without_support_for_the_gpus_compute_capability_is_no_package_conflict():
    line = ("W external/xla/xla/stream_executor/cuda/cuda_asm_compiler.cc:280] Falling back to the CUDA driver for PTX "
            "compilation; ptxas does not support CC 12.0")
    assert not fires("prose.version_conflict", line)
    assert fires("prose.version_conflict", "[Bug] latest flashinferv0.2.1.whl is not compatible with sglang>=v0.4.3 whl")


@pytest.mark.parametrize("text", [
    "ModuleNotFoundError: No module named 'fused_layer_norm_cuda'\n",
    "  File \"/usr/local/lib/python3.10/dist-packages/apex/optimizers/fused_adam.py\", line 117, in __init__\n"
    "    raise RuntimeError('apex.optimizers.FusedAdam requires cuda extensions')\n"
    "RuntimeError: apex.optimizers.FusedAdam requires cuda extensions\n",
    "ModuleNotFoundError: No module named 'mmcv._ext'\n",
])
def test_a_package_without_its_compiled_extension_is_a_native_build_not_a_missing_package(explain_text, text):
    proc, data = explain_text(text)
    assert proc.returncode == 1, proc.stderr
    assert_top(data, "C9")


@pytest.mark.parametrize("line", ["ModuleNotFoundError: No module named 'flash_attn'",
                                  "ModuleNotFoundError: No module named 'torch._C'"])
def test_a_missing_package_or_torch_from_its_source_tree_stays_a_missing_module(line):
    assert fires("py.module_not_found", line) and not fires("py.native_extension_missing", line)


def test_a_server_that_comes_up_went_past_what_failed_while_it_started(explain_text):
    # gpu-s26-06 (slice 68, read after its score): a Triton block size that fails to compile, logged with its
    # traceback, rebuilt, then "warm-up complete ... server ready"
    text = (CORPUS / "gpu-s26-06.log").read_text()
    proc, data = explain_text(text)
    assert proc.returncode == 0 and data["verdict"] == "ok", [(c["id"], c["label"]) for c in data["causes"]]
    assert any(r["completion_signature"] == "serve.ready" for r in data["recovered"]["shown"]), data["recovered"]
    # what fails after the server came up still counts
    proc, data = explain_text(text + "Traceback (most recent call last):\n  File \"serve.py\", line 9, in handle\n"
                              "RuntimeError: CUDA error: an illegal memory access was encountered\n")
    assert proc.returncode == 1 and data["verdict"] != "ok"
