"""`envbuild doctor --ray` against a real local Ray cluster: a head and two worker nodes (`ray start`, loopback,
CPU only), one cluster for the module. The cross-node collective runs on gloo with the torch of
tests/torch_env.py, handed to the Ray workers the way a job does: through its runtime_env."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("ray")

from envbuild.fleet.localray import LocalRayCluster  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    with LocalRayCluster(workers=2, num_cpus=1) as c:
        yield c
    assert c.leftovers() == [], "Ray processes left behind"


def doctor(*args, timeout=300):
    env = {**os.environ, "COLUMNS": "300", "RAY_USAGE_STATS_ENABLED": "0"}
    return subprocess.run([sys.executable, "-m", "envbuild", "doctor", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=env)


def test_static_sweep_with_audit(cluster, tmp_path, monkeypatch):
    runtime_env = json.dumps({"env_vars": {"NCCL_CUMEM_ENABLE": "1", "HF_TOKEN": "hf_secret"}})
    proc = doctor("--ray", cluster.address, "--audit", "--runtime-env", runtime_env, "--json",
                  tmp_path / "fleet.json", "--junit", tmp_path / "fleet.xml")
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    data = json.loads((tmp_path / "fleet.json").read_text())
    assert data["schema"] == "envbuild.fleet" and data["node_count"] == 3
    names = [n["node"] for n in data["nodes"]]
    host = names[0].split("@")[0]
    assert names == [f"{host}@head", f"{host}@w1", f"{host}@w2"]
    for n in data["nodes"]:
        assert n["error"] is None and n["schema"] == "envbuild.report"  # each node ran the real doctor
        assert {r["check_id"] for r in n["results"]} >= {"node.ulimits", "stack.env_policy"}
        audit_env = [f for f in n["fleet_findings"] if f["check_id"] == "fleet.audit_env"][0]
        # the job's runtime_env reached the worker; the driver's shell does not have it
        assert audit_env["status"] == "warn" and "NCCL_CUMEM_ENABLE" in audit_env["summary"]
        assert "hf_secret" not in json.dumps(n)  # not a steering variable: never read
        policy = [r for r in n["results"] if r["check_id"] == "stack.env_policy"][0]
        assert policy["summary"].startswith("NCCL_CUMEM_ENABLE=1 in the job's runtime_env:"), policy["summary"]
    agree = [r for r in data["fleet_results"] if r["check_id"] == "fleet.audit_agree"]
    assert agree and agree[0]["status"] == "pass"
    assert "fleet.ray_nodes" in proc.stdout or "3 node(s)" in proc.stdout


def test_quick_sweep_runs_gloo_collectives(cluster, tmp_path, torch_env):
    python, env = torch_env
    runtime_env = json.dumps({"env_vars": env} if env else {})
    proc = doctor("--ray", cluster.address, "--quick", "--runtime-env", runtime_env, "--json", tmp_path / "f.json",
                  "--prometheus", tmp_path / "f.prom", "--collective-mb", "1", "--collective-iters", "3")
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    data = json.loads((tmp_path / "f.json").read_text())
    fleet = {r["check_id"]: r for r in data["fleet_results"]}
    for op in ("allreduce", "alltoall"):
        r = fleet[f"comm.fleet_{op}"]
        assert r["evidence"]["backend"] == "gloo" and len(r["evidence"]["per_node_busbw_gbps"]) == 3, r
        assert "slowest" in r["summary"] and "no GPU in the cluster" in r["summary"]
        assert all(v > 0 for v in r["evidence"]["per_node_busbw_gbps"].values())
    for n in data["nodes"]:  # a Ray without GPUs: the GPU probes say why they skipped, per node
        gpu = [r for r in n["results"] if r["check_id"] == "gpu.basic"][0]
        assert gpu["status"] == "skip" and gpu["summary"]
        mine = {f["check_id"]: f for f in n["fleet_findings"]}
        assert mine["comm.fleet_allreduce"]["metrics"][0]["unit"] == "GB/s"
    assert 'envbuild_metric{node="' in (tmp_path / "f.prom").read_text()


def test_quick_sweep_without_torch_is_one_fleet_finding_not_dead_nodes(cluster, tmp_path):
    """The job's env has no torch (no runtime_env here, and the test venv has none): every rank of the collective
    fails the same way. That is the job's environment, said once fleet-wide; no node is called dead or hung."""
    proc = doctor("--ray", cluster.address, "--quick", "--json", tmp_path / "f.json", "--collective-mb", "1",
                  "--collective-iters", "1")
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    data = json.loads((tmp_path / "f.json").read_text())
    fleet = {r["check_id"]: r for r in data["fleet_results"]}
    summary = fleet["comm.fleet_collectives"]["summary"]
    assert "every rank failed the same way, so it is the job's environment, not a node" in summary, summary
    assert "torch is not importable" in summary and "py_executable" in fleet["comm.fleet_collectives"]["remediation"]
    assert "died or hung" not in proc.stdout + json.dumps(data)
    for n in data["nodes"]:
        assert n["error"] is None
        assert not [f for f in n["fleet_findings"] if f["check_id"] == "comm.fleet_collectives"], n["fleet_findings"]


def test_an_option_every_node_would_refuse_is_bad_usage(cluster):
    proc = doctor("--ray", cluster.address, "--set", "no.such_option=1", timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "no.such_option" in proc.stderr


USER_JOB = """
import sys, ray
ray.init(address=sys.argv[1], log_to_driver=False, logging_level="ERROR")

@ray.remote(num_cpus=0)
class TrainActor:  # what a slime user adds to their actors: one call, after NCCL is set up
    def audit(self, out):
        from envbuild.fleet.audit import audit_actor
        return audit_actor(out, group="train")

actors = [TrainActor.options(runtime_env={"env_vars": {"NCCL_CUMEM_ENABLE": v, "GITHUB_TOKEN": "ghp_x"}}).remote()
          for v in ("0", "0", "1")]
print(ray.get([a.audit.remote(sys.argv[2]) for a in actors], timeout=120))
"""


def test_audit_actor_in_a_users_own_ray_job(cluster, tmp_path):
    out = tmp_path / "audit"
    job = subprocess.run([sys.executable, "-c", USER_JOB, cluster.address, str(out)], capture_output=True, text=True,
                         timeout=180)
    assert job.returncode == 0, job.stderr[-2000:]
    files = sorted(out.glob("*.json"))
    assert len(files) == 3
    assert "ghp_x" not in "".join(f.read_text() for f in files)  # not an allowlisted variable: never read
    merged = subprocess.run([sys.executable, "-m", "envbuild", "report", "merge", str(out), "-o", str(tmp_path / "m.json")],
                            capture_output=True, text=True)
    assert merged.returncode == 1, merged.stdout
    agree = [r for r in json.loads((tmp_path / "m.json").read_text())["fleet_results"]
             if r["check_id"] == "fleet.audit_agree"][0]
    assert agree["status"] == "fail" and "NCCL_CUMEM_ENABLE: 0 on 2 vs 1 on 1" in agree["summary"], agree


def test_unreachable_address_exits_2():
    proc = doctor("--ray", "127.0.0.1:9", timeout=60)
    assert proc.returncode == 2 and "cannot reach a Ray head" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_worker_killed_mid_run_is_reported(cluster, tmp_path, torch_env):
    """Last in the module: it leaves a dead node behind."""
    python, env = torch_env
    runtime_env = json.dumps({"env_vars": env} if env else {})
    argv = [sys.executable, "-m", "envbuild", "doctor", "--ray", cluster.address, "--quick", "--runtime-env",
            runtime_env, "--json", str(tmp_path / "f.json"), "--collective-mb", "64", "--collective-iters", "10000",
            "--deadline", "300"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "300"})
    killed_at, err = None, []
    try:
        for line in proc.stderr:  # wait until the collective runs, then kill worker node w2 and all it started
            err.append(line)
            if "collectives:" in line:
                time.sleep(3)
                killed_at = time.monotonic()
                cluster.kill_worker(2, signal.SIGKILL)
                break
        out, rest = proc.communicate(timeout=400)
    finally:
        proc.kill()
    assert killed_at is not None, "".join(err)  # the collective began
    after_kill = time.monotonic() - killed_at
    assert "Traceback" not in out + rest, rest
    # Not the deadline: 10000 collectives of 64 MB outlast its 300 s, so an exit soon after the kill means the
    # death stopped the rest. Measured from the kill, so a slow start on a loaded machine cannot fail it.
    assert proc.returncode == 1 and after_kill < 90, (after_kill, out[-2000:])
    data = json.loads((tmp_path / "f.json").read_text())
    w2 = [n for n in data["nodes"] if n["node"].endswith("@w2")][0]
    bad = [f for f in w2["fleet_findings"] if f["status"] == "error"]
    assert bad and "(while: " in bad[0]["summary"], bad  # what it was doing when it died
    # in plain words, not Ray's "ActorUnavailableError ... may or may not have been executed"
    assert "Ray worker" in bad[0]["summary"] and "may or may not" not in json.dumps(data), bad
    others = [f for n in data["nodes"] if not n["node"].endswith("@w2") for f in n["fleet_findings"]
              if f["check_id"] == "comm.fleet_collectives"]
    assert len(others) == 2 and all(f["status"] == "error" for f in others), others  # their own gloo error, or "stopped"
    fleet = {r["check_id"]: r for r in data["fleet_results"]}
    summary = fleet["comm.fleet_collectives"]["summary"]
    assert fleet["comm.fleet_collectives"]["status"] == "error" and "@w2 died or hung" in summary, summary
