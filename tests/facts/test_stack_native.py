"""The stack probe's fast path (checks/_torch_native.py): torch's native libraries loaded as its package loads
them, CUDA and NCCL initialised through the copies the dynamic linker bound, and never `import torch`.

The torch here is built with gcc in the pip wheel's layout (tests/stackfix.py fake_torch): its __init__ raises, so
a probe that imported it would report it absent. The loader, RPATHs, LD_PRELOAD and symbol lookup are the real ones.
"""
import json
import os
import subprocess
import sys
import time

from stackfix import PROBE, fake_torch, full_nccl, run_doctor, run_probe, torch_env


def _env(site, **extra):
    return torch_env(PYTHONPATH=str(site), **extra)  # the fake torch first on the path


def test_the_fast_path_maps_what_torchs_rpaths_reach_and_never_imports_torch(tmp_path):
    site = tmp_path / "site"
    fake_torch(site)
    data = run_probe(_env(site))
    assert data["_rc"] == 0, data["_stderr"]
    t, init = data["torch"], data["init"]
    assert t["present"] is True and t["version"] == "2.11.0+cu130" and t["cuda"] == "13.0" and t["cuda_tag"] == "cu130"
    assert t["method"].startswith("torch's native libraries")
    assert t["nccl_version"] == "2.28.9"  # torch::cuda::nccl::version(), what torch.cuda.nccl.version() reports
    assert t["cuda_available"] is True and t["device_count"] == 1
    assert init["cuda_tensor"] is True and init["nccl_group"] is True
    assert init["nccl_banner_version"] == "2.28.9" and "no `import torch`" in init["method"]
    nccl = [m["path"] for m in data["mapped"] if m["family"] == "libnccl"]
    assert nccl == [str(site / "nvidia" / "nccl" / "lib" / "libnccl.so.2")]
    assert data["cuda_runtime"]["path"] == str(site / "nvidia" / "cu13" / "lib" / "libcudart.so.13")
    assert "native_path" not in t


def test_a_preloaded_second_libnccl_is_the_nccl_that_runs(tmp_path):
    """LD_PRELOAD puts another libnccl first in the global scope: NCCL's banner names it, while torch keeps
    reporting the NCCL it was built with (the C3 situation stack.nccl_version and stack.nccl_copies judge)."""
    site = tmp_path / "site"
    fake_torch(site)
    other = full_nccl(tmp_path / "other", "2.28.3")
    data = run_probe(_env(site, LD_PRELOAD=str(other)))
    assert data["_rc"] == 0, data["_stderr"]
    assert data["init"]["nccl_banner_version"] == "2.28.3"
    assert data["torch"]["nccl_version"] == "2.28.9"
    assert [m["path"] for m in data["mapped"] if m["family"] == "libnccl"][0] == str(other)


def test_the_releases_own_loader_runs_so_a_preload_maps_two_copies_as_under_torch(tmp_path):
    """torch 2.11's _load_global_deps preloads the wheel's libnccl by path: with another libnccl in LD_PRELOAD a
    real `import torch` maps both (seen on the lent H200, docs/gpu-runs/s5-summary-call2.txt), and stack.nccl_copies
    fails. The probe runs that function from the package's own __init__.py, never the module itself."""
    site = tmp_path / "site"
    fake_torch(site, preloading=True)
    other = full_nccl(tmp_path / "other", "2.28.3")
    env = _env(site, LD_PRELOAD=str(other))
    data = run_probe(env)
    assert data["torch"]["method"].startswith("torch's native libraries"), data["torch"]
    paths = [m["path"] for m in data["mapped"] if m["family"] == "libnccl"]
    assert sorted(paths) == sorted([str(other), str(site / "nvidia" / "nccl" / "lib" / "libnccl.so.2")])
    proc, results = run_doctor(["--check", "stack.nccl_copies"], env, tmp_path)
    assert results["stack.nccl_copies"]["status"] == "fail", results["stack.nccl_copies"]
    proc, results = run_doctor(["--check", "stack.nccl_copies"], _env(site), tmp_path)  # no preload: one copy
    assert results["stack.nccl_copies"]["status"] == "pass", results["stack.nccl_copies"]


def test_a_cuda_error_during_init_is_a_finding_in_cudas_own_words(tmp_path):
    site = tmp_path / "site"
    fake_torch(site)
    data = run_probe(_env(site, FAKE_CUDA_MALLOC_RC="2"))
    err = data["errors"]["init"]
    assert "during cuda tensor" in err and "cudaMalloc: Error 2 cudaErrorMemoryAllocation: out of memory" in err
    assert data["init"]["cuda_tensor"] is False and data["torch"]["present"] is True
    proc, results = run_doctor(["--check", "stack.torch"], _env(site, FAKE_CUDA_MALLOC_RC="2"), tmp_path)
    r = results["stack.torch"]
    assert proc.returncode == 1 and r["status"] == "fail", proc.stderr
    assert "could not initialise CUDA/NCCL" in r["summary"] and "cudaErrorMemoryAllocation" in r["summary"]


def test_no_usable_driver_is_no_gpu_with_the_runtimes_reason(tmp_path):
    site = tmp_path / "site"
    fake_torch(site)
    data = run_probe(_env(site, FAKE_CUDA_COUNT_RC="35"))
    t = data["torch"]
    assert t["cuda_available"] is False and t["device_count"] == 0
    assert "cudaErrorInsufficientDriver: CUDA driver version is insufficient" in t["cuda_error"]
    assert data["init"]["method"].startswith("no GPU") and "init" not in data["errors"]


def test_a_torch_the_fast_path_cannot_read_is_imported_and_says_why(tmp_path):
    """No version.py: the probe imports torch, as before the fast path; here that import fails, which is the
    finding, and the torch facts say why the native path was not used."""
    site = tmp_path / "site"
    fake_torch(site)
    os.unlink(site / "torch" / "version.py")
    data = run_probe(_env(site))
    assert data["torch"]["present"] is False
    assert "this fake torch must never be imported" in data["torch"]["error"]
    assert data["torch"]["native_path"].startswith("not used: cannot read")


def test_python_dependencies_torch_declares_but_lacks_are_a_warning(tmp_path):
    """The fast path never runs torch's Python part, so what that part needs is judged from torch's Requires-Dist,
    as `pip check` does: a missing dependency or a version outside the requirement that applies to this python
    warns; one behind an extra or another python's marker does not; a met one does not."""
    site = tmp_path / "site"
    fake_torch(site)
    meta = site / "torch-2.11.0+cu130.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torch\nVersion: 2.11.0+cu130\nRequires-Dist: click\nRequires-Dist: click>=999\n"
        "Requires-Dist: envbuild-test-missing-dep>=1.0\nRequires-Dist: envbuild-test-old-python; python_version < \"3.0\"\n"
        "Requires-Dist: envbuild-test-extra; extra == \"opt\"\n\nlong description\nRequires-Dist: not-a-header\n")
    proc, results = run_doctor(["--check", "stack.torch"], _env(site), tmp_path)
    r = results["stack.torch"]
    assert r["status"] == "warn", (r, proc.stderr)
    from importlib import metadata

    assert r["evidence"]["unmet_requirements"] == [f"click>=999 ({metadata.version('click')} installed)",
                                                    "envbuild-test-missing-dep>=1.0 (not installed)"]
    assert "requirements are not met" in r["summary"] and "'envbuild-test-missing-dep>=1.0'" in r["remediation"]
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.11.0+cu130\nRequires-Dist: click\n")
    proc, results = run_doctor(["--check", "stack.torch"], _env(site), tmp_path)
    assert results["stack.torch"]["status"] == "pass", results["stack.torch"]


def test_the_gate_holds_the_first_cuda_call_while_the_libraries_load(tmp_path):
    """The doctor takes NVML's process snapshot while the probe loads torch's libraries; the probe's first CUDA
    call waits for the gate, so node.gpu_processes never sees the probe's context."""
    site = tmp_path / "site"
    fake_torch(site)
    trace, gate = tmp_path / "first-cuda-call", tmp_path / "gate"
    probe = subprocess.Popen([sys.executable, str(PROBE), "--gate", str(gate)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=_env(site, FAKE_CUDA_TRACE=str(trace)))
    time.sleep(1.0)
    assert probe.poll() is None and not trace.exists()
    gate.touch()
    out, err = probe.communicate(timeout=60)
    data = json.loads(out)
    assert trace.exists() and data["init"]["nccl_group"] is True, err
    assert data["init"]["gate_wait_s"] >= 0.5 and data["phase_s"]["gate"] >= 0.5  # it waited for us


def test_a_failed_fast_path_leaves_nothing_of_torch_for_the_import_that_follows(tmp_path):
    """torch's loader raising (a CUDA library missing) sends the probe to `import torch`, which must run the real
    package: the stand-in's modules are gone, so the import fails with the package's own error."""
    site = tmp_path / "site"
    fake_torch(site, loader_fails=True)
    data = run_probe(_env(site))
    t = data["torch"]
    assert t["present"] is False and t["error"] == "this fake torch must never be imported", t
    assert "OSError: libcudart.so.13: cannot open shared object file" in t["native_path"]


def test_a_rocm_torch_is_imported_not_probed_through_the_cuda_runtime(tmp_path):
    site = tmp_path / "site"
    fake_torch(site)
    (site / "torch" / "version.py").write_text("__version__ = '2.11.0+rocm7.0'\nhip = '7.0.1'\ncuda = None\n")
    data = run_probe(_env(site))
    assert data["torch"]["native_path"] == "not used: a ROCm build (torch.version.hip 7.0.1)"
