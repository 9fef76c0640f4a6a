"""The one change to a job's runtime env that turns recording on, and run.json.

What goes into the job's runtime env: the setup hook (Ray gives it to every worker of the job, also to actors
created with their own runtime_env: Ray merges an actor's runtime_env into the job's field by field, and
env_vars key by key, https://github.com/ray-project/ray/pull/16378) and ENVBUILD_RECORD_DIR (plus the watchdog
settings given). Everything else the recorder sets inside each process, where the user has not (hook.py), so a
value an actor sets in its own env_vars is never overridden from here. The hook is a "module.function" string:
envbuild must be importable by the workers (installed in the job's environment, or shipped with py_modules).
"""
from __future__ import annotations

import datetime as _dt
import json
import os
from typing import Any, Dict, Optional

from envbuild import __version__
from envbuild.errors import EnvbuildError

HOOK = "envbuild.record.hook.setup"
SCHEMA_RUN = "envbuild.record.run/1"
LIMITS = {"events_jsonl_bytes": 1 << 20, "events_jsonl_bytes_essential": 2 << 20, "processes_per_host": 4000,
          "hang_dumps_per_process": 6, "kmsg_lines_per_failure": 200, "traceback_chars": 16000,
          "flight_recorder_entries": 2000}


class RecordInputError(EnvbuildError):
    exit_code = 2


def record_env(run_dir: str, hang_s: Optional[float] = None, heartbeat_s: Optional[float] = None) -> Dict[str, Any]:
    env = {"ENVBUILD_RECORD_DIR": run_dir}
    if hang_s is not None:
        env["ENVBUILD_RECORD_HANG_S"] = f"{hang_s:g}"
    if heartbeat_s is not None:
        env["ENVBUILD_RECORD_HEARTBEAT_S"] = f"{heartbeat_s:g}"
    return {"worker_process_setup_hook": HOOK, "env_vars": env}


def merge(base: Dict[str, Any], ours: Dict[str, Any]) -> Dict[str, Any]:
    """`ours` merged into a user's runtime env: their env_vars kept, a setup hook of theirs chained after ours."""
    if not isinstance(base, dict):
        raise RecordInputError("the runtime env to merge into must be a JSON object")
    out = dict(base)
    env = out.get("env_vars") or {}
    if not isinstance(env, dict):
        raise RecordInputError("env_vars of the runtime env must be a JSON object")
    env = {**env, **ours["env_vars"]}
    theirs = out.get("worker_process_setup_hook")
    if theirs and theirs != HOOK:
        if not isinstance(theirs, str):
            raise RecordInputError("worker_process_setup_hook must be a 'module.function' string to chain it")
        env["ENVBUILD_RECORD_NEXT_HOOK"] = theirs
    out["env_vars"] = env
    out["worker_process_setup_hook"] = HOOK
    return out


def parse_json(text: str, what: str) -> Dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise RecordInputError(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise RecordInputError(f"{what} must be a JSON object")
    return data


def write_run_json(run_dir: str, runtime_env: Dict[str, Any]) -> str:
    """Create RUN_DIR (checks it is writable here) and write run.json."""
    from envbuild.redact import redact_env

    try:
        os.makedirs(run_dir, exist_ok=True)
        path = os.path.join(run_dir, "run.json")
        tmp = path + f".{os.getpid()}.tmp"
        data = {"schema": SCHEMA_RUN, "envbuild_version": __version__,
                "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                "setup_hook": runtime_env.get("worker_process_setup_hook"),
                "settings": redact_env(dict(runtime_env.get("env_vars") or {})),
                "set_in_each_process_unless_set": ["NCCL_DEBUG=WARN with NCCL_DEBUG_FILE=<host>/nccl/%h.%p.log",
                                                   "TORCH_FR_BUFFER_SIZE/TORCH_NCCL_TRACE_BUFFER_SIZE=2000",
                                                   "TORCH_FR_DUMP_TEMP_FILE/TORCH_NCCL_DEBUG_INFO_TEMP_FILE="
                                                   "<host>/fr/nccl_trace_rank_", "TORCH_NCCL_DUMP_ON_TIMEOUT=1",
                                                   "PYTHONPATH=<envbuild/record/bootstrap>:..."],
                "limits": LIMITS}
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
        return path
    except OSError as exc:
        raise RecordInputError(f"cannot write the run directory {run_dir}: {exc.strerror or exc}") from None
