"""Issue 25, seventeenth round (having read held-out slices 24 and 25, after their untouched scores).

Each reading is tested on text from the corpus log it was written from AND on a second real example or a
paraphrase, with a negative twin that must not fire:

1. WSL2 with CUDA reporting no device at init (cuInit CUDA_ERROR_NO_DEVICE, "No CUDA GPUs are available",
   is_available() False) is a non-WSL libcuda shadowing /usr/lib/wsl/lib: C1 (numba #9032, cuml #5624, #6218);
   a libcuda path outside /usr/lib/wsl/lib printed under WSL adds to it.
2. Open MPI's CMA read refused, "Read -1, expected N, errno = 1" (EPERM), is the ptrace capability a container
   drops: O3 (ompi #4948, horovod #300).
3. A native extension built for another torch ("built for PyTorch X ... (you have Y)", "can't load C++/CUDA
   extensions", "wasn't build with CUDA support"): C9 (Firefly #258, PromptHMR #4).
4. A CUDA-versioned library file of a native package not found (libbitsandbytes_cuda122.so): C10, and a failure
   even when it is the whole log (bitsandbytes #551, #1518).
5. MIG: a MIG profile name or nvidia-smi's MIG-on row with a failure: D8 (pytorch #130181, gpu-operator #382).
6. "The requested device ... is not available": C11 (trl #2826).
7. An architecture missing from a kernel library (KeyError 'sm_75'), an invalid device symbol on a card the
   library reports incompatible, a card below a framework's minimum (a pre-Kepler card, TensorFlow's minimum
   capability line): D10 (mini-sglang #128, emgucv #376, tensorflow #8006).
8. CUDA failing after resume from suspend: D4 (pop-os/default-settings PR #64, mumax3 #167).
9. A single-node run that hangs past two GPUs and works with two: an N1 hint (nccl #1706, nccl-tests #216).
10. Healthy: the tokenizer's "will result in indexing errors" warning of a finished benchmark is not a failure
    (vllm #359); a pod in CrashLoopBackOff is one (gpu-operator #389, #1947)."""
import pytest

from explain_helpers import CORPUS, assert_top, fires


def _corpus(name: str) -> str:
    return (CORPUS / name).read_text(encoding="utf-8")


# The reading each case above goes through, by the prefix of its id.
READING = {
    "wsl": "cuda.wsl_init_no_device",
    "cma": "mpi.cma_not_permitted",
    "built-for": "py.native_built_for_other_torch",
    "cuda-lib": "cuda.versioned_library_not_found",
    "mig-pytorch": "gpu.mig_profile",
    "mig-profile": "gpu.mig_profile",
    "mig-gpu-operator": "gpu.mig_mode_on",
    "mig-smi": "gpu.mig_mode_on",
    "requested-device": "cuda.requested_device_unavailable",
    "arch-key": "cuda.arch_missing_from_kernel_library",
    "invalid-symbol": "cuda.invalid_device_symbol",
    "old-card": "gpu.pre_kepler",
    "tf-minimum": "cuda.below_min_capability",
    "resume": "prose.after_resume",
    "hang-past-two": "prose.hang_beyond_two_gpus",
}


# --- the readings name their cause, on the log they were written from and on a second text -------------------

@pytest.mark.parametrize("text, cause", [
    # 1. WSL2 + no device at init
    (_corpus("cuml-6218.log"), "C1"),
    (_corpus("numba-9032.log"), "C1"),
    (_corpus("cuml-5624.log"), "C1"),
    ("torch.cuda.is_available() returns False on Ubuntu 22.04 under WSL2, nvidia-smi works\n"
     "RuntimeError: No CUDA GPUs are available\n", "C1"),
    # 2. Open MPI CMA EPERM
    (_corpus("horovod-300.log"), "O3"),
    (_corpus("ompi-4948.log"), "O3"),
    # 3. a native extension built for another torch
    (_corpus("Firefly-258.log"), "C9"),
    (_corpus("PromptHMR-4.log"), "C9"),
    ("NotImplementedError: No operator found for `memory_efficient_attention_forward` with inputs:\n"
     "WARNING[XFORMERS]: xFormers can't load C++/CUDA extensions. xFormers was built for:\n"
     "    PyTorch 2.0.1+cu118 with CUDA 1108 (you have 2.1.0+cu121)\n", "C9"),
    ("ImportError: this extension was built against torch 2.1.0 but the installed version is 2.3.1\n"
     "RuntimeError: my_ops was built for CUDA 11.8 but you have CUDA 12.1\n", "C9"),
    # 4. a CUDA-versioned library file not found
    (_corpus("bitsandbytes-551.log"), "C10"),
    (_corpus("bitsandbytes-1518.log"), "C10"),
    ("Could not find the bitsandbytes CUDA binary at PosixPath('/usr/local/lib/python3.12/dist-packages/bitsandbytes/"
     "libbitsandbytes_cuda129.so')\nThe installed version of bitsandbytes was compiled without GPU support.\n", "C10"),
    # 5. MIG
    (_corpus("pytorch-130181.log"), "D8"),
    (_corpus("gpu-operator-382.log"), "D8"),
    ("[Vector addition of 50000 elements] Failed to allocate vector A (error code initialization error)!\n"
     "|   0  NVIDIA A100-SXM4-80GB          Off |   00000000:00:06.0 Off |                   On |\n"
     "| N/A   29C    P0             51W /  400W |       1MiB /  81920MiB |     N/A      Default |\n"
     "|                                         |                        |              Enabled |\n", "D8"),
    ("torch.distributed fails on MIG 1g.10gb instances: RuntimeError: NCCL error in: ProcessGroupNCCL.cpp, "
     "invalid usage\n", "D8"),
    # 6. the requested device is not available
    (_corpus("trl-2826.log"), "C11"),
    ("RuntimeError: The requested GPU cuda:2 is not available on this host\n", "C11"),
    # 7. an architecture the build lacks
    (_corpus("mini-sglang-128.log"), "D10"),
    ("  File \"/usr/lib/python3/site-packages/flashinfer/jit/core.py\", line 88, in check_cuda_arch\n"
     "KeyError: 'sm_120'\n", "D10"),
    (_corpus("emgucv-376.log"), "D10"),
    ("terminate called after throwing an instance of 'thrust::system::system_error'\n"
     "  what():  radix_sort: failed on 2nd step: cudaErrorInvalidSymbol: invalid device symbol\n", "D10"),
    (_corpus("tensorflow-8006.log"), "D10"),
    ("I tensorflow/core/common_runtime/gpu/gpu_device.cc:1700] Ignoring visible gpu device (device: 0, name: GeForce "
     "GT 730, pci bus id: 0000:01:00.0, compute capability: 3.5) with Cuda compute capability 3.5. The minimum "
     "required Cuda capability is 3.7.\n", "D10"),
    ("cudaGetDevice failed on a GeForce GTX 480 with CUDA 11.0\n", "D10"),
    # 8. after resume from suspend
    (_corpus("default-settings-64.log"), "D4"),
    (_corpus("mumax3-167.log"), "D4"),
    # 9. hangs past two GPUs
    (_corpus("nccl-1706.log"), "N1"),
    ("all_reduce works fine with 2 GPUs but hangs with 8 GPUs on our HGX node\n", "N1"),
], ids=["wsl-cuml-6218", "wsl-numba-9032", "wsl-cuml-5624", "wsl-paraphrase",
        "cma-horovod-300", "cma-ompi-4948",
        "built-for-firefly-258", "built-for-prompthmr-4", "built-for-other-xformers", "built-for-paraphrase",
        "cuda-lib-bnb-551", "cuda-lib-bnb-1518", "cuda-lib-bnb-new-wording",
        "mig-pytorch-130181", "mig-gpu-operator-382", "mig-smi-table", "mig-profile-paraphrase",
        "requested-device-trl-2826", "requested-device-paraphrase",
        "arch-key-mini-sglang-128", "arch-key-sm-120", "invalid-symbol-emgucv-376", "invalid-symbol-thrust",
        "old-card-tensorflow-8006", "tf-minimum-capability", "old-card-gtx-480",
        "resume-default-settings-64", "resume-mumax3-167", "hang-past-two-nccl-1706", "hang-past-two-paraphrase"])
def test_the_seventeenth_rounds_readings_name_their_cause(request, explain_text, text, cause):
    """The cause first, and through the round's own reading: the shipped ranker has learned the corpus logs, so a
    right answer alone would not show that the reading fires."""
    proc, data = explain_text(text)
    assert proc.returncode == 1, proc.stderr
    assert_top(data, cause)
    case = request.node.callspec.id
    reading = next(sid for prefix, sid in READING.items() if case.startswith(prefix))
    assert reading in [e["signature"] for e in data["causes"][0]["evidence"]], data["causes"][0]["evidence"]


def test_a_wsl_libcuda_outside_the_wsl_folder_adds_to_c1(explain_text):
    """The path is evidence beside the init failure, not alone."""
    base = "Running under WSL2\nnumba.cuda.cudadrv.error.CudaSupportError: Error at driver init: Call to cuInit " \
           "results in CUDA_ERROR_NO_DEVICE (100)\n"
    _, plain = explain_text(base)
    _, with_path = explain_text(base + "libcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1\n")
    score = {d: next(c["score"] for c in r["causes"] if c["id"] == "C1") for d, r in (("p", plain), ("w", with_path))}
    assert score["w"] > score["p"]


def test_hang_past_two_on_a_nvls_node_adds_to_the_nvls_reading(explain_text):
    proc, data = explain_text(_corpus("nccl-tests-216.log"))
    assert_top(data, "N1")
    assert "prose.hang_beyond_two_gpus" in [e["signature"] for e in data["causes"][0]["evidence"]]


# --- negative twins ---------------------------------------------------------------------------------------------

def test_no_device_without_wsl_stays_device_visibility(explain_text):
    proc, data = explain_text("numba.cuda.cudadrv.driver.CudaAPIError: [100] Call to cuInit results in "
                              "CUDA_ERROR_NO_DEVICE\n")
    assert data["top"] != "C1" and "C1" not in [c["id"] for c in data["causes"]]


@pytest.mark.parametrize("text", [
    "Linux version 5.15.167.4-microsoft-standard-WSL2\n"
    "/sbin/ldconfig.real: /usr/lib/wsl/lib/libcuda.so.1 is not a symbolic link\n",
    # a healthy run on a MIG instance lists it
    "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)\n"
    "  MIG 3g.20gb     Device  0: (UUID: MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f)\n",
    # vllm #359: a benchmark that finished, with the tokenizer's warning
    _corpus("vllm-359.log"),
    # bitsandbytes loading the build it has
    "CUDA SETUP: Loading binary /opt/conda/lib/python3.10/site-packages/bitsandbytes/libbitsandbytes_cuda117.so...\n",
    # Open MPI's CMA warning: it falls back to another single-copy mechanism and the run goes on
    "WARNING: Linux kernel CMA support was requested via the btl_vader_single_copy_mechanism MCA variable, but CMA "
    "support is not available due to restrictive ptrace settings.\n"
    "The vader shared memory BTL will fall back on another single-copy mechanism if one is available. This may "
    "result in lower performance.\nHello World! from rank 0\n",
    # a pod list with every pod running
    "NAME                                       READY   STATUS      RESTARTS   AGE\n"
    "nvidia-cuda-validator-ccn65                0/1     Completed   0          28m\n"
    "gpu-feature-discovery-cqjqx                1/1     Running     0          28m\n",
], ids=["wsl-kernel-and-ldconfig", "mig-listing", "vllm-359-benchmark", "bnb-loading-its-build",
         "ompi-cma-warning", "pods-running"])
def test_healthy_twins_are_ok(explain_text, text):
    proc, data = explain_text(text)
    assert proc.returncode == 0 and data["verdict"] == "ok" and data["causes"] == [], \
        (data["verdict"], [(c["id"], c["score"]) for c in data["causes"]])


@pytest.mark.parametrize("text", [_corpus("gpu-operator-389.log"), _corpus("gpu-operator-1947.log")],
                         ids=["gpu-operator-389", "gpu-operator-1947"])
def test_a_pod_in_crashloopbackoff_is_a_failure(explain_text, text):
    proc, data = explain_text(text)
    assert proc.returncode == 1 and data["verdict"] != "ok"


@pytest.mark.parametrize("sid, line, hit", [
    ("mpi.cma_not_permitted", "[96c7e3d99641:24984] Read -1, expected 122880, errno = 1", True),
    ("mpi.cma_not_permitted", "[96c7e3d99641:24984] Read -1, expected 122880, errno = 11", False),
    ("py.native_built_for_other_torch", "    PyTorch 2.3.0+cu121 with CUDA 1201 (you have 2.1.0+cu121)", True),
    ("py.native_built_for_other_torch", "    xFormers wasn't build with CUDA support", True),
    ("py.native_built_for_other_torch", "xFormers 0.0.26.post1", False),
    ("py.native_built_for_other_torch", "pytorch.version:                                  2.3.0+cu121", False),
    ("py.native_built_for_other_torch", "AssertionError: Torch was not built with CUDA support", False),
    ("cuda.versioned_library_not_found", "Required library version not found: libbitsandbytes_cuda124_nocublaslt.so",
     True),
    ("cuda.versioned_library_not_found", "bin /opt/conda/lib/python3.10/site-packages/bitsandbytes/"
     "libbitsandbytes_cuda122.so", False),
    ("cuda.versioned_library_not_found", "W tensorflow/stream_executor/platform/default/dso_loader.cc:64] Could not "
     "load dynamic library 'libcudart_cuda110.so'; dlerror: not found", False),
    ("gpu.mig_mode_on", "|   0  NVIDIA A30          On   | 00000000:17:00.0 Off |                   On |", True),
    ("gpu.mig_mode_on", "|                                         |                        |              Enabled |",
     True),
    ("gpu.mig_mode_on", "|   0  NVIDIA H200                    On  |   00000000:00:06.0 Off |                    0 |",
     False),
    ("gpu.mig_mode_on", "|                                         |                        |             Disabled |",
     False),
    ("gpu.mig_mode_on", "|   0  NVIDIA GeForce RTX 3060        Off |   00000000:81:00.0  On |                  N/A |",
     False),
    ("cuda.requested_device_unavailable", "The requested device cuda:0 is available", False),
    ("cuda.requested_device_unavailable", "ValueError: The requested GPU memory utilization (0.9) is not available "
     "on this device", False),
    ("cuda.arch_missing_from_kernel_library", "KeyError: 'model.layers.0.weight'", False),
    ("cuda.device_reported_incompatible", "[Bug] latest flashinferv0.2.1.whl is not compatible with sglang>=v0.4.3 whl",
     False),
    ("gpu.pre_kepler", "CPU: AMD FX-8350 Eight-Core Processor", False),
    ("gpu.pre_kepler", "AMD FX 8350 with a GeForce GTX 1080", False),
    ("gpu.pre_kepler", "cuDNN requires compute capability 2.0 or higher", False),
    ("gpu.pre_kepler", "this build supports GPUs with compute capability 2.0 and above", False),
    ("gpu.pre_kepler", "GPU 0: NVIDIA GeForce RTX 3090, compute capability 8.6", False),
    ("gpu.pre_kepler", "Device 0: \"Quadro FX 5800\"", True),
    ("prose.after_resume", "CUDA_ERROR_UNKNOWN after wake from suspend", True),
    ("prose.after_resume", "[Bug] Error when resume_memory_occupation", False),
    ("prose.after_resume", "[1084456.886524] xhci_hcd 0000:09:00.2: PCI post-resume error -19!", False),
    ("prose.after_resume", "torch_memory_saver: resume failed after pause", False),
    ("prose.hang_beyond_two_gpus", "hangs with 2 GPUs but works with 4 GPUs", False),
    ("prose.hang_beyond_two_gpus", "it hangs with 4 GPUs", False),
    ("prose.hang_beyond_two_gpus", "torchrun with 8 processes gets stuck, while 2 processes work", True),
    ("prose.failure", "Token indices sequence length is longer than the specified maximum sequence length for this "
     "model (3152 > 2048). Running this sequence through the model will result in indexing errors", False),
    ("prose.failure", "RuntimeError: indexing errors in the dataloader", True),
])
def test_what_each_new_reading_does_and_does_not_read(sid, line, hit):
    assert fires(sid, line) is hit
