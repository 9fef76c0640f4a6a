"""stack.nccl_copies: two libnccl files mapped fail (C3); reachable copies of different versions warn.

Through the CLI a user runs, against this venv (no torch) plus real fixture libraries and distributions
(tests/stackfix.py); moved from tests/doctor/test_stack_checks.py."""
from stackfix import clean_env, fake_nccl, run_doctor


def test_two_nccl_copies_mapped_fail_c3(tmp_path):
    a = fake_nccl(tmp_path / "a", "2.28.9")
    b = fake_nccl(tmp_path / "b", "2.27.5")
    proc, res = run_doctor(["--check", "stack.*"], clean_env(LD_PRELOAD=f"{a} {b}"), tmp_path)
    r = res["stack.nccl_copies"]
    assert proc.returncode == 1
    assert r["status"] == "fail" and r["causes"] == ["C3"]
    assert str(a) in r["summary"] and str(b) in r["summary"]
    assert "libnccl" in proc.stdout and "C3" in proc.stdout


def test_reachable_copies_with_different_versions_warn_c3(tmp_path):
    site = tmp_path / "site"
    fake_nccl(site / "nvidia" / "nccl" / "lib", "2.28.9")
    conda = tmp_path / "conda"
    fake_nccl(conda / "lib", "2.27.3")
    proc, res = run_doctor(["--check", "stack.nccl_copies"],
                           clean_env(PYTHONPATH=str(site), CONDA_PREFIX=str(conda)), tmp_path)
    r = res["stack.nccl_copies"]
    assert proc.returncode == 0
    assert r["status"] == "warn" and r["causes"] == ["C3"]
    assert "2.28.9" in r["summary"] and "2.27.3" in r["summary"]
