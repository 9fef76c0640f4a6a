"""Stack checks through the CLI a user runs (`envbuild doctor --check 'stack.*'`), against this venv
(no torch) plus real fixture libraries and distributions. Each fault must fail or warn with its cause."""
import json
import subprocess

from stackfix import clean_env, dist_info, fake_libcuda, fake_nccl, run_doctor


def statuses(results):
    return {cid: r["status"] for cid, r in results.items()}


def test_clean_venv_without_torch_exits_0_and_explains_skips(tmp_path):
    proc, res = run_doctor(["--check", "stack.*"], clean_env(), tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert res["stack.torch"]["status"] == "skip"
    assert "torch is not importable" in res["stack.torch"]["summary"]
    for cid in ("stack.profile_match", "stack.nccl_version", "stack.torch_cuda_tag", "stack.cudnn_version",
                "stack.checkouts"):
        assert res[cid]["status"] == "skip" and "--profile" in res[cid]["summary"], cid
    assert not [c for c, s in statuses(res).items() if s in ("fail", "error")]
    assert "stack.nccl_copies" in proc.stdout


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


def test_stub_libcuda_first_on_library_path_fails_c7(tmp_path):
    stubs = tmp_path / "cuda" / "lib64" / "stubs"
    fake_libcuda(stubs, driver="575.00", rc=34)
    proc, res = run_doctor(["--check", "stack.*"], clean_env(LD_LIBRARY_PATH=str(stubs)), tmp_path)
    r = res["stack.libcuda_stub"]
    assert proc.returncode == 1
    assert r["status"] == "fail" and r["causes"] == ["C7"]
    assert "CUDA_ERROR_STUB_LIBRARY" in r["summary"]
    assert res["stack.env_policy"]["status"] == "warn" and "C7" in res["stack.env_policy"]["causes"]
    failing = [c for c, s in statuses(res).items() if s == "fail"]
    assert failing == ["stack.libcuda_stub"]


def test_compat_libcuda_without_a_known_kernel_driver_warns(tmp_path):
    compat = tmp_path / "cuda" / "compat"
    fake_libcuda(compat, driver="575.57.08", cuda_code=12090)
    proc, res = run_doctor(["--check", "stack.libcuda_compat"], clean_env(LD_LIBRARY_PATH=str(compat)), tmp_path)
    r = res["stack.libcuda_compat"]
    assert r["status"] == "warn" and "C8" in r["causes"]
    assert "575.57.08" in json.dumps(r["evidence"])


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


def test_nccl_other_than_profile_fails_c2_and_shows_table(tmp_path):
    site = tmp_path / "site"
    lib = site / "nvidia" / "nccl" / "lib"
    fake_nccl(lib, "2.27.5")
    dist_info(site, "nvidia-nccl-cu12", "2.27.5")
    env = clean_env(PYTHONPATH=str(site), LD_LIBRARY_PATH=str(lib))
    proc, res = run_doctor(["--check", "stack.nccl_version", "--check", "stack.profile_match",
                            "--profile", "slime-v0.3.1-cu129"], env, tmp_path)
    r = res["stack.nccl_version"]
    assert r["status"] == "fail" and r["causes"] == ["C2", "M4"]
    assert "2.27.5 differs from the image's 2.28.9" in r["summary"]
    assert "re-creates every NCCL communicator" in r["summary"]
    rows = {row["component"]: row for row in res["stack.profile_match"]["evidence"]["rows"]}
    assert rows["nccl"]["verdict"] == "differs" and rows["nccl"]["env"] == "2.27.5"
    assert rows["nccl"]["image"] == "2.28.9"
    # The terminal shows the side-by-side table.
    assert "image slimerl/slime:nightly-dev-20260804a vs this env" in proc.stdout
    assert "why it matters" in proc.stdout


def test_env_policy_against_profile_launch_env(tmp_path):
    env = clean_env(NCCL_CUMEM_ENABLE="1", PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True",
                    NCCL_VERSION="2.28.3-1")
    proc, res = run_doctor(["--check", "stack.env_policy", "--profile", "slime-v0.3.1-cu129"], env, tmp_path)
    r = res["stack.env_policy"]
    assert r["status"] == "fail" and r["causes"][0] == "C5"
    found = {f["finding"].split("=")[0]: f for f in r["evidence"]["findings"]}
    assert found["PYTORCH_CUDA_ALLOC_CONF"]["causes"][0] == "M3"
    assert "NCCL_VERSION" not in json.dumps(r["evidence"]["findings"])
    # Without a profile the same shell only warns (sglang's forced 0 is the reference).
    proc, res = run_doctor(["--check", "stack.env_policy"], env, tmp_path)
    assert res["stack.env_policy"]["status"] == "warn"


def test_checkout_commit_and_patches_against_profile(tmp_path):
    repo = tmp_path / "sglang"
    pkg = repo / "python" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-qm", "base"], check=True)
    slime = tmp_path / "slime"
    pdir = slime / "docker" / "patch" / "v0.5.15.post1"
    pdir.mkdir(parents=True)
    (pkg / "__init__.py").write_text("PATCHED = True\n")
    diff = subprocess.run(git[:3] + ["diff"], capture_output=True, text=True).stdout
    (pdir / "sglang-mrope.patch").write_text(diff)
    subprocess.run(git[:3] + ["checkout", "-q", "--", "."], check=True)  # patch NOT applied
    (pdir / "sglang-input-logprob-temperature.patch").write_text(diff)
    env = clean_env(PYTHONPATH=str(repo / "python"))
    proc, res = run_doctor(["--check", "stack.checkouts", "--profile", "slime-v0.3.1-cu129",
                            "--set", f"stack.patch_dir={slime}"], env, tmp_path)
    r = res["stack.checkouts"]
    assert r["status"] == "fail" and r["causes"] == ["M4"]
    assert "the image at 0b3bb0cb" in r["summary"]
    assert "sglang-mrope.patch is not-applied" in r["summary"]


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
