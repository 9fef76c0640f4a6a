"""The stack probe's resolve-only path (checks/_loader_trace.py, what `envbuild create`'s gate runs): the copies
torch's libraries would bind, asked of the real dynamic loader (LD_TRACE_LOADED_OBJECTS) instead of loading them.

The torch is tests/stackfix.py's fake_torch: real ELF libraries in the pip wheel's layout, whose libtorch_cuda
leaves a file behind when it is loaded (FAKE_TORCH_LOADED), so a test can tell that nothing of torch ran.
"""
import sys

import pytest

from stackfix import fake_libcuda, fake_torch, full_nccl, run_probe, torch_env

sys.path.insert(0, str(__import__("stackfix").REPO / "checks"))
import _elf  # noqa: E402  (checks/ is not a package: the probe runs it as a script directory)


def _env(site, **extra):
    return torch_env(PYTHONPATH=str(site), **extra)


def _copies(data):
    return sorted((m["family"], m["path"]) for m in data["mapped"])


def test_resolve_only_maps_what_loading_maps_and_runs_none_of_torchs_code(tmp_path):
    """torch 2.11's _load_global_deps preloads the wheel's libnccl by path; with another libnccl in LD_PRELOAD
    loading maps both. The trace must name the same two copies, torch's built NCCL and the runtime's version, while
    libtorch_cuda's constructor never runs."""
    site = tmp_path / "site"
    fake_torch(site, preloading=True)
    other = full_nccl(tmp_path / "other", "2.28.3")
    loaded, traced = tmp_path / "loaded", tmp_path / "traced"
    full = run_probe(_env(site, LD_PRELOAD=str(other), FAKE_TORCH_LOADED=str(loaded)))
    gate = run_probe(_env(site, LD_PRELOAD=str(other), FAKE_TORCH_LOADED=str(traced)), "--resolve-only")
    assert gate["_rc"] == 0, gate["_stderr"]
    assert loaded.exists() and not traced.exists()
    assert _copies(gate) == _copies(full)
    assert sorted(p for f, p in _copies(gate) if f == "libnccl") == sorted(
        [str(other), str(site / "nvidia" / "nccl" / "lib" / "libnccl.so.2")])
    t = gate["torch"]
    assert t["method"].startswith("the dynamic loader's trace") and "resolve_path" not in t
    assert t["nccl_version"] == full["torch"]["nccl_version"] == "2.28.9"  # read from libtorch_cuda's code
    assert gate["cuda_runtime"] == full["cuda_runtime"]
    assert gate["init"]["source"] == "loader trace" and gate["init"]["nccl_group"] is False


def test_a_library_the_loader_cannot_find_sends_the_probe_to_loading_with_the_reason(tmp_path):
    """The trace cannot stand in for a failing load: the probe then loads (and here imports) torch as `envbuild
    doctor` does, so the verdict is the full probe's, and resolve_path says why."""
    site = tmp_path / "site"
    fake_torch(site)
    (site / "torch" / "lib" / "libtorch_cuda.so").unlink()  # a name no ld.so cache holds
    full = run_probe(_env(site))
    gate = run_probe(_env(site), "--resolve-only")
    assert gate["torch"]["resolve_path"] == "not used: the loader finds no libtorch_cuda.so"
    assert gate["torch"]["present"] is full["torch"]["present"] is False
    assert gate["torch"]["error"] == full["torch"]["error"]


def test_the_driver_the_cuda_runtime_would_open_is_resolved_too(tmp_path):
    """libcudart opens libcuda.so.1 by name at its first call; the trace asks for it the same way, so a stub first on
    LD_LIBRARY_PATH is the mapped libcuda, with its C API's CUDA_ERROR_STUB_LIBRARY (read in a child process)."""
    site = tmp_path / "site"
    fake_torch(site)
    stubs = tmp_path / "stubs"
    stub = fake_libcuda(stubs, driver="999.0.0", rc=34)
    gate = run_probe(_env(site, LD_LIBRARY_PATH=str(stubs)), "--resolve-only")
    libcuda = [m for m in gate["mapped"] if m["family"] == "libcuda"]
    assert [m["path"] for m in libcuda] == [str(stub)]
    assert "returned 34" in libcuda[0]["api_error"]
    assert gate["cuda_driver"]["mapped"] is True and gate["cuda_driver"]["path"] == str(stub)
    without = run_probe(_env(site), "--resolve-only")
    assert not [m for m in without["mapped"] if m["family"] == "libcuda"]  # none reachable: none mapped


def test_elf_reads_only_plain_constant_returns(tmp_path):
    site = tmp_path / "site"
    fake_torch(site)
    torch_cuda = site / "torch" / "lib" / "libtorch_cuda.so"
    assert _elf.returned_integer(str(torch_cuda), "_ZN5torch4cuda4nccl7versionEv") == (2 << 32) | (28 << 16) | 9
    assert _elf.returned_string(str(torch_cuda), "_ZN5torch4cuda4nccl14version_suffixEv") == ""
    assert _elf.returned_integer(str(torch_cuda), "envbuild_no_such_symbol") is None
    cudart = site / "nvidia" / "cu13" / "lib" / "libcudart.so.13"  # cudaGetDeviceCount is not `return constant`
    assert _elf.returned_integer(str(cudart), "cudaGetDeviceCount") is None
    text = tmp_path / "not-elf.so"
    text.write_bytes(b"not an ELF file" * 8)
    with pytest.raises(ValueError):
        _elf.returned_integer(str(text), "anything")
