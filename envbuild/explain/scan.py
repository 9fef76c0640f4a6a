"""One pass over log bytes: which signatures and facts occur, where, in which process, in which phase.

Speed comes from a pre-filter: every signature and fact declares literal keys, and one alternation of all keys
runs over whole byte blocks (RE2 when google-re2 is installed, which scans at hundreds of MB/s; Python's `re`
otherwise, correct but several times slower). Only a line holding a key is decoded and tried against the
patterns whose keys it holds, and a line seen before is answered from a bounded cache (logs repeat: every rank
prints the same banner). Everything kept is bounded (a few locations per signature, a few values per fact,
a few hundred processes), so memory does not grow with the log.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from envbuild.knowledge.signatures import Fact, Signature

MAX_LINE = 8192  # characters of a line the patterns see (a longer line is cut around the key)
MAX_LOCATIONS = 3  # log lines kept per signature
MAX_VALUES = 16  # distinct values kept per fact
MAX_WHO = 512  # processes tracked for the timeline
_CACHE_LIMIT = 20000

# Keys of the scanner's own structure (not of any signature): traceback frames and exception lines.
_FRAME_KEY = 'File "'
_STRUCT_KEYS = (_FRAME_KEY, "Error", "Exception")

_RAY = re.compile(r"^\((?P<actor>[\w.:-]+)(?: pid=(?P<pid>\d+))?(?:, ip=(?P<ip>[^)]+))?\)\s?")
_REPEATED = re.compile(r"\[repeated (\d+)x across cluster\]")
_RANK = re.compile(r"\[[Rr]ank ?(\d+)\]|\brank(?:=| )(\d+)\b")
_NCCL_WHO = re.compile(r"(?P<host>[\w.-]+):(?P<pid>\d+):\d+ \[(?P<dev>\d+)\] NCCL")
_TS_ISO = re.compile(r"(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2}(?:[.,]\d{1,6})?)")
_TS_GLOG = re.compile(r"\b[IWEF](\d{2})(\d{2}) (\d{2}:\d{2}:\d{2}\.\d+)")
_TS_MD = re.compile(r"\b(\d{2})-(\d{2}) (\d{2}:\d{2}:\d{2})\b")
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
_EXC = re.compile(r"^(?:\[[^\]]*\]:?\s*)*(?P<type>(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt))(?::\s?(?P<msg>.*))?$")


def _engine_regex(keys: Sequence[str]) -> Tuple[Any, str]:
    """The pre-filter over bytes: RE2 if importable, else Python's re (named so the benchmark can say which)."""
    alternation = b"|".join(re.escape(k.encode()) for k in sorted(set(keys), key=len, reverse=True))
    try:
        import re2  # type: ignore[import-not-found]

        opts = re2.Options()
        opts.max_mem = 64 << 20
        return re2.compile(alternation, options=opts), "re2"
    except Exception:  # noqa: BLE001 - not installed, or a build without Options: the stdlib works everywhere
        return re.compile(alternation), "re"


@dataclass
class Location:
    source: str
    line: int
    text: str
    who: str
    ts: Optional[str]
    ts_exact: bool = True  # False: the line has no time; ts is the last time seen before it in the same source

    def to_dict(self) -> Dict[str, Any]:
        return {"source": self.source, "line": self.line, "text": self.text, "who": self.who, "time": self.ts,
                "time_exact": self.ts_exact}


@dataclass
class Hit:
    """How often one signature occurred and where (the first few places)."""

    signature: Signature
    count: int = 0
    locations: List[Location] = field(default_factory=list)
    whos: Dict[str, None] = field(default_factory=dict)  # ordered set, bounded


@dataclass
class FactValue:
    value: str
    count: int
    first: Location


@dataclass
class Process:
    """One process (a Ray actor, a rank, a file) as far as the timeline needs it."""

    who: str
    source: str
    phase: Optional[str] = None
    first_failure: Optional[Location] = None
    failure_signature: Optional[str] = None
    failure_phase: Optional[str] = None
    exception: Optional[str] = None  # the exception line that ended its first traceback
    frame: Optional[str] = None  # that traceback's innermost frame, file:line in func
    _in_traceback: bool = False
    _last_frame: Optional[str] = None


@dataclass
class ScanResult:
    hits: Dict[str, Hit]
    facts: Dict[str, Dict[str, FactValue]]
    processes: Dict[str, Process]
    lines: int
    bytes: int
    sources: List[str]
    engine: str


class Scanner:
    """Feed it blocks of one source after another; `result()` gives what was found."""

    def __init__(self, signatures: Sequence[Signature], facts: Sequence[Fact]):
        self.signatures = list(signatures)
        self.facts = list(facts)
        keys = [k for s in self.signatures for k in s.keys] + [k for f in self.facts for k in f.keys] + list(_STRUCT_KEYS)
        self._prefilter, self.engine = _engine_regex(keys)
        self._keys = sorted(set(keys), key=len, reverse=True)
        # key -> entries whose keys are that key or a substring of it (the alternation reports one key per spot)
        by_key: Dict[str, List[Any]] = {}
        for entry in [*self.signatures, *self.facts]:
            for k in entry.keys:
                by_key.setdefault(k, []).append(entry)
        self._closure: Dict[bytes, Tuple[Any, ...]] = {}
        for k in self._keys:
            seen: Dict[int, Any] = {}
            for sub, entries in by_key.items():
                if sub in k:
                    for e in entries:
                        seen[id(e)] = e
            self._closure[k.encode()] = tuple(seen.values())
        self._cache: Dict[bytes, Tuple[Tuple[Any, Optional[str]], ...]] = {}
        self.hits: Dict[str, Hit] = {}
        self.fact_values: Dict[str, Dict[str, FactValue]] = {}
        self.processes: Dict[str, Process] = {}
        self.lines = 0
        self.bytes = 0
        self.sources: List[str] = []
        self._source_phase: Dict[str, str] = {}
        self._source_ts: Dict[str, str] = {}

    # ------------------------------------------------------------------ input

    def feed_source(self, name: str, chunks: Iterable[bytes]) -> None:
        self.sources.append(name)
        line_no = 1
        ends_with_newline = True
        for chunk in chunks:
            self.bytes += len(chunk)
            search = self._prefilter.search
            pos = 0
            counted = 0  # position up to which newlines are counted into line_no
            n = len(chunk)
            while pos < n:
                m = search(chunk, pos)
                if m is None:
                    break
                start = chunk.rfind(b"\n", 0, m.start()) + 1
                end = chunk.find(b"\n", m.end())
                if end < 0:
                    end = n
                line_no += chunk.count(b"\n", counted, start)
                counted = start
                lo, hi = start, end
                if hi - lo > MAX_LINE:
                    lo = max(start, m.start() - MAX_LINE // 2)
                    hi = min(end, lo + MAX_LINE)
                self._line(chunk[lo:hi], name, line_no)
                pos = end + 1
            line_no += chunk.count(b"\n", counted)
            ends_with_newline = chunk.endswith(b"\n")
        self.lines += line_no - (1 if ends_with_newline else 0)

    # ------------------------------------------------------------------ one candidate line

    def _matches(self, raw: bytes) -> Tuple[Tuple[Any, Optional[str]], ...]:
        cached = self._cache.get(raw)
        if cached is not None:
            return cached
        text = raw.decode("utf-8", "replace").rstrip("\r")
        entries: Dict[int, Any] = {}
        for k in self._prefilter.findall(raw):
            for e in self._closure.get(k, ()):
                entries[id(e)] = e
        out = []
        for e in entries.values():
            m = e.pattern.search(text)
            if m is not None:
                out.append((e, e.value(m) if isinstance(e, Fact) else None))
        struct = None
        if _FRAME_KEY in text or "Error" in text or "Exception" in text or "Traceback" in text:
            struct = text
        result = tuple(out) + (((None, struct),) if struct is not None else ())
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[raw] = result
        return result

    def _line(self, raw: bytes, source: str, line_no: int) -> None:
        matches = self._matches(raw)
        if not matches:
            return
        text = raw.decode("utf-8", "replace").rstrip("\r")
        who, body = self._who(text, source)
        rep = _REPEATED.search(text)
        times = int(rep.group(1)) if rep else 1
        proc = self.processes.get(who)
        if proc is None:
            if len(self.processes) >= MAX_WHO:
                who = f"{source} (other processes)"
                proc = self.processes.get(who)
            if proc is None:
                proc = self.processes[who] = Process(who=who, source=source)
        loc: Optional[Location] = None

        def location() -> Location:
            nonlocal loc
            if loc is None:
                ts = _timestamp(text)
                if ts is not None:
                    self._source_ts[source] = ts
                    loc = Location(source, line_no, text.strip()[:400], who, ts)
                else:
                    loc = Location(source, line_no, text.strip()[:400], who, self._source_ts.get(source), False)
            return loc

        for entry, value in matches:
            if entry is None:
                self._structure(proc, body)
            elif isinstance(entry, Fact):
                self._fact(entry, value or "", location, proc)
            else:
                self._hit(entry, times, location, proc)

    def _who(self, text: str, source: str) -> Tuple[str, str]:
        """Which process printed the line, and the line without Ray's prefix."""
        m = _RAY.match(text)
        if m:
            who = f"{m.group('actor')} pid={m.group('pid')}" if m.group("pid") else m.group("actor")
            if m.group("ip"):
                who += f" ip={m.group('ip')}"
            return who, text[m.end():]
        m2 = _NCCL_WHO.search(text)
        if m2:
            return f"{m2.group('host')} pid={m2.group('pid')} [{m2.group('dev')}]", text
        r = _RANK.search(text)
        if r:
            return f"{source} rank {r.group(1) or r.group(2)}", text
        return source, text

    def _structure(self, proc: Process, body: str) -> None:
        """Track tracebacks: the innermost frame and the exception line that ends the first one."""
        if "Traceback (most recent call last)" in body:
            proc._in_traceback = True
            return
        f = _FRAME.search(body)
        if f:
            if proc._in_traceback:
                proc._last_frame = f"{f.group('file')}:{f.group('line')} in {f.group('func')}"
            return
        if proc._in_traceback:
            e = _EXC.match(body.strip())
            if e:
                proc._in_traceback = False
                if proc.exception is None:
                    proc.exception = body.strip()[:300]
                    proc.frame = proc._last_frame

    def _fact(self, fact: Fact, value: str, location: Any, proc: Process) -> None:
        if fact.kind == "phase":
            proc.phase = self._source_phase[proc.source] = value
            location()  # its time orders later lines without one
            return
        values = self.fact_values.setdefault(fact.id, {})
        fv = values.get(value)
        if fv is not None:
            fv.count += 1
        elif len(values) < MAX_VALUES:
            values[value] = FactValue(value, 1, location())

    def _hit(self, sig: Signature, times: int, location: Any, proc: Process) -> None:
        hit = self.hits.get(sig.id)
        if hit is None:
            hit = self.hits[sig.id] = Hit(sig)
        hit.count += times
        if len(hit.locations) < MAX_LOCATIONS:
            hit.locations.append(location())
        if len(hit.whos) < 64:
            hit.whos[proc.who] = None
        if sig.kind == "failure" and proc.first_failure is None:
            proc.first_failure = location()
            proc.failure_signature = sig.id
            proc.failure_phase = proc.phase or self._source_phase.get(proc.source)

    def result(self) -> ScanResult:
        return ScanResult(self.hits, self.fact_values, self.processes, self.lines, self.bytes, self.sources, self.engine)


def _timestamp(text: str) -> Optional[str]:
    """A sortable time of the line if it carries one: 'YYYY-MM-DD HH:MM:SS.ffffff', or '0000-MM-DD ...' when
    the log omits the year (glog, vLLM)."""
    m = _TS_ISO.search(text)
    if m:
        return f"{m.group(1)} {m.group(2).replace(',', '.')}"
    g = _TS_GLOG.search(text)
    if g:
        return f"0000-{g.group(1)}-{g.group(2)} {g.group(3)}"
    d = _TS_MD.search(text)
    if d:
        return f"0000-{d.group(1)}-{d.group(2)} {d.group(3)}"
    return None
