"""Warm ranks (envbuild/doctor/warm.py): interpreters that imported torch before the launch become its ranks, give
the result a cold rank gives, are used only when the launch's start-time variables match, and leave nothing.

Real torch CPU payloads (checks/comm_nccl_churn.py, two gloo ranks), the real launcher and pool."""
import os
import time
import uuid

import pytest

from envbuild.doctor import warm
from envbuild.doctor.launcher import launch
from procmark import marked

ARGS = ["--cycles", "2", "--groups", "2", "--numel", "64"]


def maps_torch(pid):
    try:
        with open(f"/proc/{pid}/maps") as fh:
            return "libtorch" in fh.read()
    except OSError:
        return False


def churn(python, **kw):
    return launch("comm_nccl_churn.py", 2, python=python, gpus=None, backend="gloo", deadline_s=120, args=ARGS, **kw)


@pytest.mark.slow
def test_warm_ranks_imported_torch_first_and_give_the_cold_result(torch_env, monkeypatch):
    python, env = torch_env
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    marker = uuid.uuid4().hex
    monkeypatch.setenv("ENVBUILD_TEST_MARK", marker)
    cold = churn(python)
    with warm.pool(python, 2, None) as pool:
        end = time.monotonic() + 120
        while not all(maps_torch(p.pid) for p in pool.waiting):  # torch is loaded before any launch asks
            assert time.monotonic() < end, "the waiting interpreters never imported torch"
            time.sleep(0.2)
        waiting = {p.pid for p in pool.waiting}
        first = churn(python)
        second = churn(python)  # the replacements the first launch's take started
        odd = churn(python, env={"PYTHONHASHSEED": "7"})  # a start-time variable differs: cold ranks
        pool.prepare({"PYTHONHASHSEED": "8"}, 2)  # what the runner does for a check's ProbeSpec.start_env
        prepared = churn(python, env={"PYTHONHASHSEED": "8"})
        assert pool.handed == 6
    for outcome in (cold, first, second, odd, prepared):
        assert outcome.ok, outcome.reason
        assert [r.result["status"] for r in outcome.ranks] == [r.result["status"] for r in cold.ranks]
        assert sorted(m["name"] for m in outcome.ranks[0].result.get("metrics", [])) == \
            sorted(m["name"] for m in cold.ranks[0].result.get("metrics", []))
    assert [r.warm for r in cold.ranks] == [False, False] == [r.warm for r in odd.ranks]
    assert [r.warm for r in first.ranks] == [True, True] == [r.warm for r in second.ranks]
    assert [r.warm for r in prepared.ranks] == [True, True]
    assert {r.pid for r in first.ranks} == waiting  # the very interpreters that had imported torch
    for r in first.ranks:  # whose import began before the launch (torch's libraries were mapped), so the launch
        assert 0 <= r.import_wait_s < r.import_s, r  # waited for part of it at most
    assert [r.import_s for r in cold.ranks] == [None, None]  # a cold rank imports torch as its own start-up
    for r in first.ranks:  # the rank wrote its own logs in its run directory, as a cold rank does
        assert os.path.dirname(r.log_path) == first.run_dir and os.path.exists(r.stdout_path)
    end = time.monotonic() + 10
    while marked(marker) and time.monotonic() < end:
        time.sleep(0.1)
    assert marked(marker) == [], "the pool left interpreters behind after it closed"


def test_warm_pool_is_off_for_static_runs_replays_and_on_request(monkeypatch):
    monkeypatch.delenv("ENVBUILD_WARM_POOL", raising=False)
    assert warm.wanted("quick", True, 1, True) and warm.wanted("full", True, 8, True)
    assert not warm.wanted("static", True, 1, True)
    assert not warm.wanted("quick", False, 1, True)  # a bundle replay runs no payload
    assert not warm.wanted("quick", True, 0, True) and not warm.wanted("quick", True, 1, False)
    monkeypatch.setenv("ENVBUILD_WARM_POOL", "0")
    assert not warm.wanted("quick", True, 8, True)
    monkeypatch.setenv("ENVBUILD_WARM_POOL", "1")
    assert warm.wanted("quick", True, 0, True) and not warm.wanted("quick", True, 0, False)


def test_start_time_variables_decide_whether_a_rank_may_be_warm():
    base = {"PATH": "/bin", "NCCL_DEBUG": "INFO", "LD_LIBRARY_PATH": "/a", "CUDA_VISIBLE_DEVICES": "0"}
    assert warm.start_vars(base) == {"LD_LIBRARY_PATH": "/a", "CUDA_VISIBLE_DEVICES": "0"}
    assert warm.start_vars({**base, "NCCL_CUMEM_ENABLE": "0"}) == warm.start_vars(base)  # read at NCCL init
    for name in ("LD_PRELOAD", "PYTORCH_CUDA_ALLOC_CONF", "PYTHONPATH", "TORCH_NCCL_ASYNC_ERROR_HANDLING"):
        assert warm.start_vars({**base, name: "x"}) != warm.start_vars(base), name
