"""stack.env_policy: the launch shell's variables against the profile's launch environment.

Through the CLI a user runs, against this venv (no torch) plus real fixture libraries and distributions
(tests/stackfix.py); moved from tests/doctor/test_stack_checks.py."""
import json

from stackfix import clean_env, run_doctor


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


def test_env_policy_redacts_nccl_values_as_the_audit_does(tmp_path):
    """An NCCL_* knob outside the audit's value allowlist is named, its value is not (NCCL_IB_* may hold host names,
    a site may keep a secret under the prefix); the judged ones keep theirs."""
    env = clean_env(NCCL_CUMEM_ENABLE="1", NCCL_IB_GID_INDEX_HOSTS="ib-sw7.corp.internal", NCCL_SITE_NOTE="S3cret-99")
    proc, res = run_doctor(["--check", "stack.env_policy"], env, tmp_path)
    r = res["stack.env_policy"]
    text = json.dumps(r)
    assert "ib-sw7.corp.internal" not in text and "S3cret-99" not in text
    extra = [f["finding"] for f in r["evidence"]["findings"] if f["finding"].startswith("NCCL knobs")][0]
    assert "NCCL_IB_GID_INDEX_HOSTS=<redacted> (in the launch shell)" in extra, extra
    assert r["evidence"]["env"]["NCCL_CUMEM_ENABLE"] == "1" and r["summary"].startswith("NCCL_CUMEM_ENABLE=1 in the launch shell")
