"""The warm pool of probe interpreters (envbuild/doctor/warmpool.py, checks/_warm.py) on torch-free payloads.

`ENVBUILD_WARM_IMPORTS=slowmod` stands in for torch: slowmod takes SLOW_S to import and records when
its import finished, so a test can tell whether a rank's import happened before launch() was called
(warm) or after (cold) without timing the run.
"""
import os
import sys
import time
from pathlib import Path

import pytest
from torch_env import torch_env  # noqa: F401  (fixture)

from envbuild.doctor.launcher import launch
from envbuild.doctor.warmpool import fingerprint, warm_pool

SLOW_S = 1.0

SLOWMOD = f"""
import os, time
time.sleep({SLOW_S})
IMPORTED_AT = time.time()
open(os.path.join(os.environ["SLOWMOD_MARKS"], str(os.getpid())), "w").close()
"""

PAYLOAD = """
import os, sys, time
from _harness import Probe

def main(p):
    import slowmod
    with p.phase("work"):
        print("stdout of rank", p.rank)
        p.evidence.update(imported_at=slowmod.IMPORTED_AT, cwd=os.getcwd(), argv=sys.argv[1:],
                          path0=sys.path[0], pid=os.getpid(), rank_env=os.environ.get("RANK"),
                          extra=os.environ.get("EXTRA"), gpus=os.environ.get("CUDA_VISIBLE_DEVICES"),
                          stdin=os.read(0, 10).decode())
    p.finish("pass", "ok")

if __name__ == "__main__":
    Probe.run(main)
"""


@pytest.fixture
def slow_env(tmp_path, monkeypatch):
    (tmp_path / "slowmod.py").write_text(SLOWMOD)
    (tmp_path / "slow_payload.py").write_text(PAYLOAD)
    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("ENVBUILD_WARM_IMPORTS", "slowmod")
    monkeypatch.setenv("SLOWMOD_MARKS", str(marks))
    return tmp_path


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            data = fh.read()
    except OSError:
        return False
    return data[data.rfind(")") + 2] != "Z"


def wait_imported(marks: Path, n: int, limit_s: float = 60.0) -> None:
    end = time.monotonic() + limit_s
    while len(list(marks.iterdir())) < n:
        assert time.monotonic() < end, "the pool's interpreters never finished their import"
        time.sleep(0.05)


def run(payload_dir: Path, **kw):
    kw.setdefault("gpus", [1, 0])
    return launch(str(payload_dir / "slow_payload.py"), 2, python=sys.executable, args=["--mode", "quick"],
                  deadline_s=60, backend="gloo", **kw)


def test_a_warm_rank_had_its_import_done_before_launch_and_a_cold_one_after(slow_env):
    with warm_pool(sys.executable, 2, gpus=[1, 0]) as pool:
        wait_imported(slow_env / "marks", 2)
        t0 = time.time()
        warm = run(slow_env, env={"EXTRA": "x"})
        assert pool.handed_out == 2
    t1 = time.time()
    cold = run(slow_env, env={"EXTRA": "x"})
    assert warm.ok and cold.ok
    for r in warm.ranks:
        assert r.result["evidence"]["imported_at"] < t0  # torch's stand-in was imported ahead of the launch
    for r in cold.ranks:
        assert r.result["evidence"]["imported_at"] > t1 + SLOW_S * 0.9
    # Everything a payload can see is what a cold start gives it, except its pid and import time.
    for w, c in zip(warm.ranks, cold.ranks):
        ew, ec = dict(w.result["evidence"]), dict(c.result["evidence"])
        for key in ("imported_at", "pid", "cwd"):
            ew.pop(key), ec.pop(key)
        assert ew == ec
        assert ew["argv"] == ["--mode", "quick"] and ew["rank_env"] == str(w.rank) and ew["extra"] == "x"
        assert ew["gpus"] == "1,0" and ew["path0"] == str(slow_env) and ew["stdin"] == ""
        assert w.result["evidence"]["cwd"] == warm.run_dir and c.result["evidence"]["cwd"] == cold.run_dir
        assert Path(w.stdout_path).read_text() == f"stdout of rank {w.rank}\n" == Path(c.stdout_path).read_text()
        assert not alive(w.pid)


@pytest.mark.parametrize("extra", [{"env": {"LD_PRELOAD": ""}},
                                   {"env": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}},
                                   {"gpus": [0]}])
def test_a_variable_read_at_import_time_starts_the_rank_cold(slow_env, extra):
    """The C3 fault's LD_PRELOAD must reach the loader, and a launch on other GPUs must get its own
    CUDA_VISIBLE_DEVICES, as in a cold start."""
    with warm_pool(sys.executable, 2, gpus=[1, 0]) as pool:
        wait_imported(slow_env / "marks", 2)
        t0 = time.time()
        out = run(slow_env, **extra)
        assert pool.handed_out == 0
    assert out.ok
    assert all(r.result["evidence"]["imported_at"] > t0 for r in out.ranks)


def test_another_python_starts_cold(slow_env, tmp_path):
    link = tmp_path / "python-alias"
    link.symlink_to(sys.executable)
    with warm_pool(sys.executable, 1) as pool:
        out = launch(str(slow_env / "slow_payload.py"), 1, python=str(link), gpus=None, args=[], deadline_s=60,
                     backend="gloo")
        assert pool.handed_out == 0 and out.ok


def test_each_launch_refills_the_pool_and_closing_ends_every_interpreter(slow_env):
    with warm_pool(sys.executable, 2, gpus=[1, 0]) as pool:
        first = [p.pid for p in pool._idle]
        out = run(slow_env)
        assert out.ok and sorted(r.pid for r in out.ranks) == sorted(first)
        refill = [p.pid for p in pool._idle]
        assert len(refill) == 2 and not set(refill) & set(first)  # importing while the probe ran
    # closed mid-import (slowmod sleeps) or waiting: nothing survives the pool
    assert [p for p in refill if alive(p)] == []
    with pytest.raises(RuntimeError, match="already open"):
        with warm_pool(sys.executable, 1):
            with warm_pool(sys.executable, 1):
                pass


def test_a_hang_in_a_warm_rank_is_killed_with_its_stack(slow_env):
    payloads = Path(__file__).resolve().parent / "payloads"
    with warm_pool(sys.executable, 2, gpus=[1, 0]) as pool:
        out = launch(str(payloads / "hang_payload.py"), 2, python=sys.executable, gpus=[1, 0], args=["children"],
                     deadline_s=3, backend="gloo")
        assert pool.handed_out == 2
    assert out.timed_out and out.hung_ranks == [1] and out.ranks[1].phase == "collective"
    assert "hang_payload.py" in out.ranks[1].stack_dump and "in main" in out.ranks[1].stack_dump  # faulthandler
    kids = [int(p) for k in range(2) for p in (Path(out.run_dir) / f"rank{k}.kids").read_text().split()]
    assert len(kids) == 4  # the ranks' children, some of which left the process group, are gone too
    assert out.leftover_pids == [] and not any(alive(p) for p in [r.pid for r in out.ranks] + kids)


def test_fingerprint_keeps_import_time_variables_only():
    env = {"LD_PRELOAD": "x.so", "PYTORCH_CUDA_ALLOC_CONF": "a", "TORCH_NCCL_X": "1", "PYTHONPATH": "/p",
           "PYTHONUNBUFFERED": "1", "NCCL_CUMEM_ENABLE": "0", "CUDA_VISIBLE_DEVICES": "0", "RANK": "1"}
    assert fingerprint(env) == {"LD_PRELOAD": "x.so", "PYTORCH_CUDA_ALLOC_CONF": "a", "TORCH_NCCL_X": "1",
                                "CUDA_VISIBLE_DEVICES": "0"}


def test_doctor_opens_a_pool_only_for_gpu_probes_on_the_live_node(monkeypatch):
    """session._probe_pool: quick/full with GPUs -> one interpreter per GPU; static, no GPU or probes.warm=0 -> none."""
    from envbuild.doctor import session
    from envbuild.doctor.context import DoctorContext
    from envbuild.doctor.registry import select
    from envbuild.facts.source import LiveSource

    seen = []
    monkeypatch.setattr("envbuild.doctor.warmpool.WarmPool._spawn", lambda self: seen.append(self.size))
    facts = LiveSource("/", nvml_reader=lambda: {"device_count": 2, "devices": []})

    def pool_size(mode, options=None, checks=()):
        seen.clear()
        ctx = DoctorContext(facts=facts, mode=mode, python=sys.executable, options=dict(options or {}))
        with session._probe_pool(ctx, select(list(checks), [], mode=mode)) as pool:
            return pool.size if pool is not None else None

    assert pool_size("quick") == 2 and seen == [2, 2]
    assert pool_size("quick", {}, ["gpu.basic"]) == 2
    assert pool_size("full") == 2
    assert pool_size("static") is None and seen == []
    assert pool_size("quick", {"probes.warm": "0"}) is None
    assert pool_size("quick", checks=["node.*"]) is None  # no GPU probe selected


def test_the_collectives_payload_with_real_torch_runs_warm_and_exact(torch_env):
    """checks/nccl_collectives.py (torch, torch.distributed on gloo) in interpreters that imported torch first:
    the same exact verdict as the cold runs of tests/test_collectives_gloo.py."""
    python, base = torch_env
    with warm_pool(python, 2, env={**os.environ, **base}, gpus=[0, 1]) as pool:
        out = launch("nccl_collectives.py", 2, python=python, gpus=[0, 1], backend="gloo",
                     args=["--sizes", "4096", "--budget-ms", "5", "--max-iters", "3"], deadline_s=120, env=base)
        assert pool.handed_out == 2
    assert out.ok, [r.stderr_tail for r in out.ranks]
    assert {r.result["status"] for r in out.ranks} == {"pass"}
    assert len(out.ranks[0].result["evidence"]["rows"]) == 5
