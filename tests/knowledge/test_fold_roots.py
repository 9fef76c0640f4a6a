"""Roots that name what they explain (evidence["explains"], envbuild/doctor/fold.py): a node or stack check whose
fault breaks CUDA for every process takes stack.torch's failure under it too, not only the probes'. Replayed on
the real 2xH200 bundle with one edit each (tests/fakenode.py), through the CLI."""
import json
import subprocess
import sys

from fakenode import H200X2, derive_bundle

NO_DEVICE = "cudaGetDeviceCount: Error 100 cudaErrorNoDevice: no CUDA-capable device is detected"
STUB = "cudaGetDeviceCount: Error 34 cudaErrorStubLibrary: CUDA driver is a stub library"


def doctor(root, tmp_path, *checks):
    out = tmp_path / "r.json"
    args = [a for c in checks for a in ("--check", c)]
    proc = subprocess.run([sys.executable, "-m", "envbuild", "doctor", "--root", str(root), "--json", str(out), "-q",
                           *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr
    return {r["check_id"]: r for r in json.loads(out.read_text())["results"]}


def cuda_refuses(error):
    def edit(stack):
        stack["torch"].update(cuda_available=False, device_count=0, cuda_error=error)
        stack["init"] = {"cuda_tensor": False, "nccl_group": False, "method": "no GPU"}
    return edit


def test_a_cuda_visible_devices_naming_no_gpu_takes_stack_torchs_no_device_under_it(tmp_path):
    def edit(b):
        b.write("/proc/self/environ", b.read("/proc/self/environ") + "CUDA_VISIBLE_DEVICES=5\0")
        b.stack(cuda_refuses(NO_DEVICE))

    results = doctor(derive_bundle(H200X2, tmp_path / "b", edit), tmp_path, "node.cuda_visible_devices", "stack.torch")
    root, torch = results["node.cuda_visible_devices"], results["stack.torch"]
    assert root["status"] == "fail" and root["evidence"]["consequences"] == ["stack.torch"]
    assert torch["status"] == "fail" and torch["summary"].startswith("consequence of node.cuda_visible_devices (C4)")
    assert torch["evidence"]["consequence_of"]["blamed_before"] == ["C4", "D5"]


def test_without_the_variable_stack_torchs_no_device_stands_as_its_own_root(tmp_path):
    results = doctor(derive_bundle(H200X2, tmp_path / "b", lambda b: b.stack(cuda_refuses(NO_DEVICE))), tmp_path,
                     "node.cuda_visible_devices", "stack.torch")
    assert results["node.cuda_visible_devices"]["status"] == "pass"
    torch = results["stack.torch"]
    assert torch["status"] == "fail" and "consequence" not in torch["summary"] and torch["causes"] == ["C4", "D5"]


def test_a_stub_libcuda_first_takes_stack_torchs_stub_error_under_it(tmp_path):
    """The stub fault of tests/doctor/test_stack_faults.py, with what torch's CUDA then says (34): stack.torch is
    a consequence of stack.libcuda_stub, not a second root."""
    def stub_first(data):  # as tests/doctor/test_stack_faults.py's _stub: the loader's first libcuda is the stub
        stub = "/usr/local/cuda/lib64/stubs/libcuda.so"
        lib = next(m for m in data["mapped"] if m["family"] == "libcuda")
        lib.update(path=stub, realpath=stub, stub=True, api_error="cuDriverGetVersion returned 34 "
                   "(CUDA_ERROR_STUB_LIBRARY: a stub libcuda)", api_version=None, api_version_code=None)

    def edit(b):
        b.stack(stub_first)
        b.stack(cuda_refuses(STUB))

    results = doctor(derive_bundle(H200X2, tmp_path / "b", edit), tmp_path, "stack.libcuda_stub", "stack.torch")
    root, torch = results["stack.libcuda_stub"], results["stack.torch"]
    assert root["status"] == "fail" and root["evidence"]["consequences"] == ["stack.torch"]
    assert torch["summary"].startswith("consequence of stack.libcuda_stub (C7)") and torch["causes"] == ["C7"]
