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
