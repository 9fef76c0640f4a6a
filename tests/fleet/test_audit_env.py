"""The Ray worker audit's environment goes through the one redaction policy (envbuild/redact.py), the one a
capture bundle uses: the audit had an allowlist of its own that kept fewer values and scrubbed none."""
from envbuild.fleet.audit import environment
from envbuild.redact import redact_env


def test_the_audit_keeps_and_hides_what_a_capture_does():
    env = {"NCCL_IB_HCA": "mlx5_0", "NCCL_NET_PLUGIN": "https://user:hunter2@plugins.example/libnccl-net.so",
           "LD_AUDIT": "/tmp/spy.so", "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1",
           "TORCH_NCCL_BLOCKING_WAIT": "1", "OPENAI_API_KEY": "sk-" + "x" * 30}
    seen = environment(env)
    assert "OPENAI_API_KEY" not in seen  # not a variable the audit reads at all
    assert seen == {k: v for k, v in redact_env(env).items() if k in seen}
    assert seen["NCCL_NET_PLUGIN"] == "https://user:<redacted>@plugins.example/libnccl-net.so"
    assert seen["LD_AUDIT"] == "<redacted>"
    assert seen["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"] == "1" and seen["NCCL_IB_HCA"] == "mlx5_0"
