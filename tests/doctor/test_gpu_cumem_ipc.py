"""gpu.cumem_ipc's judgement (evaluate) on hand-written probe output, without torch or a GPU."""


from envbuild.doctor.checks.gpu_cumem_ipc import evaluate as cumem_evaluate


def sub(name, status, **kw):
    return dict({"name": name, "status": status, "summary": f"{name} {status}", "causes": ["M3", "O3"]}, **kw)


def test_expandable_ipc_failure_is_fail_only_where_the_env_uses_expandable_segments():
    data = {"status": "fail", "evidence": {"subtests": [sub("vmm.churn", "pass"), sub("torch_mp.expandable_on", "fail")],
                                           "privileges": {"uid": 1000, "ptrace_scope": 1}, "alloc_conf": None}}
    out = {r.subject: r for r in cumem_evaluate(data)}
    assert out["vmm.churn"].status.value == "pass" and out["vmm.churn"].causes == []
    assert out["torch_mp.expandable_on"].status.value == "warn"
    assert "does not set expandable_segments:True" in out["torch_mp.expandable_on"].summary
    assert out["torch_mp.expandable_on"].evidence["privileges"]["ptrace_scope"] == 1
    data["evidence"].update(env_enables_expandable_segments=True, alloc_conf="expandable_segments:True")
    out = {r.subject: r for r in cumem_evaluate(data)}
    assert out["torch_mp.expandable_on"].status.value == "fail"
    assert out["torch_mp.expandable_on"].causes == ["M3", "O3"]
    assert "ptrace_scope" in out["torch_mp.expandable_on"].remediation


def test_cumem_probe_that_stopped_early_keeps_its_own_verdict():
    out = cumem_evaluate({"status": "fail", "summary": "the driver reports no virtual memory management",
                          "causes": ["M1"], "evidence": {}})
    assert [(r.status.value, r.causes) for r in out] == [("fail", ["M1"])]
