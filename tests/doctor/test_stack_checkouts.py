"""stack.checkouts: sglang's checkout at another commit, slime's patch not applied (M4).

Through the CLI a user runs, against this venv (no torch) plus real fixture libraries and distributions
(tests/stackfix.py); moved from tests/doctor/test_stack_checks.py."""
import subprocess

from stackfix import clean_env, run_doctor


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
