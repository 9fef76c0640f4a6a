"""A real Ray cluster on this machine: a head and N worker nodes started with `ray start --block`, for the
tests and benchmarks (several Ray nodes on one host: nothing is faked but the node count).

Each `ray start --block` runs in its own session, so stopping kills exactly the processes this object
started (its session ids, then any process left under its own --temp-dir), never `ray stop` by name, which
would take down every Ray of the machine's other users.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional


def _free_port() -> int:
    return _free_ports(1)[0]


def _free_ports(n: int) -> List[int]:
    """n distinct free ports: all sockets stay bound until every port is picked (else the kernel may repeat one)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


class LocalRayCluster:
    def __init__(self, workers: int = 2, num_cpus: int = 1, env: Optional[Dict[str, str]] = None,
                 timeout: float = 120.0, node_python: Optional[Dict[int, str]] = None):
        """`node_python`: worker node i (1-based) runs `ray start` (and so its Ray workers) with this interpreter
        instead of ours: a node whose Python environment differs (no envbuild, another envbuild version)."""
        self.workers, self.num_cpus, self.timeout = workers, num_cpus, timeout
        self.node_python = dict(node_python or {})
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.temp = tempfile.mkdtemp(prefix="ebray")  # short: Ray's socket paths must fit in 107 bytes
        # Lean nodes: N nodes share this host's CPUs, and what a node starts beyond the sweep's own worker is
        # CPU taken from the sweep. The first driver (wait_nodes' probe) would make every raylet prestart a worker
        # that nothing uses (32 at once overloaded the GCS), and no log monitor is started (the sweep's driver
        # takes no worker logs: log_to_driver=False), so it does not tail each new worker's log files.
        self.env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_prestart_worker_first_driver": "0",
                    "RAY_num_prestart_python_workers": "0", **(env or {})}
        self.procs: List[subprocess.Popen] = []
        self.ray = str(Path(sys.executable).with_name("ray"))

    def _start(self, args: List[str], python: Optional[str] = None) -> subprocess.Popen:
        log = open(os.path.join(self.temp, f"start-{len(self.procs)}.log"), "wb")
        # every port named: raylets started at once on one host otherwise race for the same defaults
        names = ("node-manager-port", "object-manager-port", "metrics-export-port", "dashboard-agent-grpc-port",
                 "dashboard-agent-listen-port", "runtime-env-agent-port")
        ports = [f"--{name}={port}" for name, port in zip(names, _free_ports(len(names)))]
        ray = [self.ray] if python is None else [python, "-c", "import sys; from ray.scripts.scripts import main; "
                                                       "sys.argv[0] = 'ray'; sys.exit(main())"]
        cmd = [*ray, "start", "--block", "--node-ip-address=127.0.0.1", f"--num-cpus={self.num_cpus}",
               "--num-gpus=0", "--object-store-memory=78643200", "--disable-usage-stats", "--include-log-monitor=false",
               *ports, *args]
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        self.procs.append(proc)
        return proc

    def __enter__(self) -> "LocalRayCluster":
        try:
            self._start(["--head", "--node-name=head", f"--port={self.port}", "--include-dashboard=false", f"--temp-dir={self.temp}"])
            self._wait_port()
            self._wait_started(0)
            for i in range(self.workers):  # one at a time: raylets started together race for ports (seen here)
                self._start([f"--address={self.address}", f"--node-name=w{i + 1}"], self.node_python.get(i + 1))
                self._wait_started(i + 1)
            self.wait_nodes(self.workers + 1)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _wait_port(self) -> None:
        end = time.monotonic() + self.timeout
        while time.monotonic() < end:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self.procs[0].poll() is not None:
                    raise RuntimeError(f"ray head exited: {self.log(0)[-800:]}")
                time.sleep(0.3)
        raise RuntimeError(f"ray head did not listen on {self.address} in {self.timeout} s")

    def _wait_started(self, i: int) -> None:
        """Until `ray start` of node i says its runtime is up (it prints that, then blocks)."""
        end = time.monotonic() + self.timeout
        while time.monotonic() < end:
            if "Ray runtime started" in self.log(i):
                return
            if self.procs[i].poll() is not None:
                raise RuntimeError(f"ray start of node {i} exited: {self.log(i)[-800:]}")
            time.sleep(0.2)
        raise RuntimeError(f"ray start of node {i} not up in {self.timeout} s")

    def wait_nodes(self, n: int) -> None:
        """Until Ray lists n alive nodes (asked in a subprocess, so the caller's process never imports ray)."""
        code = ("import ray,time,sys\nray.init(address=sys.argv[1],log_to_driver=False,logging_level='ERROR')\n"
                "end=time.time()+float(sys.argv[3])\n"
                "while sum(x['Alive'] for x in ray.nodes())<int(sys.argv[2]) and time.time()<end: time.sleep(0.5)\n"
                "sys.exit(0 if sum(x['Alive'] for x in ray.nodes())>=int(sys.argv[2]) else 1)\n")
        proc = subprocess.run([sys.executable, "-c", code, self.address, str(n), str(self.timeout)],
                              capture_output=True, text=True, env=self.env, timeout=self.timeout + 60)
        if proc.returncode != 0:
            raise RuntimeError(f"Ray did not show {n} alive nodes: {proc.stderr[-800:]}")

    def log(self, i: int) -> str:
        try:
            return Path(self.temp, f"start-{i}.log").read_text(errors="replace")
        except OSError:
            return ""

    def kill_worker(self, i: int, sig: int = signal.SIGKILL) -> None:
        """Kill worker node i (1-based) and every process it started: a node dying mid-run."""
        self._signal_session(self.procs[i], sig)

    @staticmethod
    def _signal_session(proc: subprocess.Popen, sig: int) -> None:
        """Signal the node's session and every descendant (Ray workers get process groups of their own)."""
        for pid in _with_descendants(_pids_in_session(proc.pid)):
            try:
                os.kill(pid, sig)
            except OSError:
                pass

    def stop(self) -> None:
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 2.0)):
            for p in reversed(self.procs):
                self._signal_session(p, sig)
            for pid in _pids_under(self.temp):
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
            end = time.monotonic() + wait
            while time.monotonic() < end and (any(p.poll() is None for p in self.procs) or self.leftovers()):
                time.sleep(0.2)
        for p in self.procs:
            if p.poll() is None:
                p.wait(timeout=5)

    def leftovers(self) -> List[int]:
        """Processes of this cluster still alive (by session id or by our temp dir on their command line)."""
        pids = set(_pids_under(self.temp))
        for p in self.procs:
            pids.update(_pids_in_session(p.pid))
        return sorted(pids)


def _proc_stat(pid: str) -> Optional[List[str]]:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _pids_in_session(sid: int) -> List[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _proc_stat(entry)
            if st and len(st) > 3 and st[0] != "Z" and int(st[3]) == sid:
                out.append(int(entry))
    return out


def _with_descendants(pids: List[int]) -> List[int]:
    children: Dict[int, List[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _proc_stat(entry)
            if st and len(st) > 1 and st[0] != "Z":
                children.setdefault(int(st[1]), []).append(int(entry))
    out, todo = [], list(pids)
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.append(pid)
            todo.extend(children.get(pid, []))
    return out


def _pids_under(temp: str) -> List[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        st = _proc_stat(entry)
        if temp.encode() in cmd and st and st[0] != "Z":
            out.append(int(entry))
    return out
