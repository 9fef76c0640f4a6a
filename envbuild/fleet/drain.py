"""Draining this node in Slurm, and resuming it, the way LBNL NHC does (github.com/mej/nhc, helpers/node-mark-offline
and node-mark-online).

- Every reason envbuild sets starts with REASON_PREFIX, so envbuild's drains are told apart from everyone else's.
- A node someone else drained keeps their reason: envbuild neither overwrites it nor resumes the node.
- A node envbuild drained is resumed by the first health check it passes again.
- scontrol's answer is checked: a drain or resume that did not happen is said so (exit code and message), and a
  scontrol that hangs is killed at its deadline with its children (envbuild.children.run_bounded).

slurmd starts a HealthCheckProgram with SLURMD_NODENAME and PWD only: no PATH and no SLURM_CONF. scontrol then
reads its compiled-in slurm.conf, which is not the one a slurmd started with `-f FILE` (or SLURM_CONF in its own
environment) reads. So the configuration is looked for as that slurmd knows it: SLURM_CONF here, else the -f or
SLURM_CONF of the slurmd this process descends from, else scontrol's own defaults, which a configless node keeps
under /run/slurm/conf.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from envbuild.children import CommandHung, run_bounded

REASON_PREFIX = "envbuild:"
REASON_MAX = 200  # characters; Slurm keeps longer ones, but `sinfo -R` and admins' eyes do not
SCONTROL_DEADLINE_S = 5.0
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/opt/slurm/bin"  # a HealthCheckProgram has no PATH
DEFAULT_CONFS = ("/etc/slurm/slurm.conf", "/etc/slurm-llnl/slurm.conf", "/usr/local/etc/slurm.conf",
                 "/run/slurm/conf/slurm.conf")  # scontrol's compiled-in paths on common builds; the configless cache
ANCESTOR_DEPTH = 8  # slurmd -> the HealthCheckProgram script -> envbuild, with room for wrappers


@dataclass
class SlurmUpdate:
    """What happened to the node in Slurm: `done` False when it was meant to change and did not."""

    done: bool
    message: str


def reason_text(reason: str) -> str:
    """The Reason envbuild sets: the fixed prefix, one line, no double quotes, at most REASON_MAX characters."""
    return " ".join(f"{REASON_PREFIX} {reason}".replace('"', "'").split())[:REASON_MAX]


def _proc_field(pid: int, name: str) -> bytes:
    with open(f"/proc/{pid}/{name}", "rb") as fh:
        return fh.read(1 << 20)


def _parent(pid: int) -> int:
    stat = _proc_field(pid, "stat").decode(errors="replace")
    return int(stat.rsplit(")", 1)[1].split()[1])


def _slurmd_conf(pid: int) -> Optional[str]:
    """The slurm.conf a slurmd process reads: its -f/--conf... argument (relative to its cwd), else its SLURM_CONF."""
    argv = [a.decode(errors="replace") for a in _proc_field(pid, "cmdline").split(b"\0")]
    path = None
    for k, arg in enumerate(argv):
        if arg == "-f" and k + 1 < len(argv):
            path = argv[k + 1]
        elif arg.startswith("-f") and len(arg) > 2:
            path = arg[2:]
    if path is None:
        for entry in _proc_field(pid, "environ").split(b"\0"):
            if entry.startswith(b"SLURM_CONF="):
                path = entry.split(b"=", 1)[1].decode(errors="replace")
    if path and not os.path.isabs(path):
        path = os.path.join(os.readlink(f"/proc/{pid}/cwd"), path)
    return path or None


def find_slurm_conf(environ: Optional[Dict[str, str]] = None) -> Tuple[Optional[str], str]:
    """(the slurm.conf to hand scontrol as SLURM_CONF, or None to leave it to scontrol; where that came from, or
    why none was found)."""
    env = os.environ if environ is None else environ
    if env.get("SLURM_CONF"):
        return env["SLURM_CONF"], "SLURM_CONF"
    pid = os.getpid()
    try:
        for _ in range(ANCESTOR_DEPTH):
            pid = _parent(pid)
            if pid <= 1:
                break
            if _proc_field(pid, "comm").strip() == b"slurmd":
                conf = _slurmd_conf(pid)
                if conf:
                    return conf, f"the slurm.conf of slurmd (pid {pid})"
                break
    except (OSError, ValueError, IndexError):
        pass  # a process we may not read (another user's slurmd): fall back to scontrol's own search
    found = next((c for c in DEFAULT_CONFS if os.path.exists(c)), None)
    if found:
        return None, f"scontrol's default ({found})"
    return None, ("no slurm.conf found: SLURM_CONF is not set, no slurmd above this process names one, and none of "
                  + ", ".join(DEFAULT_CONFS) + " exists")


class Scontrol:
    """scontrol for one node, with the environment a HealthCheckProgram lacks."""

    def __init__(self, node: str, environ: Optional[Dict[str, str]] = None,
                 deadline_s: float = SCONTROL_DEADLINE_S):
        env = dict(os.environ if environ is None else environ)
        self.node = node
        self.deadline_s = deadline_s
        self.exe = shutil.which("scontrol", path=env.get("PATH") or DEFAULT_PATH)
        conf, self.conf_source = find_slurm_conf(env)
        self.env = {**env, "PATH": env.get("PATH") or DEFAULT_PATH, **({"SLURM_CONF": conf} if conf else {})}

    def _run(self, args: List[str]) -> Tuple[bool, str]:
        """(ok, scontrol's output or why it failed), never an exception."""
        if self.exe is None:
            return False, f"no scontrol on PATH ({self.env['PATH']})"
        conf = self.env.get("SLURM_CONF")
        if conf and not os.path.isfile(conf):  # scontrol would retry reading it for 60 s
            return False, f"SLURM_CONF={conf} ({self.conf_source}): no such file"
        argv = [self.exe, *args]
        try:
            proc = run_bounded(argv, self.deadline_s, env=self.env)
        except CommandHung:
            return False, (f"scontrol did not answer within {self.deadline_s:g} s (killed; slurm.conf: "
                           f"{self.conf_source}); is slurmctld reachable?")
        except OSError as exc:
            return False, f"cannot run {self.exe}: {exc.strerror or exc}"
        if proc.returncode != 0:
            said = (proc.stderr.strip() or proc.stdout.strip() or "no message").splitlines()[-1]
            return False, f"scontrol exited {proc.returncode}: {said} (slurm.conf: {self.conf_source})"
        return True, proc.stdout

    def state(self) -> Tuple[Optional[str], str]:
        """(State, Reason) of the node as scontrol shows them (Reason without its `[user@time]` tail), or
        (None, why scontrol could not say)."""
        ok, out = self._run(["show", "node", self.node])
        if not ok:
            return None, out
        state, reason = None, ""
        for line in out.splitlines():
            line = line.strip()
            if line.startswith("Reason="):  # the rest of the line, spaces and all
                reason = line.split("=", 1)[1]
                if reason.endswith("]") and " [" in reason:
                    reason = reason.rsplit(" [", 1)[0]
                continue
            for token in line.split():
                if token.startswith("State="):
                    state = token.split("=", 1)[1]
        if state is None:
            return None, f"scontrol show node {self.node}: no State= in its answer"
        return state, reason.strip()

    def drain(self, reason: str) -> SlurmUpdate:
        """Drain the node with envbuild's reason, unless someone else drained it first (their reason stays)."""
        state, current = self.state()
        if state is None:
            return SlurmUpdate(False, current)
        if "DRAIN" in state and not current.startswith(REASON_PREFIX):
            return SlurmUpdate(True, f"already drained by someone else (Reason={current!r}); left as it is")
        ok, out = self._run(["update", f"NodeName={self.node}", "State=DRAIN", f"Reason={reason_text(reason)}"])
        return SlurmUpdate(True, "drained") if ok else SlurmUpdate(False, out)

    def resume_if_ours(self) -> Optional[SlurmUpdate]:
        """Resume the node if envbuild drained it; None when there was nothing of ours to undo."""
        state, current = self.state()
        if state is None:
            return SlurmUpdate(False, current)
        if "DRAIN" not in state:
            return None
        if not current.startswith(REASON_PREFIX):
            return SlurmUpdate(True, f"drained by someone else (Reason={current!r}); left drained")
        ok, out = self._run(["update", f"NodeName={self.node}", "State=RESUME"])
        return SlurmUpdate(True, f"resumed (envbuild had drained it: {current})") if ok else SlurmUpdate(False, out)
