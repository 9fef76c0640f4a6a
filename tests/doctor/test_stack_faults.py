"""Stack faults derived from the real 2xH200 bundle (tests/fixtures/bundles/h200x2, captured with
`envbuild capture --node` on the lent machine; its .envbuild/stack.json holds the stack probe's output).
Each variant makes ONE fault; `envbuild doctor --root` must fail it with the right cause and fail
nothing else. The healthy bundle has no fail."""
import json
import subprocess
import sys

import pytest

from fakenode import H200X2, derive_bundle

PROFILE = "slime-v0.3.1-cu130"  # the bundle's torch is 2.11.0+cu130 with NCCL 2.28.9 and cuDNN 9.19

pytestmark = pytest.mark.skipif(not (H200X2 / ".envbuild" / "stack.json").exists(),
                                reason="the captured H200 bundle is not in this checkout")


def doctor(root, tmp_path, *extra):
    out = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-m", "envbuild", "doctor", "--root", str(root), "--json", str(out),
                           "--profile", PROFILE] + list(extra),
                          capture_output=True, text=True, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
                          cwd=str(H200X2.parent.parent.parent.parent), timeout=120)
    assert out.exists(), proc.stderr
    results = {r["check_id"] + (f"[{r['subject']}]" if r.get("subject") else ""): r
               for r in json.loads(out.read_text())["results"]}
    return proc, results


def failing(results):
    return sorted(cid for cid, r in results.items() if r["status"] in ("fail", "error"))


def mapped_libcuda(data):
    return next(m for m in data["mapped"] if m["family"] == "libcuda")


def test_healthy_bundle_has_no_stack_fail(tmp_path):
    proc, res = doctor(H200X2, tmp_path)
    assert failing(res) == [], proc.stdout
    assert proc.returncode == 0
    assert res["stack.nccl_version"]["status"] == "pass"
    assert res["stack.torch"]["status"] == "pass" and "1-rank NCCL group" in res["stack.torch"]["summary"]
    # The lent machine really has two NCCLs (pip 2.28.9 that torch maps, system libnccl2 2.28.3).
    assert res["stack.nccl_copies"]["status"] == "warn" and res["stack.nccl_copies"]["causes"] == ["C3"]
    assert "image slimerl/slime:nightly-dev-20260810a-cu130 vs this env" in proc.stdout


def _stub(data):
    lib = mapped_libcuda(data)
    stub = "/usr/local/cuda/lib64/stubs/libcuda.so"
    lib.update(path=stub, realpath=stub, stub=True, api_error="cuDriverGetVersion returned 34 "
               "(CUDA_ERROR_STUB_LIBRARY: a stub libcuda)", api_version=None, api_version_code=None, file_version=None)
    data["cuda_driver"] = {"mapped": True, "path": stub, "version": None, "version_code": None,
                           "error": lib["api_error"]}
    data["resolution"]["libcuda.so.1"].insert(0, {"path": "/usr/local/cuda/lib64/stubs/libcuda.so.1",
                                                  "origin": "LD_LIBRARY_PATH", "stub": True, "compat": False})
    data["env"]["LD_LIBRARY_PATH"] = "/usr/local/cuda/lib64/stubs:" + data["env"]["LD_LIBRARY_PATH"]


def _compat(data):
    lib = mapped_libcuda(data)
    compat = "/usr/local/cuda/compat/libcuda.so.575.57.08"
    lib.update(path=compat, realpath=compat, compat=True, file_version="575.57.08", api_version=None,
               api_version_code=None, api_error="cuDriverGetVersion returned 803")
    data["cuda_driver"] = {"mapped": True, "path": compat, "version": None, "version_code": None,
                           "error": lib["api_error"]}


def _two_nccl(data):
    data["mapped"].append({"family": "libnccl", "path": "/lib/x86_64-linux-gnu/libnccl.so.2",
                           "realpath": "/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3", "stub": False, "compat": False,
                           "version": "2.28.3", "version_string": "2.28.3", "file_version": "2.28.3",
                           "version_method": "NCCL version string"})


def _cu12_mix(data):
    data["distributions"] += [{"name": "nvidia-cuda-runtime-cu12", "version": "12.9.79", "location": "/x"},
                              {"name": "nvidia-cudnn-cu12", "version": "9.16.0.29", "location": "/x"}]


def _old_nccl(data):
    for entry in data["mapped"] + data["reachable"]:
        if entry["family"] == "libnccl" and "site-packages" in entry["path"]:
            entry.update(version="2.27.3", version_string="2.27.3+cuda13.0")
            if "api_version" in entry:
                entry.update(api_version="2.27.3", api_version_code=22703)
    data["torch"]["nccl_version"] = "2.27.3"
    for d in data["distributions"]:
        if d["name"] == "nvidia-nccl-cu13":
            d["version"] = "2.27.3"


def _preloaded_nccl(data):
    """The lent H200's run (issue 14): the system libnccl 2.28.3 in LD_PRELOAD; torch still reports the 2.28.9 it
    was built with and the wheel's copy is mapped too, but NCCL's own banner in the 1-rank group says 2.28.3."""
    _two_nccl(data)
    data["env"]["LD_PRELOAD"] = "/lib/x86_64-linux-gnu/libnccl.so.2"
    data["init"].update(nccl_banner="NCCL version 2.28.3+cuda12.9", nccl_banner_version="2.28.3")


@pytest.mark.parametrize("edit,check,cause,allowed", [
    (_stub, "stack.libcuda_stub", "C7", set()),
    (_compat, "stack.libcuda_compat", "C8", set()),
    (_two_nccl, "stack.nccl_copies", "C3", set()),
    (_cu12_mix, "stack.cuda_wheel_mix", "C6", {"stack.profile_match"}),
    (_old_nccl, "stack.nccl_version", "C2", {"stack.profile_match"}),
], ids=["stub-libcuda-C7", "compat-libcuda-803-C8", "two-libnccl-mapped-C3", "cu12-cu13-mix-C6", "nccl-2.27.3-C2"])
def test_stack_fault_is_caught_with_its_cause(tmp_path, edit, check, cause, allowed):
    root = derive_bundle(H200X2, tmp_path / "bundle", lambda b: b.stack(edit))
    proc, res = doctor(root, tmp_path)
    r = res[check]
    assert r["status"] == "fail", r
    assert r["causes"][0] == cause
    assert proc.returncode == 1
    others = set(failing(res)) - {check}
    assert others <= allowed, f"unrelated failures: {others}"
    for cid in others:  # the side-by-side table fails on the same component, with the same cause
        assert cause in res[cid]["causes"], res[cid]
    assert cause in proc.stdout


def test_the_nccl_that_ran_is_judged_not_the_one_torch_was_built_with(tmp_path):
    """Before, stack.nccl_version passed on torch's 2.28.9 and only stack.nccl_copies failed."""
    root = derive_bundle(H200X2, tmp_path / "bundle", lambda b: b.stack(_preloaded_nccl))
    proc, res = doctor(root, tmp_path)
    r = res["stack.nccl_version"]
    assert r["status"] == "fail" and r["causes"][0] == "C2", r
    assert "NCCL 2.28.3 differs" in r["summary"] and "NCCL's banner" in r["summary"]
    assert res["stack.nccl_copies"]["status"] == "fail" and res["stack.nccl_copies"]["causes"] == ["C3"]


def test_compat_libcuda_on_a_geforce_gpu_fails_c8_804(tmp_path):
    """Forward compatibility is for datacenter GPUs: a newer compat libcuda on GeForce is error 804."""
    def compat_newer(data):
        lib = mapped_libcuda(data)
        compat = "/opt/conda/cuda-compat/libcuda.so.590.44.01"
        lib.update(path=compat, realpath=compat, compat=True, file_version="590.44.01")

    def geforce(b):
        for i in range(2):
            b.device(i, lambda d: d.update(name="NVIDIA GeForce RTX 4090"))

    root = derive_bundle(H200X2, tmp_path / "bundle", lambda b: b.stack(compat_newer), geforce)
    proc, res = doctor(root, tmp_path, "--check", "stack.*")
    r = res["stack.libcuda_compat"]
    assert r["status"] == "fail" and r["causes"] == ["C8"]
    assert "GeForce RTX 4090 does not support forward compatibility (CUDA error 804)" in r["summary"]
    assert failing(res) == ["stack.libcuda_compat"]


@pytest.mark.parametrize("hooks,status", [
    (["torch_memory_saver_hook_mode_preload_cu12.abi3.so", "torch_memory_saver_hook_mode_preload_cu13.abi3.so"], "pass"),
    (["torch_memory_saver_hook_mode_preload_cu12.abi3.so"], "fail"),
    ([], "fail"),
], ids=["both-majors", "cu12-only-on-cu13-torch", "python-only-build"])
def test_tms_hook_for_torchs_cuda_major(tmp_path, hooks, status):
    site = "/opt/torch/.venv/lib/python3.12/site-packages"

    def tms(data):
        data["torch_memory_saver"] = {"location": f"{site}/torch_memory_saver", "version": "0.0.10",
                                      "hook_files": [f"{site}/{h}" for h in hooks]}

    root = derive_bundle(H200X2, tmp_path / "bundle", lambda b: b.stack(tms))
    proc, res = doctor(root, tmp_path, "--check", "stack.tms_hook")
    r = res["stack.tms_hook"]
    assert r["status"] == status, r
    if status == "fail":
        assert r["causes"] == ["C9"] and "TMS_CUDA_MAJOR=13" in r["remediation"]
