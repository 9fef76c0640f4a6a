"""The stack reader: checks/stack_probe.py run under the doctor's launcher, like every other payload.

Why the launcher and not a process of its own: the probe initialises CUDA and NCCL in the environment under
test, so it can hang or be stopped like any GPU payload. Under envbuild/doctor/launcher.py it gets the same
guarantees: an empty signal mask and a parent-death signal (rank_preexec), a deadline after which it and
everything it started are killed, strays found through ENVBUILD_RUN_DIR, and a stop signal to the doctor ends
it through the launcher's cleanup.

The launcher sets variables of its own (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, ENVBUILD_*,
rank variables) and names them in ENVBUILD_LAUNCHER_SET; the probe records the user's values instead
(checks/_common.py user_environ), so stack.env_policy judges the environment the user launches with.

facts/ sits below doctor/, so LiveSource does not import this module: the doctor session hands it a reader
(`read_stack`, or a `StackPrefetch` that starts the probe early so its seconds overlap the node checks).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
from typing import Any, Dict, List, Optional

from envbuild import leftovers
from envbuild.facts.errors import FactUnavailable
from envbuild.facts.stack import DEFAULT_TIMEOUT_S, init_timeout_s
from envbuild.paths import payload_dir

PAYLOAD = "stack_probe.py"


def _tail(text: str, lines: int = 8) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def read_stack(python: str, timeout_s: float = DEFAULT_TIMEOUT_S, patches: Optional[List[Dict[str, str]]] = None,
               cancel: Optional[threading.Event] = None, gate: Optional[str] = None,
               resolve_only: bool = False, resolve_init: bool = False) -> Dict[str, Any]:
    """Run the stack probe with `python` (default: this interpreter) under the launcher and return its JSON object
    (facts/stack.py describes it).

    Raises FactUnavailable with the reason (and the probe's stderr tail) when the interpreter cannot run, the
    probe crashes before answering, it does not answer within `timeout_s`, or `cancel` is set first. `gate`: a
    path the probe waits for (at most 30 s) before its first CUDA call (checks/stack_probe.py wait_for_gate).
    `resolve_only`: the probe asks the dynamic loader which copies torch's libraries bind instead of loading them
    (`--resolve-only`, checks/_loader_trace.py): create's gate, ~26 MB instead of ~410 MB; no CUDA/NCCL init.
    `resolve_init`: resolved so, then CUDA and a 1-rank NCCL group initialised through the libcudart and libnccl
    the trace resolved (`--resolve-init`): the static doctor, whose first run on a node otherwise spent most of its
    seconds reading torch's other libraries from disk."""
    from envbuild.doctor.launcher import launch

    python = python or sys.executable
    if not (payload_dir() / PAYLOAD).is_file():
        raise FactUnavailable(f"the stack probe {payload_dir() / PAYLOAD} is missing from this envbuild installation")
    if not os.path.exists(python):
        raise FactUnavailable(f"python of the environment under test not found: {python}")
    run_dir = tempfile.mkdtemp(prefix=leftovers.tmp_prefix("envbuild-run"))
    try:
        args = ["--init-timeout", str(init_timeout_s(timeout_s))] + (["--gate", gate] if gate else [])
        args += ["--resolve-only"] if resolve_only else ["--resolve-init"] if resolve_init else []
        if patches:
            patch_file = os.path.join(run_dir, "patches.json")
            with open(patch_file, "w") as fh:
                json.dump(patches, fh)
            args += ["--patches", patch_file]
        try:
            # a cancelled probe (a doctor stopped, or its options refused) is not waited for: no stacks to dump
            outcome = launch(PAYLOAD, 1, python=python, gpus=None, args=args, deadline_s=timeout_s, backend="none",
                             run_dir=run_dir, cancel=cancel, dump_on_cancel=False)
        except OSError as exc:
            raise FactUnavailable(f"cannot run {python}: {exc.strerror or exc}") from exc
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)  # the facts keep the stderr tail; nothing else is read later
    rank = outcome.ranks[0]
    stderr = rank.stderr_tail
    tail = f"; stderr tail:\n{_tail(stderr)}" if stderr.strip() else ""
    if outcome.timed_out:
        where = f" (it was in phase {rank.phase!r})" if rank.phase else ""
        raise FactUnavailable(f"the stack probe ({python}) did not answer within {timeout_s:.0f} s{where}{tail}")
    if outcome.hung_ranks:  # still running when `cancel` was set
        raise FactUnavailable(f"the stack probe ({python}) was stopped before it answered")
    data = rank.result
    if not isinstance(data, dict) or data.get("payload") != "stack_probe":
        raise FactUnavailable(f"the stack probe ({python}) exited {rank.returncode} without its JSON{tail}")
    data["probe_exit_code"] = rank.returncode
    if rank.returncode != 0 and stderr.strip():
        data.setdefault("errors", {})["stderr_tail"] = _tail(stderr)
    return data


class StackPrefetch:
    """A stack reader whose probe can start before the first check asks for the stack (`start`), in a thread.

    Called as LiveSource calls a reader, `prefetch(python)`, it waits for that run and returns its facts (or raises
    what the run raised); a python other than the started one is read afresh. `close` stops a run nobody waited
    for (a stopped doctor) and waits for the launcher's cleanup, so no probe outlives the session.

    It waits on an Event, never Thread.join: a join interrupted by the stop signal's exception marks the thread
    finished while it still runs (CPython's _wait_for_tstate_lock releases the lock the running thread holds), and
    the close that followed would then not wait for the cleanup."""

    def __init__(self, resolve_only: bool = False, resolve_init: bool = False) -> None:
        # every probe of this reader is read_stack's `resolve_only` / `resolve_init`
        self._resolve_only, self._resolve_init = resolve_only, resolve_init
        self._thread: Optional[threading.Thread] = None
        self._python: Optional[str] = None
        self._cancel = threading.Event()
        self._done = threading.Event()
        self._data: Optional[Dict[str, Any]] = None
        self._error: Optional[BaseException] = None
        self._gate: Optional[str] = None

    def start(self, python: str, gated: bool = False) -> None:
        """Start the probe; `gated`: it loads its libraries but makes no CUDA call before open_gate()."""
        if self._thread is not None:
            return
        self._python = python
        if gated:  # in a private directory (0700) that the leftover sweep knows, never a guessable /tmp name
            self._gate = os.path.join(tempfile.mkdtemp(prefix=leftovers.tmp_prefix("envbuild-run")), "gate")
        self._thread = threading.Thread(target=self._run, name="envbuild-stack-probe", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._data = read_stack(self._python or "", cancel=self._cancel, gate=self._gate,
                                    resolve_only=self._resolve_only, resolve_init=self._resolve_init)
        except Exception as exc:  # handed to the check that asks, as if it had read the stack itself
            self._error = exc
        finally:
            self._done.set()

    def open_gate(self) -> None:
        """Let the probe make its CUDA calls (a no-op for an ungated one, once open, or once closed)."""
        if self._gate is not None and not os.path.exists(self._gate):
            try:
                os.close(os.open(self._gate, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
            except (FileExistsError, FileNotFoundError):  # opened meanwhile, or its directory removed by close()
                pass

    def pending(self) -> bool:
        """Started and not finished: a caller would wait."""
        return self._thread is not None and not self._done.is_set()

    def __call__(self, python: str) -> Dict[str, Any]:
        if self._thread is None or python != self._python:
            return read_stack(python, resolve_only=self._resolve_only, resolve_init=self._resolve_init)
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._data  # type: ignore[return-value]

    def close(self) -> None:
        if self._thread is not None:
            self._cancel.set()
            self._done.wait()
        if self._gate is not None:
            shutil.rmtree(os.path.dirname(self._gate), ignore_errors=True)
