"""A Ray job shaped like slime's colocated run, on CPU (gloo), with faults injected, for `envbuild record`'s tests
(and the reader's: `run_slime_job` returns the RUN_DIR and what happened).

Shape (slime: a Megatron trainer group and an sglang rollout engine, all Ray actors, env_vars set per actor on
top of the job's runtime env): the job-level runtime env is `envbuild record env`'s JSON (ray.init's runtime_env
is the job's, the same as `ray job submit --runtime-env-json`); two Trainer actors rebuild their gloo group every
step (init, all_reduce, destroy); a Rollout actor starts a multiprocessing spawn child (sglang's scheduler) and a
fork child; two Straggler actors are pinned to a worker node; a Brief actor ends itself with exit_actor at once.

Faults (a comma list, `--faults`): preload (trainer 0 runs with another libnccl.so.2 in LD_PRELOAD), cumem
(trainer 1 with NCCL_CUMEM_ENABLE=1, the others 0), sigstop (trainer 1 SIGSTOPped just before the all_reduce of
step 1: trainer 0 waits in it until gloo's timeout), sigkill (the rollout actor SIGKILLed after step 0), nodeloss
(the worker node's processes killed after step 0, with two Straggler actors on it; the job goes on without it). No fault (an empty
list) is the healthy run.

Run as a script (the driver): python slimejob.py ADDRESS RUNTIME_ENV_JSON RESULT_JSON FAULTS [NODE_SESSION]
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
GLOO_TIMEOUT_S = 8
STEPS = 3


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _actors():
    import ray

    @ray.remote(num_cpus=0)
    class Trainer:
        def __init__(self, rank: int):
            self.rank = rank

        def pid(self) -> int:
            return os.getpid()

        def step(self, step: int, port: int, world: int, delay: float = 0.0) -> float:
            import datetime

            import torch
            import torch.distributed as dist

            dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=self.rank, world_size=world,
                                    timeout=datetime.timedelta(seconds=GLOO_TIMEOUT_S))
            try:
                if delay:
                    time.sleep(delay)
                t = torch.ones(4) * (self.rank + 1)
                dist.all_reduce(t)
                return float(t[0])
            finally:
                dist.destroy_process_group()

    @ray.remote(num_cpus=0)
    class Rollout:
        def pid(self) -> int:
            return os.getpid()

        def start_engine(self) -> Dict[str, int]:
            """sglang's engine starts its scheduler with multiprocessing spawn; a fork child too."""
            import multiprocessing as mp

            self.procs = [mp.get_context("spawn").Process(target=time.sleep, args=(60,), daemon=True),
                          mp.get_context("fork").Process(target=time.sleep, args=(60,), daemon=True)]
            for p in self.procs:
                p.start()
            time.sleep(1.0)  # the children record at start; give them a moment before the driver reads pids
            return {"spawn_child": self.procs[0].pid, "fork_child": self.procs[1].pid}

        def generate(self, step: int) -> int:
            return step

    @ray.remote(num_cpus=0)
    class Straggler:
        def pid(self) -> int:
            return os.getpid()

    @ray.remote(num_cpus=0)
    class Brief:
        """An actor that ends itself with Ray's exit_actor well inside the recorder's start delay (a job's
        short-lived helper): Ray ends such a worker without running atexit."""

        def pid(self) -> int:
            return os.getpid()

        def leave(self) -> None:
            ray.actor.exit_actor()

    return Trainer, Rollout, Straggler, Brief


def drive(address: str, runtime_env: Dict[str, Any], faults: List[str], node_session: Optional[int],
          preload: Optional[str]) -> Dict[str, Any]:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray.init(address=address, runtime_env=runtime_env, log_to_driver=False, logging_level="ERROR")
    Trainer, Rollout, Straggler, Brief = _actors()
    head = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and n.get("NodeManagerAddress") and
                n["NodeID"] == ray.get_runtime_context().get_node_id())
    others = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != head]
    on_head = NodeAffinitySchedulingStrategy(head, soft=False)
    base = {"SLIME_ROLE": "actor", "NCCL_CUMEM_ENABLE": "0", "NCCL_NVLS_ENABLE": "0"}
    env0 = dict(base, **({"LD_PRELOAD": preload} if "preload" in faults and preload else {}))
    env1 = dict(base, NCCL_CUMEM_ENABLE="1" if "cumem" in faults else "0")
    trainers = [Trainer.options(runtime_env={"env_vars": e}, scheduling_strategy=on_head).remote(r)
                for r, e in enumerate((env0, env1))]
    rollout = Rollout.options(runtime_env={"env_vars": dict(base, SGLANG_ROLE="rollout")},
                              scheduling_strategy=on_head).remote()
    result: Dict[str, Any] = {"faults": faults, "errors": {}, "steps": []}
    brief = Brief.options(scheduling_strategy=on_head).remote()
    brief_pid = ray.get(brief.pid.remote())
    try:
        ray.get(brief.leave.remote())
    except Exception:  # the caller of an actor that exits sees it gone
        pass
    result["brief_actor_id"] = brief._actor_id.hex()
    pids = {"brief": brief_pid, "trainer0": ray.get(trainers[0].pid.remote()), "trainer1": ray.get(trainers[1].pid.remote()),
            "rollout": ray.get(rollout.pid.remote()), "driver": os.getpid()}
    pids.update(ray.get(rollout.start_engine.remote()))
    stragglers = {}
    if others:
        for name in ("straggler", "straggler2"):
            stragglers[name] = Straggler.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(others[0], soft=False)).remote()
            pids[name] = ray.get(stragglers[name].pid.remote())
        result["straggler_node"] = others[0]
        # the recorder writes a process's full start records (and its ray_context) START_DELAY_S after its start;
        # a job quicker than that ends its stragglers with only the partial record, which the tests tell apart
        from envbuild.record.hook import START_DELAY_S

        time.sleep(START_DELAY_S + 1.5)
    result["pids"] = pids
    result["actor_ids"] = {"trainer0": trainers[0]._actor_id.hex(), "trainer1": trainers[1]._actor_id.hex(),
                           "rollout": rollout._actor_id.hex(),
                           **{name: a._actor_id.hex() for name, a in stragglers.items()}}
    stopped = False
    for step in range(STEPS):
        port = _free_port()
        stop_now = "sigstop" in faults and step == 1
        refs = [t.step.remote(step, port, 2, 1.5 if (stop_now and r == 1) else 0.0) for r, t in enumerate(trainers)]
        if stop_now:
            time.sleep(1.0)  # trainer 1 is in init/delay, trainer 0 about to wait in all_reduce
            os.kill(pids["trainer1"], signal.SIGSTOP)
            stopped = True
            result["sigstop_at"] = time.time()
        try:
            out = ray.get(refs[0], timeout=GLOO_TIMEOUT_S * 4)
            if not stopped:
                ray.get(refs[1], timeout=GLOO_TIMEOUT_S * 4)
            result["steps"].append({"step": step, "value": out})
        except Exception as exc:
            result["errors"][f"step{step}"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        if stopped:
            break
        try:
            ray.get(rollout.generate.remote(step), timeout=30)
        except Exception as exc:
            result["errors"][f"rollout{step}"] = type(exc).__name__
        if "sigkill" in faults and step == 0:
            os.kill(pids["rollout"], signal.SIGKILL)
            result["sigkill_at"] = time.time()
        if "nodeloss" in faults and node_session and step == 0:
            _kill_node(node_session)
            result["nodeloss_at"] = time.time()
            time.sleep(4.0)  # the head's processes go on writing while the lost node's are silent
    if "sigkill" in faults and "sigkill_at" not in result:
        os.kill(pids["rollout"], signal.SIGKILL)
        result["sigkill_at"] = time.time()
    try:
        ray.get(rollout.generate.remote(99), timeout=3)
    except Exception as exc:
        result["errors"]["rollout_after_kill"] = type(exc).__name__
    if stopped:
        os.kill(pids["trainer1"], signal.SIGKILL)  # a stopped rank is never resumed: its peer has given up
    return result


def _kill_node(node_session: int) -> None:
    """Every process of the worker node's `ray start` session: the node lost at once."""
    from envbuild.fleet.localray import _pids_in_session, _with_descendants

    for pid in _with_descendants(_pids_in_session(node_session)):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def run_slime_job(address: str, run_dir: Path, faults: List[str], env: Dict[str, str],
                  node_session: Optional[int] = None, hang_s: float = 2.0, heartbeat_s: float = 0.5,
                  timeout: float = 150) -> Dict[str, Any]:
    """Run the job (its driver in a subprocess: the test process never imports ray), recording into run_dir;
    returns the driver's result with "run_dir"."""
    envbuild = [sys.executable, "-m", "envbuild", "record", "env", "--dir", str(run_dir), "--json",
                "--hang-s", str(hang_s), "--heartbeat-s", str(heartbeat_s)]
    proc = subprocess.run(envbuild, capture_output=True, text=True, env=env, timeout=60, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    preload = run_dir.parent / "other-nccl" / "libnccl.so.2"
    preload.parent.mkdir(exist_ok=True)
    # another libnccl: a real shared library under libnccl's name (CI has no NCCL; what is tested is that the
    # recorder sees which copy the actor mapped, and where from)
    preload.write_bytes(Path("/lib/x86_64-linux-gnu/libz.so.1").read_bytes())
    out = run_dir.parent / "driver-result.json"
    driver = subprocess.run([sys.executable, __file__, address, proc.stdout.strip(), str(out), ",".join(faults),
                             str(node_session or 0), str(preload)], capture_output=True, text=True, env=env,
                            timeout=timeout, cwd=REPO)
    assert driver.returncode == 0, driver.stderr[-3000:]
    result = json.loads(out.read_text())
    result["run_dir"] = str(run_dir)
    result["driver_stderr"] = driver.stderr[-3000:]
    return result


if __name__ == "__main__":
    address, renv, result_path, faults_arg, session, preload_path = sys.argv[1:7]
    res = drive(address, json.loads(renv), [f for f in faults_arg.split(",") if f], int(session) or None,
                preload_path)
    Path(result_path).write_text(json.dumps(res, indent=1))
