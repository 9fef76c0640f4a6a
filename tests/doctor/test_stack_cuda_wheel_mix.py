"""stack.cuda_wheel_mix: cu12 and cu13 wheels in one env fail (C6).

Through the CLI a user runs, against this venv (no torch) plus real fixture libraries and distributions
(tests/stackfix.py); moved from tests/doctor/test_stack_checks.py."""
from stackfix import clean_env, dist_info, run_doctor


def test_cu12_and_cu13_wheels_mixed_fail_c6(tmp_path):
    site = tmp_path / "site"
    dist_info(site, "nvidia-nccl-cu12", "2.28.9")
    dist_info(site, "nvidia-cudnn-cu12", "9.19.0.56")
    dist_info(site, "nvidia-cudnn-cu13", "9.19.0.56")
    dist_info(site, "cuda-python", "13.0.3")
    proc, res = run_doctor(["--check", "stack.cuda_wheel_mix"], clean_env(PYTHONPATH=str(site)), tmp_path)
    r = res["stack.cuda_wheel_mix"]
    assert proc.returncode == 1
    assert r["status"] == "fail" and r["causes"] == ["C6"]
    assert "nvidia-cudnn-cu13==9.19.0.56" in r["summary"] and "cuda-python==13.0.3" in r["summary"]
    assert r["evidence"]["by_cuda_major"]["12"] == ["nvidia-cudnn-cu12==9.19.0.56", "nvidia-nccl-cu12==2.28.9"]
