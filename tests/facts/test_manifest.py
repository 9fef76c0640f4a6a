"""`envbuild capture --env OUT.toml`: the env's stack written as a loadable profile whose facts are
verified = true; doctoring the same env against that capture matches every component."""
import json
import subprocess
import sys

from envbuild.profile import load_profile_file
from stackfix import REPO, clean_env, dist_info, fake_nccl, run_doctor


def test_capture_env_writes_a_profile_the_doctor_accepts(tmp_path):
    site = tmp_path / "site"
    lib = site / "nvidia" / "nccl" / "lib"
    fake_nccl(lib, "2.28.9")
    dist_info(site, "nvidia-nccl-cu12", "2.28.9")
    dist_info(site, "transformers", "5.12.1")
    dist_info(site, "torch-memory-saver", "0.0.10",
              direct_url={"url": "https://github.com/zhuzilin/torch_memory_saver",
                          "vcs_info": {"vcs": "git", "commit_id": "8d30c59c0123456789abcdef0123456789abcdef"}})
    env = clean_env(PYTHONPATH=str(site), LD_LIBRARY_PATH=str(lib), NCCL_NVLS_ENABLE="0", NCCL_VERSION="2.28.3-1",
                    ENVBUILD_IMAGE="slimerl/slime:test")
    out = tmp_path / "my-image" / "profile.toml"
    penv = dict(env, PYTHONPATH=f"{REPO}:{env['PYTHONPATH']}")
    proc = subprocess.run([sys.executable, "-m", "envbuild", "capture", "--env", str(out)], capture_output=True,
                          text=True, env=penv, timeout=120)
    assert proc.returncode == 0, proc.stderr
    prof = load_profile_file(out)
    assert prof.name == "my-image" and prof.image == "slimerl/slime:test"
    comps = prof.components
    assert comps["nccl"].version == "2.28.9" and comps["nccl"].pip_name == "nvidia-nccl-cu12"
    assert comps["transformers"].version == "5.12.1"
    assert comps["torch_memory_saver"].commit.startswith("8d30c59c")
    assert all(c.verified for c in comps.values())
    assert all(c.source.startswith("captured from slimerl/slime:test on ") and "envbuild capture --env" in c.source
               for c in comps.values())
    assert prof.launch_env["NCCL_NVLS_ENABLE"].value == "0" and "NCCL_VERSION" not in prof.launch_env
    assert "libnccl" in out.read_text()  # the mapped libraries are listed as comments
    # The same env doctored against its own capture: every component of the table matches.
    proc, res = run_doctor(["--check", "stack.profile_match", "--check", "stack.nccl_version", "--profile", str(out)],
                           env, tmp_path)
    rows = res["stack.profile_match"]["evidence"]["rows"]
    assert {r["verdict"] for r in rows} == {"match"}, json.dumps(rows, indent=1)
    assert res["stack.profile_match"]["status"] == "pass" and res["stack.nccl_version"]["status"] == "pass"


def test_capture_env_with_a_python_that_cannot_run_is_exit_2(tmp_path):
    bad = tmp_path / "python"
    bad.write_text("#!/bin/sh\nexit 7\n")
    bad.chmod(0o755)
    proc = subprocess.run([sys.executable, "-m", "envbuild", "capture", "--env", str(tmp_path / "x.toml"),
                           "--python", str(bad)], capture_output=True, text=True, cwd=str(REPO), timeout=60)
    assert proc.returncode == 2
    assert "cannot read the stack of" in proc.stderr and "exited 7" in proc.stderr
    assert not (tmp_path / "x.toml").exists()
