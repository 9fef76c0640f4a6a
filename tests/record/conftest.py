"""Fixtures for `envbuild record`'s tests and the reader's: one real local Ray cluster (a head and one worker
node, loopback, CPU) per session, and one slime-shaped job on it with every fault injected (slimejob.py), whose
RUN_DIR the tests read. `run_slime_job` runs another job (other faults) on the same cluster."""
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from torch_env import torch_env  # noqa: E402,F401

REPO = Path(__file__).resolve().parents[2]
ALL_FAULTS = ["preload", "cumem", "sigstop", "sigkill", "nodeloss"]


@pytest.fixture(scope="session")
def record_env(torch_env):  # noqa: F811
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


@pytest.fixture(scope="session")
def slime_run(slime_cluster, record_env, tmp_path_factory):
    """The job with every fault: {"run_dir", "pids", "actor_ids", "errors", ...} (slimejob.drive)."""
    from slimejob import run_slime_job

    root = tmp_path_factory.mktemp("slime")
    return run_slime_job(slime_cluster.address, root / "run", ALL_FAULTS, record_env,
                         node_session=slime_cluster.procs[1].pid)
