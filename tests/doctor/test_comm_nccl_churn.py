"""comm.nccl_churn on CPU torch + gloo: the real payload (checks/comm_nccl_churn.py) run by the launcher,
judged by judge_churn."""
import statistics


from envbuild.doctor.checks.comm_nccl_churn import judge_churn
from envbuild.doctor.launcher import launch
from envbuild.report.model import Status


def churn(torch_env, env=None, cycles=4):
    python, base = torch_env
    return launch("comm_nccl_churn.py", 2, python=python, gpus=None, backend="gloo",
                  args=["--cycles", str(cycles), "--groups", "8", "--numel", "256"], deadline_s=120,
                  env={**base, **(env or {})})


def test_churn_passes_without_growth_and_fails_on_a_descriptor_leak(torch_env):
    out = churn(torch_env)
    good = judge_churn(out)
    assert good.status is Status.PASS, good.summary
    for r in out.ranks:  # an even number of cycles: the median is the mean of the middle two
        cycle_s = r.result["evidence"]["cycle_s"]
        median = next(m["value"] for m in r.result["metrics"] if m["name"] == "cycle_s_median")
        assert len(cycle_s) == 4 and median == round(statistics.median(cycle_s), 4)
    assert "no growth" in good.summary
    leak = judge_churn(churn(torch_env, env={"ENVBUILD_TEST_LEAK_FDS": "10"}))
    assert leak.status is Status.FAIL and "descriptors grew by 10 fds per cycle" in leak.summary
    assert leak.causes == ["M4"]


def test_churn_hang_names_the_cycle_phase(torch_env):
    python, base = torch_env
    out = launch("comm_nccl_churn.py", 2, python=python, gpus=None, backend="gloo",
                 args=["--cycles", "3", "--groups", "4", "--numel", "64"], deadline_s=30,
                 env={**base, "ENVBUILD_TEST_SIGSTOP_AT": "cycle 1 collectives"}, phase_deadlines={"*": 4})
    res = judge_churn(out)
    assert res.status is Status.FAIL and "hung" in res.summary
    assert res.evidence["phases"]["rank1"] == "cycle 1 collectives"
    assert out.leftover_pids == []
