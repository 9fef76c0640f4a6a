"""stack.libcuda_compat: a forward-compat libcuda on the library path, with no kernel driver to hold it against, warns.

Through the CLI a user runs, against this venv (no torch) plus real fixture libraries and distributions
(tests/stackfix.py); moved from tests/doctor/test_stack_checks.py."""
import json

from stackfix import clean_env, fake_libcuda, run_doctor


def test_compat_libcuda_without_a_known_kernel_driver_warns(tmp_path):
    compat = tmp_path / "cuda" / "compat"
    fake_libcuda(compat, driver="575.57.08", cuda_code=12090)
    proc, res = run_doctor(["--check", "stack.libcuda_compat"], clean_env(LD_LIBRARY_PATH=str(compat)), tmp_path)
    r = res["stack.libcuda_compat"]
    assert r["status"] == "warn" and "C8" in r["causes"]
    assert "575.57.08" in json.dumps(r["evidence"])
