"""The stack probe (checks/stack_probe.py) run for real by this venv's python, which has no torch: it must
still report the libraries it can reach (with versions), the distributions and the environment, and it
must print one JSON object even when a library hangs or writes to stdout."""
import json
import os
import subprocess
import sys
from importlib import metadata

import stackfix
from stackfix import PROBE, clean_env, dist_info, fake_cudart, fake_libcuda, fake_nccl, run_probe


def test_probe_without_torch_reports_distributions_and_env():
    env = clean_env(NCCL_CUMEM_ENABLE="1", PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True", HOME_X="no")
    data = run_probe(env)
    assert data["_rc"] == 0, data["_stderr"]
    assert data["payload"] == "stack_probe" and data["payload_version"] == 1
    assert data["torch"]["present"] is False and "torch" in data["torch"]["error"]
    dists = {d["name"].lower(): d["version"] for d in data["distributions"]}
    assert dists["click"] == metadata.version("click")
    assert data["env"]["NCCL_CUMEM_ENABLE"] == "1"
    assert data["env"]["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert "HOME_X" not in data["env"]
    assert os.path.normpath(data["python"]["executable"]) == os.path.normpath(sys.executable)
    assert data["init"]["method"].startswith("no torch")


def test_probe_reads_versions_of_every_reachable_copy(tmp_path):
    site = tmp_path / "site"
    pip_nccl = fake_nccl(site / "nvidia" / "nccl" / "lib", "2.28.9")
    prefix = tmp_path / "prefix"
    conda_nccl = fake_nccl(prefix / "lib", "2.27.3")
    fake_cudart(prefix / "lib", 12, 12080)
    dist_info(site, "nvidia-nccl-cu12", "2.28.9")
    env = clean_env(PYTHONPATH=str(site), CONDA_PREFIX=str(prefix), LD_LIBRARY_PATH=str(prefix / "lib"))
    data = run_probe(env)
    reach = {r["path"]: r for r in data["reachable"]}
    assert reach[str(pip_nccl)]["version"] == "2.28.9"
    assert reach[str(pip_nccl)]["version_string"] == "2.28.9+cuda12.9"
    assert "site-packages" in reach[str(pip_nccl)]["origins"]
    assert reach[str(conda_nccl)]["version"] == "2.27.3"
    assert set(reach[str(conda_nccl)]["origins"]) >= {"LD_LIBRARY_PATH", "prefix"}
    assert reach[str(prefix / "lib" / "libcudart.so.12")]["api_version"] == "12.8"
    # Without torch the probe loads libnccl by name: LD_LIBRARY_PATH wins, and only that copy is mapped.
    mapped = [m for m in data["mapped"] if m["family"] == "libnccl"]
    assert [m["path"] for m in mapped] == [str(conda_nccl)]
    assert mapped[0]["api_version"] == "2.27.3" and mapped[0]["version"] == "2.27.3"
    assert data["init"]["nccl_get_version"] == "2.27.3"
    assert data["resolution"]["libnccl.so.2"][0]["path"] == str(conda_nccl)
    assert data["cuda_runtime"]["version"] == "12.8"


def test_probe_sees_two_mapped_copies_and_a_stub_libcuda(tmp_path):
    a = fake_nccl(tmp_path / "a", "2.28.9")
    b = fake_nccl(tmp_path / "b", "2.28.3")
    stubs = tmp_path / "cuda" / "lib64" / "stubs"
    fake_libcuda(stubs, driver="575.00", rc=34)
    env = clean_env(LD_PRELOAD=f"{a} {b}", LD_LIBRARY_PATH=str(stubs))
    data = run_probe(env)
    mapped = {m["path"]: m for m in data["mapped"]}
    assert mapped[str(a)]["version"] == "2.28.9" and mapped[str(b)]["version"] == "2.28.3"
    cuda = [m for m in data["mapped"] if m["family"] == "libcuda"]
    assert cuda and cuda[0]["stub"] is True
    assert "CUDA_ERROR_STUB_LIBRARY" in cuda[0]["api_error"]
    assert data["resolution"]["libcuda.so.1"][0]["stub"] is True


def test_probe_flags_compat_libcuda_and_reads_its_file_version(tmp_path):
    compat = tmp_path / "usr" / "local" / "cuda" / "compat"
    fake_libcuda(compat, driver="575.57.08", cuda_code=12090)
    data = run_probe(clean_env(LD_LIBRARY_PATH=str(compat)))
    cuda = [m for m in data["mapped"] if m["family"] == "libcuda"][0]
    assert cuda["compat"] is True and cuda["stub"] is False
    assert cuda["file_version"] == "575.57.08"
    assert data["cuda_driver"] == {"mapped": True, "path": str(compat / "libcuda.so.575.57.08"), "version_code": 12090,
                                   "version": "12.9", "error": None}


def test_the_bound_driver_is_the_first_copy_loaded_whatever_their_addresses(tmp_path):
    """Two libcuda copies in LD_PRELOAD are both mapped; the probe's dlopen("libcuda.so.1") (the CUDA runtime's at
    cuInit) gets the first loaded, whichever lies lower in /proc/self/maps: cuda_driver names that one, in either
    order."""
    a = fake_libcuda(tmp_path / "a", driver="580.159.04", cuda_code=13000)
    b = fake_libcuda(tmp_path / "b", driver="575.57.08", cuda_code=12090)
    for first, second, version in ((a, b, "13.0"), (b, a, "12.9")):
        data = run_probe(clean_env(LD_PRELOAD=f"{first} {second}"))
        assert sorted(m["path"] for m in data["mapped"] if m["family"] == "libcuda") == sorted([str(a), str(b)])
        assert (data["cuda_driver"]["path"], data["cuda_driver"]["version"]) == (str(first), version)


def test_probe_keeps_stdout_clean_and_survives_a_hanging_import(tmp_path):
    """A library that prints to stdout (NCCL_DEBUG=INFO does) must not corrupt the JSON, and a hang in
    CUDA/NCCL init must end in the probe's own watchdog with the phase that hung."""
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("print('NCCL INFO noise on stdout')\nimport time\ntime.sleep(600)\n")
    env = stackfix.torch_env(PYTHONPATH=str(site))
    proc = subprocess.run([sys.executable, str(PROBE), "--init-timeout", "2"], capture_output=True, text=True,
                          env=env, timeout=60)
    assert proc.returncode == 3
    data = json.loads(proc.stdout)
    assert "did not finish within 2 s" in data["errors"]["init"] and "import torch" in data["errors"]["init"]
    assert "NCCL INFO noise" in proc.stderr and "NCCL INFO noise" not in proc.stdout
    assert isinstance(data["mapped"], list)


def test_probe_reads_git_checkout_commit_and_patch_state(tmp_path):
    repo = tmp_path / "sglang"
    pkg = repo / "python" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("__version__ = '0.5.15.post1'\n")
    (pkg / "weights.py").write_text("def update():\n    return 1\n")
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-qm", "base"], check=True)
    head = subprocess.run(git[:3] + ["rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    (pkg / "weights.py").write_text("def update():\n    return 2\n")
    patch = tmp_path / "sglang-fix.patch"
    patch.write_text(subprocess.run(git[:3] + ["diff"], capture_output=True, text=True).stdout)
    other = tmp_path / "other.patch"
    other.write_text(patch.read_text().replace("return 1", "return 7").replace("return 2", "return 8"))
    patches = tmp_path / "patches.json"
    patches.write_text(json.dumps([{"target": "sglang", "file": "sglang-fix.patch", "path": str(patch)},
                                   {"target": "sglang", "file": "other.patch", "path": str(other)},
                                   {"target": "sglang", "file": "gone.patch", "path": str(tmp_path / "gone")}]))
    data = run_probe(clean_env(PYTHONPATH=str(repo / "python")), "--patches", str(patches))
    git_info = data["sglang"]["git"]
    assert git_info["commit"] == head and git_info["dirty"] is True and git_info["root"] == str(repo)
    states = {p["file"]: p["state"] for p in git_info["patches"]}
    assert states == {"sglang-fix.patch": "applied", "other.patch": "conflicts", "gone.patch": "missing-patch-file"}


def test_probe_with_the_cpu_torch_wheel(torch_env):
    """With a real torch (the CPU wheel, from tests/torch_env.py) the probe reports its version and CUDA tag."""
    python, torch_vars = torch_env
    env = stackfix.torch_env(PYTHONPATH=torch_vars.get("PYTHONPATH", ""))
    truth = subprocess.run([python, "-c", "import torch; print(torch.__version__, torch.version.cuda)"],
                           capture_output=True, text=True, env=env, check=True).stdout.split()
    data = run_probe(env, python=python, timeout=180)
    t = data["torch"]
    assert t["present"] is True and t["version"] == truth[0]
    assert str(t["cuda"]) == truth[1]
    assert t["cuda_tag"] == ("cpu" if truth[0].endswith("+cpu") else t["cuda_tag"])
    assert t["cuda_available"] is False and "no GPU" in data["init"]["method"]


def test_probe_lists_torch_memory_saver_hook_libraries(tmp_path):
    site = tmp_path / "site"
    (site / "torch_memory_saver").mkdir(parents=True)
    (site / "torch_memory_saver" / "__init__.py").write_text("")
    for name in ("torch_memory_saver_hook_mode_preload_cu12.abi3.so", "torch_memory_saver_hook_mode_torch_cu12.abi3.so"):
        (site / name).write_bytes(b"\x7fELF")
    dist_info(site, "torch_memory_saver", "0.0.10")
    data = run_probe(clean_env(PYTHONPATH=str(site)))
    tms = data["torch_memory_saver"]
    assert tms["location"] == str(site / "torch_memory_saver") and tms["version"] == "0.0.10"
    assert [os.path.basename(h) for h in tms["hook_files"]] == [
        "torch_memory_saver_hook_mode_preload_cu12.abi3.so", "torch_memory_saver_hook_mode_torch_cu12.abi3.so"]
