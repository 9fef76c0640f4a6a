"""create's gate (envbuild/install/doctor_gate.py) probes the staged env through the loader's trace, never loading
torch's libraries, and still refuses an env where torch would bind a second libnccl.

The staged env is a prefix whose bin/python is this interpreter, with tests/stackfix.py's fake torch (real ELF
libraries in the pip wheel's layout, torch 2.11's by-path preload of the wheel's libnccl) first on PYTHONPATH.
"""
import os
import sys

from stackfix import fake_torch, full_nccl

from envbuild.data.checks._common import LOADER_TRACE
from envbuild.install import doctor_gate
from envbuild.profile import load_profile


def _staged(tmp_path, monkeypatch, **env):
    """A staged prefix running this python on the fake torch, with the probe's environment set as create's."""
    site = tmp_path / "site"
    fake_torch(site, preloading=True)
    prefix = tmp_path / "staged"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python").symlink_to(sys.executable)
    for key in [k for k in os.environ if k.startswith(("LD_", "NCCL_", "PYTHONPATH", "FAKE_"))]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("PYTHONPATH", str(site))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return prefix


def _by_id(gate):
    return {r.check_id: r for r in gate.results}


def test_the_gate_refuses_a_second_libnccl_without_loading_torch(tmp_path, monkeypatch):
    other = full_nccl(tmp_path / "other", "2.28.3")
    loaded = tmp_path / "loaded"
    prefix = _staged(tmp_path, monkeypatch, LD_PRELOAD=str(other), FAKE_TORCH_LOADED=str(loaded))
    gate = doctor_gate.run_stack_checks(prefix, load_profile("slime-v0.3.1-cu130"))
    results = _by_id(gate)
    assert results["stack.torch"].evidence["init"]["source"] == LOADER_TRACE
    assert not loaded.exists()  # libtorch_cuda never ran: nothing of torch was loaded
    assert not gate.ok and "stack.nccl_copies" in [r.check_id for r in gate.failed]
    assert "2 different libnccl files are mapped" in results["stack.nccl_copies"].summary


def test_the_same_env_without_the_preload_passes_the_nccl_check(tmp_path, monkeypatch):
    prefix = _staged(tmp_path, monkeypatch)
    gate = doctor_gate.run_stack_checks(prefix, load_profile("slime-v0.3.1-cu130"))
    results = _by_id(gate)
    assert results["stack.torch"].evidence["init"]["source"] == LOADER_TRACE
    assert "resolved by the dynamic loader's trace, not loaded" in results["stack.torch"].summary  # the check knows it
    assert results["stack.nccl_copies"].status.value == "pass", results["stack.nccl_copies"].summary
