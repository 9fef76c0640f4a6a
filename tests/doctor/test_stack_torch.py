"""stack.torch: a CUDA initialisation failure names the cause its message matches.

Through the CLI a user runs, against this venv (no torch) plus real fixture libraries and distributions
(tests/stackfix.py); moved from tests/doctor/test_stack_checks.py."""
from stackfix import clean_env, run_doctor


FAILING_TORCH = '''
__version__ = "2.11.0+cu129"
class version:
    cuda = "12.9"
    git_version = "test"
class _Nccl:
    @staticmethod
    def version():
        return (2, 28, 9)
class _Cuda:
    nccl = _Nccl
    @staticmethod
    def is_available():
        return True
    @staticmethod
    def device_count():
        return 1
    @staticmethod
    def get_arch_list():
        return ["sm_90"]
cuda = _Cuda
class backends:
    class cudnn:
        @staticmethod
        def version():
            return 91900
def ones(*a, **k):
    raise RuntimeError("CUDA error: CUDA driver is a stub library")
'''


def test_cuda_init_failure_names_the_cause_from_its_message(tmp_path):
    """Stand-in for a GPU node whose CUDA init fails (CI has no GPU): a torch module that reports a GPU
    and raises what torch raises when it loaded the stub libcuda. The probe records the error and the
    phase; stack.torch fails with the cause whose log signature matches."""
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text(FAILING_TORCH)
    env = clean_env()
    env["PYTHONPATH"] = str(site)
    proc, res = run_doctor(["--check", "stack.torch"], env, tmp_path)
    r = res["stack.torch"]
    assert r["status"] == "fail" and r["causes"] == ["C7"], r
    assert "during cuda tensor" in r["evidence"]["init_error"]
    assert "CUDA driver is a stub library" in r["summary"]


def _native_torch(tmp_path, count_rc: str):
    """The fake torch of tests/stackfix.py (gcc-built libraries in the wheel's layout, read by the probe's fast path
    without `import torch`) whose cudaGetDeviceCount returns `count_rc`: what the probe records as cuda_error."""
    from stackfix import fake_torch, torch_env

    site = tmp_path / "site"
    fake_torch(site)
    return torch_env(PYTHONPATH=str(site), FAKE_CUDA_COUNT_RC=count_rc)


def test_a_recorded_cuda_error_803_fails_with_its_meaning_and_cause(tmp_path):
    """CUDA's 803 (cudaErrorSystemDriverMismatch) at cudaGetDeviceCount made torch see no GPU; stack.torch said
    "no GPU visible" and passed. Now it fails with the CUDA runtime API's meaning and C8 (cuda-compat first)."""
    proc, results = run_doctor(["--check", "stack.torch"], _native_torch(tmp_path, "803"), tmp_path)
    r = results["stack.torch"]
    assert proc.returncode == 1 and r["status"] == "fail", (r, proc.stderr)
    assert "CUDA error 803 cudaErrorSystemDriverMismatch: the display driver and the CUDA driver" in r["summary"]
    assert r["causes"] == ["C8", "D2"] and r["evidence"]["cuda_error_code"] == 803


def test_cuda_error_804_points_at_forward_compat():
    from envbuild.doctor.checks.stack_torch import judge_cuda_error

    meaning, causes = judge_cuda_error("cudaGetDeviceCount: Error 804 cudaErrorCompatNotSupportedOnDevice: "
                                       "forward compatibility was attempted on non supported HW")
    assert meaning.startswith("CUDA error 804 cudaErrorCompatNotSupportedOnDevice") and causes == ["C8"]


def test_no_driver_on_a_cpu_node_is_no_gpu_not_a_failure(tmp_path):
    """On a node without a driver (this CI machine: NVML unavailable) a CUDA build reports 35: nothing to judge."""
    proc, results = run_doctor(["--check", "stack.torch"], _native_torch(tmp_path, "35"), tmp_path)
    r = results["stack.torch"]
    assert r["status"] != "fail" and "no GPU visible" in r["summary"], r


def test_the_report_says_where_the_stack_probes_seconds_went(tmp_path):
    """The stack probe is the static doctor's critical path (3.15 s of a node's first run): stack.torch's evidence
    carries its wall time, the main thread's phases (library loading first) and the inventory thread's own seconds,
    so a slow first run on a GPU node shows which part was slow."""
    proc, results = run_doctor(["--check", "stack.torch"], _native_torch(tmp_path, "35"), tmp_path)
    probe_s = results["stack.torch"]["evidence"]["probe_s"]
    assert probe_s["elapsed"] > 0 and probe_s["inventory"] > 0, probe_s
    # static: torch's libraries resolved by the loader's trace (--resolve-init); quick: loaded
    assert probe_s["phases"]["resolve torch libraries"] >= 0 and "inventory" in probe_s["phases"], probe_s
    quick = tmp_path / "quick"
    quick.mkdir()
    proc, results = run_doctor(["--check", "stack.torch", "--quick"], _native_torch(quick, "35"), quick)
    assert results["stack.torch"]["evidence"]["probe_s"]["phases"]["load torch libraries"] >= 0
    assert sum(probe_s["phases"].values()) <= probe_s["elapsed"] + 0.01, probe_s
