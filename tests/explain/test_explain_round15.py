"""Issue 25, fifteenth round (having read held-out slices 20 and 21, after their untouched scores).

1. CUDA error 36 by its message: "API call is not supported in the installed CUDA driver" is what
   cudaErrorCallRequiresNewerDriver prints (lmdeploy #708: a build for CUDA 11.7 under a driver for 11.4), D9; only
   the enum name was read before.
2. The loader's cache listing a `compat/libcuda.so` first (nvidia-container-toolkit #1679, beside error 803) points
   at C8, the forward-compatibility copy shadowing the driver's.
3. A CUDA library that lacks a function of its own interface (dorado #166: a CUDA 8.0 module's libnvrtc.so without
   nvrtcGetCUBIN) is an older toolkit's copy found first, C10; torch lacking an NCCL symbol stays C3."""
import pytest

from explain_helpers import assert_top, fires


@pytest.mark.parametrize("text, cause", [
    ("RuntimeError: [TM][ERROR] CUDA runtime error: API call is not supported in the installed CUDA driver "
     "/lmdeploy/src/turbomind/utils/allocator.h:169\n", "D9"),
    ("CUDA error at helper_cuda.h:816 code=803(cudaErrorSystemDriverMismatch) \"cudaGetDeviceCount(&device_count)\"\n"
     " ldconfig -p | grep libcuda.so.1\n"
     "\tlibcuda.so.1 (libc6,AArch64) => /usr/local/cuda-13.0/compat/libcuda.so.1\n"
     "\tlibcuda.so.1 (libc6,AArch64) => /usr/lib/aarch64-linux-gnu/nvidia/libcuda.so.1\n", "C8"),
    ("Could not load library libcudnn_cnn_infer.so.8. Error: /usr/local/Cluster-Apps/cuda/8.0/lib64/libnvrtc.so: "
     "undefined symbol: nvrtcGetCUBIN\n", "C10"),
], ids=["error-36-by-its-message", "compat-libcuda-beside-803", "older-cuda-library-missing-its-function"])
def test_the_fifteenth_rounds_readings_name_their_cause(explain_text, text, cause):
    proc, data = explain_text(text)
    assert proc.returncode == 1, proc.stderr
    assert_top(data, cause)


def test_a_loader_cache_listing_alone_is_no_failure(explain_text):
    proc, data = explain_text("\tlibcuda.so.1 (libc6,x86-64) => /usr/local/cuda-12.8/compat/libcuda.so.1\n")
    assert proc.returncode == 0 and data["verdict"] == "ok", data["verdict"]


@pytest.mark.parametrize("line, hit", [
    ("/usr/local/Cluster-Apps/cuda/8.0/lib64/libnvrtc.so: undefined symbol: nvrtcGetCUBIN", True),
    ("OSError: /opt/cuda/lib64/libcublas.so.11: undefined symbol: cublasLtGetStatusString", True),
    ("ImportError: libtorch_cuda.so: undefined symbol: ncclMemFree", False),
    ("ImportError: flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEi", False),
])
def test_only_a_cuda_library_missing_its_own_function_is_read_so(line, hit):
    assert fires("py.cuda_library_lacks_own_symbol", line) is hit
