"""Fixtures for `envbuild record`'s tests and the reader's: one real local Ray cluster (a head and one worker
node, loopback, CPU) per session, and slime-shaped jobs on it (slimejob.py), one per injected fault plus a healthy
one, each recording into its own RUN_DIR, run when a test first asks for it. Node loss kills the worker node, so
it runs last (the jobs after it have no worker node: none needs one)."""
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

REPO = Path(__file__).resolve().parents[2]
FAULTS = ["none", "preload", "cumem", "sigstop", "sigkill", "nodeloss"]


@pytest.fixture(scope="session")
def record_env(torch_env):
    """The environment the cluster, the driver and the CLI run with: torch and this checkout's envbuild."""
    _, extra = torch_env
    path = os.pathsep.join(p for p in (extra.get("PYTHONPATH"), str(REPO), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, "RAY_USAGE_STATS_ENABLED": "0"}


@pytest.fixture(scope="session")
def slime_cluster(record_env):
    pytest.importorskip("ray")
    from envbuild.fleet.localray import LocalRayCluster

    with LocalRayCluster(workers=1, num_cpus=1, env=record_env) as c:
        yield c


class FaultRuns:
    """fault -> the driver's result of the job with that fault alone ("none": the healthy job), run on first use."""

    def __init__(self, cluster, env, root: Path):
        self.cluster, self.env, self.root, self.done = cluster, env, root, {}

    def __getitem__(self, fault: str) -> dict:
        from slimejob import run_slime_job

        if fault not in FAULTS:
            raise KeyError(fault)
        if fault == "nodeloss":  # it kills the worker node the other jobs place actors on: every other job first
            for other in FAULTS[:-1]:
                self[other]
        if fault not in self.done:
            try:
                (self.root / fault).mkdir()
                self.done[fault] = run_slime_job(self.cluster.address, self.root / fault / "run",
                                                 [] if fault == "none" else [fault], self.env,
                                                 node_session=self.cluster.procs[1].pid)
            except BaseException as exc:  # a job that failed fails every test that asks for it, once
                self.done[fault] = exc
        if isinstance(self.done[fault], BaseException):
            raise self.done[fault]
        return self.done[fault]


@pytest.fixture(scope="session")
def fault_runs(slime_cluster, record_env, tmp_path_factory):
    """The jobs, one per fault: fault_runs["sigstop"] = {"run_dir", "pids", "actor_ids", "errors", ...}."""
    return FaultRuns(slime_cluster, record_env, tmp_path_factory.mktemp("slime"))
