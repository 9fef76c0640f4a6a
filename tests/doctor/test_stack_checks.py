"""Stack checks through the CLI a user runs (`envbuild doctor --check 'stack.*'`), against this venv
(no torch) plus real fixture libraries and distributions. Each fault must fail or warn with its cause. The tests
here judge several stack checks at once; a test of one check lives in tests/doctor/test_stack_<name>.py."""
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
