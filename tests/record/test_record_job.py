"""`envbuild record` on a real local Ray cluster (a head and a worker node, CPU, gloo): a slime-shaped job
(slimejob.py: job runtime env from `envbuild record env`, per-actor env_vars, a trainer group rebuilt every step,
a rollout actor with spawn and fork children), one job per injected fault (the session fixture `fault_runs`);
each fault's evidence must be in the record of the process it hit."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")

REPO = Path(__file__).resolve().parents[2]


def proc_dir(run, who):
    pid = run["pids"][who]
    found = list(Path(run["run_dir"]).glob(f"*/proc/{pid}-*"))
    assert len(found) == 1, f"{who} (pid {pid}): {found}"  # one record per process, hook and bootstrap together
    return found[0]


def events(d):
    return [json.loads(line) for line in (d / "events.jsonl").read_text().splitlines()]


def test_every_process_of_the_job_is_recorded_once_with_its_ray_actor(fault_runs):
    # the healthy job: every process lives past the recorder's deferred start records (hook.START_DELAY_S)
    slime_run = fault_runs["none"]
    for who in ("trainer0", "trainer1", "rollout", "spawn_child", "fork_child", "straggler"):
        d = proc_dir(slime_run, who)
        start = json.loads((d / "start.json").read_text())
        assert start["schema"] == "envbuild.record.process/1" and start["pid"] == slime_run["pids"][who]
        assert start["env"]["ENVBUILD_RECORD_DIR"] == slime_run["run_dir"]
        assert (d / "libs.jsonl").exists() and (d / "alive.json").exists()
    for who, cls in (("trainer0", "Trainer"), ("rollout", "Rollout"), ("straggler", "Straggler")):
        ctx = [e for e in events(proc_dir(slime_run, who)) if e["kind"] == "ray_context"]
        assert ctx and ctx[0]["actor_class"] == cls and ctx[0]["actor_id"] == slime_run["actor_ids"][who]
    # an actor that ended itself with exit_actor inside the start delay (Ray runs no atexit there): its actor,
    # its exit and its full start records, written when it called exit_actor
    brief = proc_dir(slime_run, "brief")
    found = events(brief)
    ctx = [e for e in found if e["kind"] == "ray_context"]
    assert ctx and ctx[0]["actor_class"] == "Brief" and ctx[0]["actor_id"] == slime_run["brief_actor_id"], found
    assert [e.get("how") for e in found if e["kind"] == "exit"] == ["exit_actor"], found
    assert not json.loads((brief / "start.json").read_text()).get("partial")
    run = json.loads((Path(slime_run["run_dir"]) / "run.json").read_text())
    assert run["schema"] == "envbuild.record.run/1" and run["setup_hook"] == "envbuild.record.hook.setup"
    node = json.loads(next(Path(slime_run["run_dir"]).glob("*/node.json")).read_text())
    assert node["schema"] == "envbuild.record.node/1" and node["boot_id"]


def test_a_process_on_a_lost_node_keeps_at_least_its_first_record(fault_runs):
    """The node is killed at the end of the first step, often within the recorder's start delay of the straggler's
    start: its process then has the partial start.json written at its first moment, never a missing one."""
    lost = fault_runs["nodeloss"]
    for who in ("trainer0", "trainer1", "rollout", "straggler"):
        start = json.loads((proc_dir(lost, who) / "start.json").read_text())
        assert start["schema"] == "envbuild.record.process/1" and start["pid"] == lost["pids"][who], who
        if not start.get("partial"):
            assert start["env"]["ENVBUILD_RECORD_DIR"] == lost["run_dir"], who


def test_children_started_by_an_actor_are_recorded_through_the_inherited_environment(fault_runs):
    slime_run = fault_runs["none"]
    rollout = slime_run["pids"]["rollout"]
    spawn = json.loads((proc_dir(slime_run, "spawn_child") / "start.json").read_text())
    fork = json.loads((proc_dir(slime_run, "fork_child") / "start.json").read_text())
    assert spawn["ppid"] == rollout and spawn["origin"] == "sitecustomize"
    assert spawn["role"] == "multiprocessing spawn child"
    assert fork["ppid"] == rollout and fork["origin"] == "fork" and fork["role"] == "fork child"
    # the actor's own env_vars (merged over the job's by Ray) reach its children
    assert spawn["env"]["NCCL_CUMEM_ENABLE"] == "0"


def test_the_group_rebuilt_every_step_is_in_the_trainers_timeline(fault_runs):
    slime_run = fault_runs["none"]
    ops = [e["op"] for e in events(proc_dir(slime_run, "trainer1")) if e["kind"] == "process_group"]
    assert ops == ["init", "destroy"] * 3, ops  # one group per step, three steps
    init = next(e for e in events(proc_dir(slime_run, "trainer0")) if e["kind"] == "process_group")
    assert init["backend"] == "gloo" and init["world"] == 2 and init["rank"] == 0


def test_the_preloaded_library_is_seen_in_that_actor_only(fault_runs):
    slime_run = fault_runs["preload"]
    def libnccl(who):
        snap = json.loads((proc_dir(slime_run, who) / "libs.jsonl").read_text().splitlines()[0])
        return snap["when"], snap["libs"].get("libnccl")

    when, lib = libnccl("trainer0")
    assert when == "start" and lib["path"].endswith("other-nccl/libnccl.so.2"), lib
    assert libnccl("trainer1")[1] is None and libnccl("rollout")[1] is None
    start = json.loads((proc_dir(slime_run, "trainer0") / "start.json").read_text())
    assert start["env"]["LD_PRELOAD"].endswith("other-nccl/libnccl.so.2")


def test_the_flipped_cumem_setting_is_in_that_actors_start_record(fault_runs):
    slime_run = fault_runs["cumem"]
    env = {w: json.loads((proc_dir(slime_run, w) / "start.json").read_text())["env"]
           for w in ("trainer0", "trainer1", "rollout")}
    assert [env[w]["NCCL_CUMEM_ENABLE"] for w in ("trainer0", "trainer1", "rollout")] == ["0", "1", "0"]
    # what the recorder set for NCCL and the flight recorder, where nobody had
    assert env["trainer0"]["NCCL_DEBUG"] == "WARN" and env["trainer0"]["TORCH_FR_BUFFER_SIZE"] == "2000"
    assert env["trainer0"]["NCCL_DEBUG_FILE"].endswith("/nccl/%h.%p.log")


def test_the_peer_of_a_stopped_rank_leaves_hang_stacks_and_the_failed_collective(fault_runs):
    slime_run = fault_runs["sigstop"]
    d = proc_dir(slime_run, "trainer0")
    evs = events(d)
    hang = [e for e in evs if e["kind"] == "hang"]
    assert hang and hang[0]["collective"] == "all_reduce" and hang[0]["t"] > slime_run["sigstop_at"]
    assert "all_reduce" in (d / "faulthandler.log").read_text()
    failure = json.loads((d / "failure.json").read_text())
    assert failure["collective"] == "all_reduce" and failure["where"] == "torch.distributed.all_reduce"
    assert "Traceback" in failure["traceback"] and "gpu_memory" in failure and "kmsg" in failure
    assert [e for e in evs if e["kind"] == "exception"][0]["first"] is True
    # the flight recorder's buffer, dumped by the recorder at the first failed collective (gloo: no timeout dump)
    [fr] = [e for e in evs if e["kind"] == "flight_recorder"]
    dump = d.parent.parent / "fr" / fr["file"]
    assert fr["file"] == f"{d.name}.nccl_trace_rank_0" and dump.stat().st_size == fr["bytes"] > 0
    assert b"all_reduce" in dump.read_bytes()
    # the stopped one could not write: its heartbeat ends at the stop, and no failure of its own
    stopped = proc_dir(slime_run, "trainer1")
    assert json.loads((stopped / "alive.json").read_text())["t"] < slime_run["sigstop_at"] + 1.0
    assert not (stopped / "failure.json").exists()


def test_collect_through_ray_names_the_lost_node_and_files_name_the_killed(fault_runs, slime_cluster, record_env,
                                                                            tmp_path):
    lost = fault_runs["nodeloss"]
    out = tmp_path / "gathered"
    proc = subprocess.run([sys.executable, "-m", "envbuild", "record", "collect", lost["run_dir"], "--ray",
                           slime_cluster.address, "-o", str(out), "--json"], capture_output=True, text=True,
                          env=record_env, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout)
    assert json.loads((out / "collect.json").read_text())["processes"]
    by_pid = {p["pid"]: p for p in summary["processes"]}
    for who in ("straggler", "straggler2"):
        assert by_pid[lost["pids"][who]]["status"] == "lost"  # its Ray node is dead
    assert by_pid[lost["pids"]["trainer0"]]["status"] == "exited"
    assert any("is dead" in m for m in summary["missing"])
    for fault, who in (("sigkill", "rollout"), ("sigstop", "trainer1")):
        run = fault_runs[fault]
        text = subprocess.run([sys.executable, "-m", "envbuild", "record", "collect", run["run_dir"],
                               "-o", str(tmp_path / fault), "--json"], capture_output=True, text=True, env=record_env,
                              timeout=60, cwd=REPO)
        assert text.returncode == 0, text.stderr[-2000:]
        status = {p["pid"]: p["status"] for p in json.loads(text.stdout)["processes"]}
        assert status[run["pids"][who]] == "killed or stopped", (fault, status)
