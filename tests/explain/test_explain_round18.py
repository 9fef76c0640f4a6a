"""Issue 25, eighteenth round (having read held-out slices 28 and 29, after their untouched scores).

Each reading is tested on text from the corpus log it was written from AND on a second real example or a
paraphrase, with a negative twin that must not fire:

1. An API exception (TypeError, AttributeError, NameError, a dispatch failure) raised with every traceback frame
   inside installed packages, none in the user's code: one package calls another of another version, U5 (a hint
   from the frames, explain/context.py; unsloth #2148, #741). A frame of the user's code, or a first exception of
   another kind, leaves it alone.
2. A "built for PyTorch X (you have Y)" line whose installed torch is a CPU build (+cpu): torch is the wrong wheel,
   U5, not the extension, C9 (PIA #30).
3. A container started without its GPU flag (docker run without --gpus, Singularity/Apptainer without --nv): CUDA
   then finds no driver or device, C11; nvidia-smi present inside such a container means the image ships driver
   files, C1 (manylinux-cuda #5).
4. "Loaded runtime CuDNN library: X but source was compiled with: Y": C10 (jax #16901, segmentation_keras #32,
   voxelnet #50).
5. CUDA_ERROR_UNSUPPORTED_PTX_VERSION (222) by its driver-API name: D9 (openmm #3598).
6. nvidia-smi's ERR! cells: a GPU in a fault state, D3 (dcgm-exporter #46).
7. nvidia-container-cli's "nvml error: unknown error" and "driver error: failed to process request": the host's
   driver install, D2 (nvidia-docker #1348, #1137); a container whose hook failed never started, so the docker run
   line's /dev/shm (O1) is ruled out.
8. A performance shortfall ("cannot reach the theoretical bus bandwidth") of a finished nccl-tests run is no
   failure (nccl-tests #232); a real failure beside the table still is.
9. nvcc's "Unsupported gpu architecture" also misspelt ("architechture"): D10 (Finetune_LLMs #20).
10. A hang at 0 % GPU utilisation: a U4 hint (horovod #1221); a test that "will be stalled" on Tesla M40s (no
    NVLink): N3 through the PCIe reading (nccl #104).
11. "invalid device ordinal" outranks a reporter's "incompatible" (training #442): C11."""
import pytest

from explain_helpers import CORPUS, assert_top, fires


def _corpus(name: str) -> str:
    return (CORPUS / name).read_text(encoding="utf-8")


FRAMES = "every traceback frame inside installed packages"

# The reading each case goes through, by the prefix of its id ("frames" is the context adjustment of reading 1).
READING = {
    "frames": FRAMES,
    "cpu-torch": "py.extension_sees_cpu_torch",
    "no-gpu-flag": "container.no_gpu_flag_no_device",
    "smi-in-image": "container.driver_files_in_image",
    "cudnn": "cuda.runtime_library_older_than_build",
    "ptx": "cuda.ptx_toolchain",
    "err-state": "gpu.smi_err_state",
    "nvml-unknown": "container.toolkit_nvml_unknown",
    "driver-error": "container.toolkit_driver_error",
    "arch": "cuda.arch_unsupported",
    "stalled": "topo.p2p_symptom",
    "ordinal": "cuda.invalid_ordinal",
}

_PKG_TRACEBACK = (
    "Traceback (most recent call last):\n"
    "  File \"/opt/conda/lib/python3.10/site-packages/transformers/trainer.py\", line 1539, in train\n"
    "    return inner_training_loop(\n"
    "  File \"/opt/conda/lib/python3.10/site-packages/peft/tuners/lora/layer.py\", line 412, in forward\n"
    "    result = self.base_layer(x, *args, **kwargs)\n"
    "TypeError: forward() takes 2 positional arguments but 3 were given\n")
_USER_FRAME = "  File \"/home/me/project/train.py\", line 88, in <module>\n    trainer.train()\n"


@pytest.mark.parametrize("text, cause", [
    # 1. an API exception raised wholly inside installed packages
    (_corpus("unsloth-2148.log"), "U5"),
    (_corpus("unsloth-741.log"), "U5"),
    (_PKG_TRACEBACK, "U5"),
    ("Traceback (most recent call last):\n"
     "  File \"/root/miniconda3/envs/unsloth_env/lib/python3.11/site-packages/unsloth/models/vision.py\", line 230, "
     "in from_pretrained\n"
     "  File \"/root/miniconda3/envs/unsloth_env/lib/python3.11/site-packages/accelerate/big_modeling.py\", line 61, "
     "in init_empty_weights\n"
     "NameError: name 'is_torch_version' is not defined\n", "U5"),
    # 2. the extension sees a CPU torch
    (_corpus("PIA-30.log"), "U5"),
    ("WARNING[XFORMERS]: xFormers can't load C++/CUDA extensions. xFormers was built for:\n"
     "    PyTorch 2.0.1+cu118 with CUDA 1108 (you have 2.0.1+cpu)\n", "U5"),
    # 3. a container without its GPU flag
    (_corpus("manylinux-cuda-5.log"), "C1"),
    ("$ docker run -it --rm myorg/cuda-builder:12.2 bash\nroot@4f1c2a:/# nvidia-smi\n"
     "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA "
     "driver is installed and running.\n", "C1"),
    ("$ singularity exec dorado.sif dorado basecaller dna_r10.4.1_e8.2_400bps_sup@v4.0.0 pod5/ > calls.bam\n"
     "[2023-03-07 09:00:00.361] [error] CUDA error: CUDA driver version is insufficient for CUDA runtime version\n",
     "C11"),
    ("$ docker run --rm pytorch/pytorch:2.1.0-cuda12.1-cudnn8-runtime python -c \"import torch; torch.zeros(1).cuda()\"\n"
     "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a "
     "driver from http://www.nvidia.com/Download/index.aspx\n", "C11"),
    # 4. a CUDA library loaded at another version than the build's
    (_corpus("jax-16901.log"), "C10"),
    (_corpus("segmentation_keras-32.log"), "C10"),
    (_corpus("voxelnet-50.log"), "C10"),
    ("E external/xla/xla/stream_executor/cuda/cuda_dnn.cc:439] Loaded runtime CuDNN library: 8.2.1 but source was "
     "compiled with: 8.6.0.  CuDNN library needs to have matching major version and equal or higher minor version.\n",
     "C10"),
    # 5. PTX 222 by its driver-API name
    (_corpus("openmm-3598.log"), "D9"),
    ("RuntimeError: Triton Error [CUDA]: cuModuleLoadData failed: CUDA_ERROR_UNSUPPORTED_PTX_VERSION\n", "D9"),
    # 6. a GPU in the ERR! state
    (_corpus("dcgm-exporter-46.log"), "D3"),
    ("|   3  NVIDIA A100-SXM4-80GB          On  | 00000000:4E:00.0 Off |                  ERR! |\n"
     "| N/A   ERR!   P0             ERR! / 400W |  0MiB / 81920MiB    |     ERR!      Default |\n"
     "nvidia-container-cli: detection error: nvml error: unknown error: unknown.\n", "D3"),
    # 7. the container toolkit on a broken host driver
    (_corpus("nvidia-docker-1348.log"), "D2"),
    (_corpus("nvidia-docker-1137.log"), "D2"),
    ("$ sudo docker run --rm --gpus all nvidia/cuda:11.8.0-base-ubuntu22.04 nvidia-smi\n"
     "docker: Error response from daemon: failed to create shim task: OCI runtime create failed: runc create failed: "
     "unable to start container process: error during container init: error running hook #0: error running hook: "
     "exit status 1, stdout: , stderr: Auto-detected mode as 'legacy'\n"
     "nvidia-container-cli: detection error: driver error: failed to process request: unknown.\n", "D2"),
    # 9. nvcc's architecture error, however it is spelt
    (_corpus("Finetune_LLMs-20.log"), "D10"),
    ("nvcc fatal : Unsupported gpu architecure 'compute_86' when building apex in the docker image\n", "D10"),
    # 10. stalled on PCIe Teslas
    (_corpus("nccl-104.log"), "N3"),
    ("./build/all_reduce_perf -b 8 -e 128M -f 2 -g 4 on 4x Tesla K80 stalls right after printing the header\n", "N3"),
    # 11. invalid device ordinal over the word "incompatible"
    (_corpus("training-442.log"), "C11"),
    ("The launcher seems incompatible with our scheduler's GPU binding.\n"
     "RuntimeError: CUDA error: invalid device ordinal\n", "C11"),
], ids=["frames-unsloth-2148", "frames-unsloth-741", "frames-peft-paraphrase", "frames-conda-nameerror",
        "cpu-torch-pia-30", "cpu-torch-xformers-paraphrase",
        "smi-in-image-manylinux-5", "smi-in-image-paraphrase", "no-gpu-flag-singularity", "no-gpu-flag-docker",
        "cudnn-jax-16901", "cudnn-segmentation-keras-32", "cudnn-voxelnet-50", "cudnn-xla-paraphrase",
        "ptx-openmm-3598", "ptx-triton-paraphrase",
        "err-state-dcgm-46", "err-state-smi-table",
        "nvml-unknown-nvidia-docker-1348", "driver-error-nvidia-docker-1137", "driver-error-containerd-paraphrase",
        "arch-finetune-llms-20", "arch-misspelt-paraphrase",
        "stalled-nccl-104", "stalled-k80-paraphrase",
        "ordinal-training-442", "ordinal-paraphrase"])
def test_the_eighteenth_rounds_readings_name_their_cause(request, explain_text, text, cause):
    """The cause first, and through the round's own reading (a right answer alone would not show that it fires)."""
    proc, data = explain_text(text)
    assert proc.returncode == 1, proc.stderr
    assert_top(data, cause)
    case = request.node.callspec.id
    reading = next(r for prefix, r in READING.items() if case.startswith(prefix))
    top = data["causes"][0]
    seen = [e["signature"] for e in top["evidence"]] + [a["reason"] for a in top["adjustments"]]
    assert any(reading in s for s in seen), seen


def test_the_horovod_hang_at_zero_utilisation_leans_to_the_network(explain_text):
    """A hint only (U4 1.0): the reading is in U4's evidence and U4 leads; the verdict rests on it with the ranker."""
    proc, data = explain_text(_corpus("horovod-1221.log"))
    assert proc.returncode == 1 and data["causes"][0]["id"] == "U4"
    assert "prose.hang_idle_gpus" in [e["signature"] for e in data["causes"][0]["evidence"]]
    _, para = explain_text("Training across 2 nodes hangs at the first allreduce; nvidia-smi shows 0% GPU utilization "
                           "on every GPU while memory is allocated.\n")
    u4 = [c for c in para["causes"] if c["id"] == "U4"]
    assert u4 and "prose.hang_idle_gpus" in [e["signature"] for e in u4[0]["evidence"]]


def test_a_container_that_never_started_rules_out_its_shm(explain_text):
    proc, data = explain_text(_corpus("nvidia-docker-1137.log"))
    o1 = [c for c in data["causes"] if c["id"] == "O1"]
    assert o1 and "container.hook_failed" in o1[0]["ruled_out_by"] and o1[0]["score"] < 1.0


# --- negative twins ---------------------------------------------------------------------------------------------

def test_a_user_frame_leaves_the_exception_to_the_code(explain_text):
    """The same TypeError with the user's script among the frames: no U5 hint, U2 as before."""
    text = _PKG_TRACEBACK.replace("Traceback (most recent call last):\n", "Traceback (most recent call last):\n"
                                  + _USER_FRAME)
    _, data = explain_text(text)
    assert_top(data, "U2")
    assert not any(FRAMES in a["reason"] for c in data["causes"] for a in c["adjustments"])


def test_an_api_error_after_another_first_failure_is_not_read(explain_text):
    """DeepSpeed #1077: the CUDA check's Exception failed first; the AttributeError in __del__ follows it (C9)."""
    _, data = explain_text(_corpus("DeepSpeed-1077.log"))
    assert_top(data, "C9")
    assert not any(FRAMES in a["reason"] for c in data["causes"] for a in c["adjustments"])


def test_a_cuda_torch_beside_the_extension_stays_the_extension(explain_text):
    _, data = explain_text("xFormers can't load C++/CUDA extensions. xFormers was built for:\n"
                           "    PyTorch 2.1.2+cu121 with CUDA 1201 (you have 2.1.2+cu118)\n")
    assert_top(data, "C9")


@pytest.mark.parametrize("text, not_cause", [
    # the GPU flag given: the driver error keeps its own reading
    ("$ singularity exec --nv dorado.sif dorado basecaller model pod5/\n"
     "[error] CUDA error: CUDA driver version is insufficient for CUDA runtime version\n", "C11"),
    ("$ docker run --gpus all -it myorg/cuda-builder:12.2 nvidia-smi\n"
     "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA "
     "driver is installed and running.\n", "C1"),
    ("$ nvidia-docker run --rm nvidia/cuda nvidia-smi\n"
     "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", "C1"),
    # no container at all
    ("[error] CUDA error: CUDA driver version is insufficient for CUDA runtime version\n", "C11"),
], ids=["singularity-with-nv", "docker-with-gpus", "nvidia-docker", "no-container"])
def test_with_the_gpu_flag_the_container_readings_stay_silent(explain_text, text, not_cause):
    _, data = explain_text(text)
    assert data["top"] != not_cause
    assert not any(e["signature"].startswith("container.") for c in data["causes"] for e in c["evidence"])


def test_shm_still_counts_where_the_container_ran(explain_text):
    """O1's docker run reading is ruled out only where a hook failed: a bus error inside a running container keeps it."""
    _, data = explain_text("docker run -it --gpus all -v /data:/data nvcr.io/nvidia/pytorch:23.09-py3\n"
                           "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient "
                           "shared memory (shm).\n")
    assert_top(data, "O1")
    assert "os.docker_default_shm" in [e["signature"] for e in data["causes"][0]["evidence"]]


@pytest.mark.parametrize("text", [
    _corpus("nccl-tests-232.log"),
    "all_reduce_perf on 8x H100 cannot reach the expected 450 GB/s, we only get 360\n"
    "   134217728      33554432     float     sum      -1    649.7  206.59  361.54      0    648.9  206.84  361.97      0\n"
    "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 361.54\n",
], ids=["nccl-tests-232", "bandwidth-shortfall-paraphrase"])
def test_a_finished_table_with_a_bandwidth_complaint_is_ok(explain_text, text):
    proc, data = explain_text(text)
    assert proc.returncode == 0 and data["verdict"] == "ok" and data["causes"] == [], \
        (data["verdict"], [(c["id"], c["score"]) for c in data["causes"]])


def test_a_real_failure_beside_a_finished_table_still_counts(explain_text):
    text = _corpus("nccl-tests-232.log") + \
        "node2:2841:2863 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.0.0.1<45782> " \
        "with error 12, opcode 0, len 0, vendor err 129\n"
    proc, data = explain_text(text)
    assert proc.returncode == 1 and data["verdict"] != "ok"


@pytest.mark.parametrize("sid, line, hit", [
    ("py.extension_sees_cpu_torch", "    PyTorch 2.1.2+cu121 with CUDA 1201 (you have 2.1.2+cpu)", True),
    ("py.extension_sees_cpu_torch", "    PyTorch 2.1.2+cu121 with CUDA 1201 (you have 2.1.2+cu118)", False),
    ("py.extension_sees_cpu_torch", "torch 2.1.2+cpu", False),
    ("container.run_without_gpu_flag", "docker run -it --rm ubuntu:22.04 bash", True),
    ("container.run_without_gpu_flag", "apptainer exec image.sif python train.py", True),
    ("container.run_without_gpu_flag", "docker run --gpus all -it nvcr.io/nvidia/pytorch:24.01-py3", False),
    ("container.run_without_gpu_flag", "docker run --runtime=nvidia --rm nvidia/cuda:9.0-base nvidia-smi", False),
    ("container.run_without_gpu_flag", "singularity exec --nv image.sif python train.py", False),
    ("container.run_without_gpu_flag", "nvidia-docker run --rm nvidia/cuda nvidia-smi", False),
    ("container.run_without_gpu_flag", "podman run --device nvidia.com/gpu=all ubuntu nvidia-smi -L", False),
    ("container.hook_failed", "stderr: nvidia-container-cli: initialization error: load library failed", False),
    ("cuda.runtime_library_older_than_build", "I tensorflow/stream_executor/cuda/cuda_dnn.cc:384] Loaded cuDNN "
     "version 8600", False),
    ("cuda.ptx_toolchain", "ptxas info    : Used 32 registers, 384 bytes cmem[0]", False),
    ("gpu.smi_err_state", "npm ERR! code ELIFECYCLE", False),
    ("gpu.smi_err_state", "gyp ERR! stack Error: `make` failed with exit code: 2", False),
    ("gpu.smi_err_state", "| N/A   ERR!   P0    ERR! / 300W |", True),
    ("container.toolkit_nvml_unknown", "Failed to initialize NVML: Unknown Error", False),
    ("cuda.arch_unsupported", "nvcc fatal   : Unsupported gpu architecture 'compute_90'", True),
    ("cuda.arch_unsupported", "\"nvcc fatal : Unsupported gpu architechture 'compute_89'\" with docker image", True),
    ("cuda.arch_unsupported", "nvcc supports gpu architecture compute_89 since CUDA 11.8", False),
    ("topo.pcie_gpus", "   Rank  0 uses device  0 [0x05] Tesla M40 24GB", True),
    ("topo.pcie_gpus", "   Rank  0 uses device  0 [0x05] Tesla V100-SXM2-32GB", False),
    ("topo.p2p_symptom", "When i use nccl test on 8xM40 GPU, it will be stalled.", True),
    ("topo.p2p_symptom", "Successfully installed nccl-tests", False),
    ("prose.hang_idle_gpus", "GPU-Util was 0% but GPU memory was occupied.", True),
    ("prose.hang_idle_gpus", "the job is stuck and GPU utilization stays at 0%", True),
    ("prose.hang_idle_gpus", "GPU-Util was 100% during the hang", False),
    ("prose.hang_idle_gpus", "100%|##########| 500/500 [01:02<00:00,  8.01it/s]", False),
    ("prose.failure", "NCCL Tree allreduce test cannot reach the theoretical bus bandwidth on 2 nodes with 4 nics", False),
    ("prose.failure", "all_reduce_perf fails to achieve 400 GB/s busbw on 8 GPUs", False),
    ("prose.failure", "NCCL test fails with unhandled system error at 1 GB", True),
    ("prose.failure", "cannot reach the other node: connection refused", True),
    ("cuda.invalid_ordinal", "RuntimeError: cuda runtime error (101) : invalid device ordinal at Module.cpp:33", True),
])
def test_what_each_new_reading_does_and_does_not_read(sid, line, hit):
    assert fires(sid, line) is hit


def test_a_data_error_raised_inside_a_frameworks_cli_stays_u2(explain_text):
    """A framework run through its installed CLI has no frame of the user's code either; a TypeError whose message
    is no API mismatch (a None where data was meant) is a bug or a bad config, not two package versions (review of
    session 20)."""
    text = ('Traceback (most recent call last):\n  File "/usr/local/bin/llamafactory-cli", line 8, in <module>\n'
            '  File "/usr/local/lib/python3.10/dist-packages/llamafactory/data/loader.py", line 52, in load\n'
            "    x = cfg['a'][0]\nTypeError: 'NoneType' object is not subscriptable\n")
    _, data = explain_text(text)
    assert_top(data, "U2")
