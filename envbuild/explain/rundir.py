"""Reading an `envbuild record` run directory (docs/record.md): run.json, <host>/node.json and one
<host>/proc/<pid>-<starttime>/ per process, every file read bounded (a head and a tail), so a cut-short,
missing or 1 GiB file costs the same as a small one and is named in `missing` instead of failing the read.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

HEAD = 256 * 1024  # bytes read from the start of a jsonl file
TAIL = 2 * 1024 * 1024  # and from its end: the failure is near the end
JSON_MAX = 4 * 1024 * 1024  # a single JSON record file larger than this is not read
TEXT_WHOLE = 4 * 1024 * 1024  # a NCCL or faulthandler log up to this size is scanned whole, a larger one by its ends
TEXT_END = 1024 * 1024  # bytes read from each end of a larger one (the recorder keeps these when it caps a file)
KNOWN_SCHEMAS = {"envbuild.record.run/1", "envbuild.record.node/1", "envbuild.record.process/1"}


def is_run_dir(path: Path) -> bool:
    """A run dir has run.json, or at least one <host>/proc/ folder."""
    if (path / "run.json").is_file():
        return True
    try:
        return any((d / "proc").is_dir() for d in path.iterdir() if d.is_dir())
    except OSError:
        return False


@dataclass
class Proc:
    host: str
    key: str  # <pid>-<starttime>
    path: Path
    start: Dict[str, Any] = field(default_factory=dict)
    libs: List[Dict[str, Any]] = field(default_factory=list)
    events: List[Dict[str, Any]] = field(default_factory=list)
    failure: Optional[Dict[str, Any]] = None
    alive: Dict[str, Any] = field(default_factory=dict)  # the heartbeat: {"t", "pid"}, rewritten every heartbeat_s
    audit: Dict[str, Any] = field(default_factory=dict)  # the fleet audit of the process (tms_hook, libraries)
    fatal: Optional[str] = None  # faulthandler.log's "Fatal Python error: <what>" (SIGSEGV, SIGABRT, ...)

    @property
    def pid(self) -> str:
        return str(self.start.get("pid") or self.key.split("-")[0])

    @property
    def ray(self) -> Dict[str, Any]:
        """The process's Ray context: the last `ray_context` event (the hook runs before the actor is known),
        else the one in start.json."""
        for e in reversed(self.events):
            if e.get("kind") == "ray_context":
                return e
        ray = self.start.get("ray")
        return ray if isinstance(ray, dict) else {}

    @property
    def role(self) -> str:
        """The Ray actor's class; for a process an actor started (sitecustomize, fork) its own kind and whose."""
        ray = self.ray
        actor = ray.get("actor_class") or ray.get("class_name")
        own = self.start.get("role")
        if self.start.get("origin") in ("fork", "sitecustomize") and own:
            return f"{own} of {actor}" if actor else str(own)
        return str(actor or own or ("ray worker" if self.start.get("origin") == "ray" else "process"))

    @property
    def heartbeat_s(self) -> float:
        hb = self.start.get("heartbeat_s")
        return float(hb) if isinstance(hb, (int, float)) and hb > 0 else 10.0

    @property
    def who(self) -> str:
        return f"{self.role} {self.host}/pid {self.pid}"

    @property
    def env(self) -> Dict[str, str]:
        env = self.start.get("env")
        return {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {}

    def file(self, name: str) -> str:
        return f"{self.host}/proc/{self.key}/{name}"

    def times(self) -> List[float]:
        ts = [e["t"] for e in self.events if isinstance(e.get("t"), (int, float))]
        extra = [self.start.get("t_start"), self.alive.get("t")]
        return ts + [t for t in extra if isinstance(t, (int, float))]

    @property
    def t_last(self) -> Optional[float]:
        ts = self.times()
        if isinstance((self.failure or {}).get("t"), (int, float)):
            ts.append(self.failure["t"])  # type: ignore[index]
        return max(ts) if ts else None

    def of_kind(self, kind: str) -> List[Dict[str, Any]]:
        return [e for e in self.events if e.get("kind") == kind]

    def exit_code(self) -> Optional[int]:
        ex = self.of_kind("exit")
        return ex[-1].get("code") if ex else None

    @property
    def exited(self) -> bool:
        """An `exit` event was written (at interpreter exit; its code is often unknown, null)."""
        return bool(self.of_kind("exit"))

    def first_failure(self) -> Optional[Tuple[float, str, str]]:
        """(t, what, file) of the process's own first failure: an exception, a fatal signal, failure.json."""
        cands = []
        for e in self.events:
            if e.get("kind") in ("exception", "signal") and isinstance(e.get("t"), (int, float)):
                what = (f"signal {e.get('name') or e.get('signal')}" if e["kind"] == "signal"
                        else f"{e.get('type', 'exception')}: {str(e.get('message', ''))[:200]}")
                cands.append((e["t"], what, self.file("events.jsonl")))
        f = self.failure or {}
        if isinstance(f.get("t"), (int, float)):
            what = (f"signal {f['signal']}" if f.get("signal") else
                    f"{f.get('type') or 'exception'}: {str(f.get('message') or '')[:200]}"
                    + (f" (in {f['where']})" if f.get("where") else ""))
            cands.append((f["t"], what, self.file("failure.json")))
        if self.fatal and not cands:  # faulthandler writes no time: the last heartbeat before it is the moment
            t = self.t_last
            if isinstance(t, (int, float)):
                cands.append((t, f"fatal signal: {self.fatal}", self.file("faulthandler.log")))
        code = self.exit_code()
        if not cands and code not in (None, 0):
            ex = self.of_kind("exit")[-1]
            cands.append((ex.get("t", 0.0), f"exit code {code}", self.file("events.jsonl")))
        return min(cands) if cands else None

    def lib(self, name: str) -> Optional[Dict[str, Any]]:
        """The last snapshot's entry for a library (the state at failure/exit wins over start)."""
        for snap in reversed(self.libs):
            entry = (snap.get("libs") or {}).get(name)
            if entry:
                return entry if isinstance(entry, dict) else {"path": str(entry), "version": None}
        return None

    def groups(self) -> Dict[str, Dict[str, Any]]:
        """Every torch.distributed group the process joined (init = the default group, new_group by its name or
        ranks), the last event of each; a group destroyed and rebuilt every step stays one group."""
        out: Dict[str, Dict[str, Any]] = {}
        for e in self.of_kind("process_group"):
            op = e.get("op", e.get("action", "init"))
            if op == "destroy":
                continue
            name = e.get("group") or e.get("group_name") or e.get("name")
            if not name and op == "new_group":
                name = "ranks " + ",".join(str(r) for r in (e.get("ranks") or []))
            out[str(name or "default_pg")] = e
        return out


@dataclass
class Run:
    root: Path
    run: Dict[str, Any] = field(default_factory=dict)
    nodes: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    procs: List[Proc] = field(default_factory=list)
    kmsg: Dict[str, List[Dict[str, Any]]] = field(default_factory=dict)
    missing: List[Dict[str, str]] = field(default_factory=list)  # {file, message}
    text_files: List[Path] = field(default_factory=list)  # NCCL logs, faulthandler logs: for the text scanner
    texts: List[Tuple[str, str]] = field(default_factory=list)  # (name, text): the two ends of the larger ones
    fr_dirs: List[Path] = field(default_factory=list)

    def note(self, file: str, message: str) -> None:
        self.missing.append({"file": file, "message": message})


def _rel(run: Run, p: Path) -> str:
    try:
        return str(p.relative_to(run.root))
    except ValueError:
        return str(p)


def _read_json(run: Run, p: Path, what: str) -> Optional[Dict[str, Any]]:
    rel = _rel(run, p)
    try:
        size = p.stat().st_size
        raw = p.read_bytes() if size <= JSON_MAX else None
    except FileNotFoundError:
        run.note(rel, f"missing: no {what}")
        return None
    except OSError as exc:
        run.note(rel, f"cannot read ({exc.strerror or exc})")
        return None
    if raw is None:
        run.note(rel, f"not read: {size} bytes, over the {JSON_MAX >> 20} MiB a record file may have")
        return None
    try:
        data = json.loads(raw.decode("utf-8", "replace"))
    except ValueError:
        run.note(rel, f"cut short or damaged: the {what} is not whole JSON (written while the process or node died?)")
        return None
    if not isinstance(data, dict):
        run.note(rel, f"not a JSON object: the {what} is ignored")
        return None
    schema = data.get("schema")
    if schema is not None and schema not in KNOWN_SCHEMAS:
        run.note(rel, f"unknown schema {schema!r}: read the fields this explain knows, the rest may be missed")
    return data


def read_jsonl(run: Run, p: Path) -> List[Dict[str, Any]]:
    """The records of a jsonl file: the whole file when small, else its first HEAD and last TAIL bytes (the
    part between is skipped and noted). A last line cut mid-write is dropped and noted."""
    rel = _rel(run, p)
    try:
        size = p.stat().st_size
        with open(p, "rb") as f:
            if size <= HEAD + TAIL:
                parts = [f.read()]
            else:
                head = f.read(HEAD)
                f.seek(size - TAIL)
                tail = f.read(TAIL)
                parts = [head[: head.rfind(b"\n") + 1], tail[tail.find(b"\n") + 1:]]
                run.note(rel, f"{size} bytes: read the first {HEAD >> 10} KiB and the last {TAIL >> 20} MiB")
    except FileNotFoundError:
        return []
    except OSError as exc:
        run.note(rel, f"cannot read ({exc.strerror or exc})")
        return []
    out: List[Dict[str, Any]] = []
    bad = 0
    for i, part in enumerate(parts):
        lines = part.split(b"\n")
        cut = lines[-1].strip() != b""
        for j, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                if j == len(lines) - 1 and cut and i == len(parts) - 1:
                    run.note(rel, "the last line is cut short (the process or node died mid-write); read the lines before it")
                else:
                    bad += 1
                continue
            if isinstance(rec, dict):
                out.append(rec)
    if bad:
        run.note(rel, f"{bad} line(s) not JSON, skipped")
    return out


def _fatal_line(p: Path) -> Optional[str]:
    """What faulthandler says killed the process ('Aborted', 'Segmentation fault'), from its first 64 KiB."""
    try:
        with open(p, "rb") as f:
            head = f.read(65536).decode("utf-8", "replace")
    except OSError:
        return None
    for line in head.splitlines():
        if line.startswith("Fatal Python error:"):
            return line.split(":", 1)[1].strip()[:200]
    return None


def _add_text(run: Run, p: Path) -> None:
    """A log for the text scanner: the file itself when small, else its first and last TEXT_END bytes (a file
    the recorder capped has a hole of zeros between them, which nothing needs to read)."""
    size = size_of(p)
    if size <= TEXT_WHOLE:
        run.text_files.append(p)
        return
    try:
        with open(p, "rb") as f:
            head = f.read(TEXT_END)
            f.seek(size - TEXT_END)
            tail = f.read(TEXT_END)
    except OSError as exc:
        run.note(_rel(run, p), f"cannot read ({exc.strerror or exc})")
        return
    text = (head.replace(b"\0", b"") + b"\n" + tail.replace(b"\0", b"")).decode("utf-8", "replace")
    run.texts.append((_rel(run, p), text))
    run.note(_rel(run, p), f"{size} bytes: scanned the first and the last {TEXT_END >> 20} MiB")


def read(root: Path) -> Run:
    """Everything explain judges from a run dir; what is absent or damaged lands in run.missing."""
    run = Run(root)
    if (root / "run.json").exists():
        run.run = _read_json(run, root / "run.json", "run.json") or {}
    else:
        run.note("run.json", "missing: not written by `envbuild record` (or the run dir was copied without it)")
    try:
        hosts = sorted(d for d in root.iterdir() if d.is_dir())
    except OSError as exc:
        run.note(".", f"cannot list ({exc.strerror or exc})")
        return run
    for hd in hosts:
        host = hd.name
        if not (hd / "proc").is_dir() and not (hd / "node.json").exists():
            continue
        node = _read_json(run, hd / "node.json", "node.json")
        if node is not None:
            run.nodes[host] = node
        if (hd / "kmsg.jsonl").exists():
            run.kmsg[host] = read_jsonl(run, hd / "kmsg.jsonl")
        if (hd / "nccl").is_dir():
            for p in sorted(p for p in (hd / "nccl").iterdir() if p.is_file()):
                _add_text(run, p)
        if (hd / "fr").is_dir():
            run.fr_dirs.append(hd / "fr")
        try:
            pdirs = sorted((hd / "proc").iterdir()) if (hd / "proc").is_dir() else []
        except OSError:
            pdirs = []
        for pd in pdirs:
            if not pd.is_dir():
                continue
            proc = Proc(host, pd.name, pd)
            if not (pd / "start.json").exists():
                run.note(_rel(run, pd), "no start.json: the process left a folder but never wrote its start")
            else:
                proc.start = _read_json(run, pd / "start.json", "start.json") or {}
                if proc.start.get("partial"):
                    run.note(_rel(run, pd / "start.json"), "the early, partial start record only: the process ended "
                             "within ENVBUILD_RECORD_START_DELAY_S of its start (no argv, no long values, no audit)")
            if (pd / "libs.jsonl").exists():
                proc.libs = read_jsonl(run, pd / "libs.jsonl")
            if (pd / "events.jsonl").exists():
                proc.events = read_jsonl(run, pd / "events.jsonl")
            elif proc.start:
                run.note(_rel(run, pd / "events.jsonl"), "missing: the process never wrote an event after its start")
            if (pd / "failure.json").exists():
                proc.failure = _read_json(run, pd / "failure.json", "failure.json")
            if (pd / "alive.json").exists():
                proc.alive = _read_json(run, pd / "alive.json", "alive.json") or {}
            if (pd / "audit.json").exists():
                proc.audit = _read_json(run, pd / "audit.json", "audit.json") or {}
            if (pd / "faulthandler.log").exists() and (pd / "faulthandler.log").stat().st_size:
                _add_text(run, pd / "faulthandler.log")
                proc.fatal = _fatal_line(pd / "faulthandler.log")
            run.procs.append(proc)
    if not run.procs:
        run.note(".", "no process recorded: no <host>/proc/<pid>-<starttime>/ folder")
    versions = sorted({str(v) for v in [run.run.get("envbuild_version")] + [p.start.get("envbuild_version") for p in run.procs]
                       + [n.get("envbuild_version") for n in run.nodes.values()] if v})
    if len(versions) > 1:
        run.note(".", f"mixed envbuild versions wrote this run dir ({', '.join(versions)}): fields a version lacks are missing")
    return run


def size_of(p: Path) -> int:
    try:
        return os.stat(p).st_size
    except OSError:
        return 0
