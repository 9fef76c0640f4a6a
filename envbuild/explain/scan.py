"""One pass over log bytes: which signatures and facts occur, where, in which process, in which phase.

Speed comes from a pre-filter: every signature and fact declares literal keys, and one alternation of all keys
runs over whole byte blocks (RE2 when google-re2 is installed, which scans at hundreds of MB/s; Python's `re`
otherwise, correct but several times slower). Only a line holding a key is decoded and tried against the
patterns whose keys it holds, and a line seen before is answered from a bounded cache (logs repeat: every rank
prints the same banner). Everything kept is bounded (a few locations per signature, a few values per fact,
a few hundred processes), so memory does not grow with the log.
"""
from __future__ import annotations

import itertools
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, Iterable, List, Optional, Sequence, Set, Tuple

from envbuild.explain.logged import LoggedExceptions
from envbuild.explain.records import opening_level
from envbuild.knowledge.signatures import Fact, Signature, case_free

BLOCK_HINT = 4 * 1024 * 1024  # the reader's block size (reader.BLOCK)
MAX_LINE = 8192  # characters of a line the patterns see (a longer line is cut around the key)
# lines after Python's "Exception ignored in: ..." read as part of that report until its exception line, at most this
# many: a line counted in bulk as a repeat is not read one by one, so the report's end may pass unseen
IGNORED_SPAN = 40
ASKING_LINES, ASKING_HEAD = 40, 4096  # where a reporter's question whether a message matters is looked for
MAX_LOCATIONS = 3  # log lines kept per signature
MAX_VALUES = 16  # distinct values kept per fact
MAX_WHO = 512  # processes tracked for the timeline
MAX_RECOVERIES = 16  # recoveries kept for the report
# Lines around a retried connect that a completion with `closes` also closes: the traceback, the retry's warning and
# the words on them ("timed out", "failed") end within this many lines of the connect's last failure
NEAR = 12
# the completion named where a source's failures were exceptions it logged and went on from (logged.py)
LOGGED_WENT_ON = "log.went_on"
_CACHE_LIMIT = 20000
HEAD_BYTES = 64 * 1024  # bytes of text kept from the start of the input for the learned ranker (explain/ranker.py)

# Keys of the scanner's own structure (not of any signature): traceback frames and exception lines.
_FRAME_KEY = 'File "'
_TB_KEY = "Traceback (most recent call last)"
# a log record at an error or warning level that says, after a semicolon or a comma, what the program does instead:
# the traceback printed under it (logger.exception's) is one the program caught and went on from, like an ignored one
_HANDLED = re.compile(r"\b(?:ERROR|WARNING|WARN|CRITICAL|Error|Warning)\b[^;\n]{0,300}[;,]\s*(?:[\w-]+\s+){0,3}?"
                      r"(?:retrying|rebuilding|falling back|will (?:use|retry|fall back|continue)|continuing|skipping)\b")
_HANDLED_KEYS = ("; retrying", "; rebuilding", "; falling back", "; continuing", "; skipping", ", retrying",
                 ", rebuilding", ", falling back", ", continuing", ", skipping", " will use ", " will retry",
                 " will fall back", " will continue")
# torch's DataLoader re-raises a worker's exception as "Caught E in DataLoader worker process N." and prints the
# worker's own traceback after it ("Original Traceback ..."): one report, not two
_WRAPPED = re.compile(r"\bCaught \w+ in DataLoader worker process \d+")
_STRUCT_KEYS = (_FRAME_KEY, _TB_KEY, "Error", "Exception", *_HANDLED_KEYS)

_RAY = re.compile(r"^\((?P<actor>[\w.:-]+)(?: pid=(?P<pid>\d+))?(?:, ip=(?P<ip>[^)]+))?\)\s?")
_REPEATED = re.compile(r"\[repeated (\d+)x across cluster\]")
_RANK = re.compile(r"\[[Rr]ank ?(\d+)\]|^rank(\d+):")  # torch's [rank3]: / slime's [Rank 3]; not "around rank 39"
_NCCL_WHO = re.compile(r"(?P<host>[\w.-]+):(?P<pid>\d+):\d+ \[(?P<dev>\d+)\] NCCL")
_TS_ISO = re.compile(r"(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2}(?:[.,]\d{1,6})?)")
_TS_GLOG = re.compile(r"\b[IWEF](\d{2})(\d{2}) (\d{2}:\d{2}:\d{2}\.\d+)")
_TS_MD = re.compile(r"\b(\d{2})-(\d{2}) (\d{2}:\d{2}:\d{2})\b")
# What launchers and torch put in front of a line: `[rank0]:`, mpirun's `[1,0]<stdout>:`, srun -l's `0: `
_PREFIXES = re.compile(r"^(?:\s*(?:\[[Rr]ank ?\d+\]:?|\[\d+,\d+\]<std(?:out|err)>:|\d{1,4}: ))+")
# glog's W/I prefix and torch's `[W socket.cpp:634]`: unambiguous wherever they open the message (`test_x ... [W ...]`)
# glog's `W1206 12:00:00` and torch's c10 logger, whose month is not zero-padded (`[W506 00:43:56.24 TCPStore.cpp:125]`
# on May 6), and torch's `[W socket.cpp:634]`, also as a reporter shortens it (`[W ... TCPStore.cpp:...]`)
_SOFT_MARK = re.compile(r"(?:^\s*|\[)[IW]\d{3,4} \d{2}:\d{2}:\d{2}|\[[IW] (?:\.\.\. )?[\w./-]+\.(?:cpp|cc|c|h|hpp|py):(?:\d+|\.\.\.)\]")
_ASKS = re.compile(r"(?i)^\W*(?:what does\b.{0,200}\bmean\b|is (?:this|it|that) (?:\w+ ){0,2}(?:harmful|normal|expected|"
                   r"safe|a (?:real )?problem)\b)|\b(?:(?:safely|safe to) (?:be )?ignored?|be ignored|harmful|mean|matter)\s*\?\s*$")
# Python's report of an exception it could not raise and ignored (in a finalizer, __del__, at interpreter exit):
# Python 3 prints "Exception ignored in: <function X.__del__ ...>" and the traceback under it (sys.unraisablehook),
# Python 2 "Exception E: 'msg' in <bound method X.__del__ of <...>> ignored" on one line. The run was not stopped by it.
_IGNORED = "Exception ignored in"
_DEL_IGNORED = re.compile(r"\bin <bound method [\w.]+\.__del__ of\b")
_SOFT_LEVELS = frozenset({"WARNING", "INFO", "NOTICE"})  # WARN alone is NCCL's and Horovod's error level
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
_EXC = re.compile(r"^(?:\[[^\]]*\]:?\s*)*(?P<type>(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt))(?::\s?(?P<msg>.*))?$")


def _engine_regex(keys: Sequence[str], free: Sequence[str] = ()) -> Tuple[Any, str]:
    """The pre-filter over bytes, one alternation of every key: RE2 if importable, else Python's re (named so the
    benchmark can say which). The same object finds a candidate line (the scan then takes the line's end with a
    C-speed find) and the keys inside it. Measured on the 10 MB benchmark log: 0.78 s against 1.02 s for a pattern
    that ran on to the end of the line (`(?:keys)[^\\n]*`), which RE2 matched at half the speed, and one compiled
    object fewer (54 against 65 MiB peak). Keys in `free` (of case-free entries) match in any case; each is wrapped
    alone so the longest key still wins."""
    free_set = {k.lower() for k in free}

    def alt(k: str) -> bytes:
        lit = re.escape(k.encode())
        return b"(?i:" + lit + b")" if k.lower() in free_set else lit

    alternation = b"|".join(alt(k) for k in sorted(set(keys) | set(free), key=len, reverse=True))
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
    _ignored_from: int = -1  # the line of the last "Exception ignored in: ..." report not yet ended (IGNORED_SPAN)
    _ignored_tail: int = -1  # the last line of an ignored report's exception message (its indented lines go on it)


@dataclass
class Recovery:
    """A failure the run got past in one source: a completion that closes it came after its last occurrence."""

    signature: str
    failure: Location  # its first occurrence in the source
    last_line: int  # its last occurrence
    completion_signature: str
    completion: Location  # the closing completion's last occurrence read line by line
    completion_line: int  # its last occurrence

    def to_dict(self) -> Dict[str, Any]:
        return {"signature": self.signature, "failure": self.failure.to_dict(), "last_line": self.last_line,
                "completion_signature": self.completion_signature, "completion": self.completion.to_dict(),
                "completion_line": self.completion_line}


@dataclass
class _Seen:
    """Where one failure or completion signature was seen in one source: its first and last line. Why lines and
    not an event list: byte-identical repeats are counted in bulk, and a bulk-counted block still tells the last
    line it holds, so the order of last occurrences survives without a line-by-line pass."""

    first: Location
    last_line: int
    last: Location  # the last occurrence read line by line (bulk-counted repeats have no Location)
    loud: bool = False  # seen at least once on a line not printed at a warning or info level (see _soft)
    raised: bool = False  # seen at least once outside Python's report of an exception it ignored
    titled: bool = False  # seen, loud, on the source's first line: a report's title, the outcome it is about
    first_loud: int = -1  # the first and last lines it was seen on not printed at a warning or info level
    last_loud: int = -1


@dataclass
class ScanResult:
    hits: Dict[str, Hit]
    facts: Dict[str, Dict[str, FactValue]]
    processes: Dict[str, Process]
    lines: int
    bytes: int
    sources: List[str]
    engine: str
    head: str = ""  # the first HEAD_BYTES of the input, sources in order: what the reporter pasted at the top
    # failure signatures that, in some source, no completion that closes them followed: those say the run failed
    open_failures: FrozenSet[str] = frozenset()
    recoveries: List[Recovery] = field(default_factory=list)  # the first MAX_RECOVERIES failures closed
    recovered: int = 0  # failures closed in all (a signature once per source)
    # the open failures that were, wherever they stayed open, only ever printed at a warning or info level: a run
    # that says so itself is reporting something it went on from, not what stopped it
    soft_failures: FrozenSet[str] = frozenset()
    # the open failures seen only inside Python's report of an exception it ignored (a finalizer at exit): the
    # interpreter itself says the program was not stopped by them
    ignored_failures: FrozenSet[str] = frozenset()


class Scanner:
    """Feed it blocks of one source after another; `result()` gives what was found."""

    def __init__(self, signatures: Sequence[Signature], facts: Sequence[Fact]):
        self.signatures = list(signatures)
        self.facts = list(facts)
        prep = _prepared(self.signatures, self.facts)
        self._prefilter, self.engine, self._keys, self._closure = prep
        self._match = self._match_fn()
        self._cache: Dict[bytes, Any] = {}
        self.hits: Dict[str, Hit] = {}
        self.fact_values: Dict[str, Dict[str, FactValue]] = {}
        self.processes: Dict[str, Process] = {}
        self.lines = 0
        self.bytes = 0
        self.sources: List[str] = []
        self._source_phase: Dict[str, str] = {}
        self._source_ts: Dict[str, str] = {}
        # Lines of the current source whose next occurrence can only add to counts (see _repeat_block):
        self._inert: Dict[bytes, Tuple[_LineInfo, Process]] = {}
        self._plain: Dict[bytes, None] = {}  # lines known to have no effect (no key, or no pattern matched)
        self._newlines = 0  # newlines of the current source read so far (_unknown_parts)
        self._ends_with_newline = True
        self._part_start = 0  # newlines before the part being scanned line by line
        self._head: List[bytes] = []
        self._head_left = HEAD_BYTES
        # per source: failure and completion signatures with the lines they were seen on (see _Seen, result())
        self._failures: Dict[str, Dict[str, _Seen]] = {}
        self._completions: Dict[str, Dict[str, _Seen]] = {}
        self._source = ""  # the source being fed (its repeats counted in bulk update its tables)
        self._logged = LoggedExceptions()  # the current source's logged tracebacks (envbuild/explain/logged.py)
        self._tail = b""  # the current source's last bytes read
        # per source: the line from which its failures were logged and gone on from, and its last line (logged.py)
        self._went_on: Dict[str, Tuple[int, Location]] = {}
        self._asking = False  # the source's first line asks whether a message matters (see feed_source)

    # ------------------------------------------------------------------ input

    def feed_source(self, name: str, chunks: Iterable[bytes]) -> None:
        self.sources.append(name)
        self._source = name
        match = self._match
        self._inert.clear()
        self._logged, self._tail = LoggedExceptions(), b""
        chunks = iter(chunks)
        first = next(chunks, b"")
        # a report that asks whether a message matters (in its title or its opening lines: "Is this to be
        # expected?") quotes its failures, it does not claim one: 6 of the 7 corpus logs that ask so in their first
        # 40 lines were runs that went on (the seventh, horovod #300, an O3 hang)
        head = first[:ASKING_HEAD].decode("utf-8", "replace").splitlines()[:ASKING_LINES]
        self._asking = any(_ASKS.search(line) for line in head)
        if first:
            chunks = itertools.chain((first,), chunks)
        for chunk in self._unknown_parts(self._keep_head(chunks), match):
            if chunk is None:  # a part bulk-counted by _unknown_parts
                continue
            pos = 0
            line_no = self._part_start + 1
            counted = 0  # position up to which newlines are counted into line_no
            n = len(chunk)
            view = memoryview(chunk)  # RE2's binding copies a bytes argument on every call, a memoryview it does not
            while pos < n:
                span = match(view, pos, n)
                if span is None:
                    break
                ms, me = span
                start = chunk.rfind(b"\n", 0, ms) + 1
                end = chunk.find(b"\n", me)
                if end < 0:
                    end = n
                line_no += chunk.count(b"\n", counted, start)
                counted = start
                lo, hi = start, end
                if hi - lo > MAX_LINE:
                    lo = max(start, ms - MAX_LINE // 2)
                    hi = min(end, lo + MAX_LINE)
                raw = chunk[lo:hi]
                known = self._inert.get(raw)
                if known is not None:  # a repeat that can only add counts: no per-line bookkeeping
                    info = known[0]
                    self._count_inert(info, 1, line_no)
                else:
                    info = self._line(raw, name, line_no)
                if info is not None and info.struct is not None:  # a traceback's start or end (logged.py)
                    if info.struct[0] == "tb":
                        self._logged.traceback(line_no, _line_above(chunk, start))
                    elif info.struct[0] == "exc":
                        self._logged.exception(line_no)
                pos = end + 1
            line_no += chunk.count(b"\n", counted)
        lines = self._newlines + (0 if self._ends_with_newline else 1)
        self.lines += lines
        self._note_went_on(name, lines)

    def _note_went_on(self, source: str, lines: int) -> None:
        """Whether the source's failures came from exceptions it logged and went on from (logged.py), judged on its
        last non-blank line."""
        text = self._tail.rstrip()
        last_no = lines - max(0, self._tail[len(text):].count(b"\n") - 1)
        last = text[text.rfind(b"\n") + 1:].decode("utf-8", "replace").rstrip("\r")
        last_loud = max((f.last_loud for f in self._failures.get(source, {}).values()), default=-1)
        start = self._logged.went_on_from(_PREFIXES.sub("", last, count=1), last_no, last_loud)
        if start is not None:
            self._went_on[source] = (start, Location(source, last_no, last.strip()[:400], source, _timestamp(last)))

    def _keep_head(self, chunks: Iterable[bytes]) -> Iterable[bytes]:
        """The chunks unchanged; the first HEAD_BYTES of the whole input are copied aside (a bounded slice of the
        first block: a 1 GiB log costs one 64 KiB copy)."""
        for chunk in chunks:
            if self._head_left > 0:
                part = chunk[: self._head_left]
                self._head.append(part)
                self._head_left -= len(part)
            yield chunk

    def _unknown_parts(self, chunks: Iterable[bytes], match: Any) -> Iterable[Optional[bytes]]:
        """The parts of the input that need the line-by-line pass. A block whose distinct lines are all known is
        bulk-counted (None); one that is not is cut at newlines into ~256 KiB pieces that try again, so after the
        first copies of a repeating log the rest of its first block is counted in bulk too. Keeps the source's
        newline count (self._newlines) as it goes: line numbers in the pass are counted within each part."""
        self._newlines, self._ends_with_newline = 0, True
        for chunk in chunks:
            self.bytes += len(chunk)
            if chunk:
                self._tail = chunk[-4096:]
            parts = [chunk] if self._repeat_block(chunk, match) else None
            if parts is not None:
                yield from self._counted(chunk)
                continue
            for piece in _pieces(chunk):
                if piece is not chunk and self._repeat_block(piece, match):
                    yield from self._counted(piece)
                    continue
                self._part_start = self._newlines
                yield piece
                self._newlines += piece.count(b"\n")
                self._ends_with_newline = piece.endswith(b"\n")

    def _counted(self, part: bytes) -> Iterable[None]:
        self._newlines += part.count(b"\n")
        self._ends_with_newline = part.endswith(b"\n")
        yield None

    def _repeat_block(self, chunk: bytes, match: Any) -> bool:
        """Logs repeat (every rank prints the same lines, a retried step the same traceback). When a block's
        distinct lines are all known to be inert, or to hold no key, count them without the line-by-line pass:
        a C-speed split and Counter instead of one regex call per candidate line. False: scan it normally."""
        if not chunk.endswith(b"\n") or len(chunk) > 2 * BLOCK_HINT:
            return False
        lines = chunk.split(b"\n")
        counts = Counter(lines)
        if len(counts) * 2 > len(lines):  # mostly distinct lines: the normal pass is cheaper
            return False
        inert, plain = self._inert, self._plain
        pending = []
        for line in counts:
            if line in inert:
                pending.append(line)
            elif line not in plain:
                if len(line) <= MAX_LINE and match(memoryview(line), 0, len(line)) is None:
                    if len(plain) >= _CACHE_LIMIT * 5:
                        plain.clear()
                    plain[line] = None
                else:
                    return False
        last_line = self._newlines + len(lines) - 1  # the block ends with a newline: its last line's number
        for line in pending:
            self._count_inert(inert[line][0], counts[line], last_line)
        return True

    def _count_inert(self, info: "_LineInfo", k: int, line_no: int) -> None:
        """Add `k` more occurrences of a line known to change nothing but counts, the last of them on `line_no` (for
        a bulk-counted block: its last line, so a failure and a completion repeated in one block tie, and a tie
        leaves the failure open)."""
        for entry, value in info.matches:
            if isinstance(entry, Fact):
                if entry.kind != "phase":
                    fv = self.fact_values[entry.id].get(value or "")
                    if fv is not None:
                        fv.count += k
            else:
                self.hits[entry.id].count += info.times * k
                if entry.kind != "context":
                    seen = (self._failures if entry.kind == "failure" else self._completions)[self._source][entry.id]
                    seen.last_line = max(seen.last_line, line_no)
                    if not info.soft:
                        seen.last_loud = max(seen.last_loud, line_no)

    def _is_inert(self, info: _LineInfo, proc: Process) -> bool:
        """Whether another occurrence of this line could change anything but counts. Phase and traceback lines
        count as inert once applied: a byte-identical repeat of them adds no new order information worth a
        line-by-line pass (lines that carry a time or a pid are distinct anyway)."""
        for entry, value in info.matches:
            if isinstance(entry, Fact):
                if entry.kind == "phase":
                    continue
                values = self.fact_values.get(entry.id, {})
                if (value or "") not in values and len(values) < MAX_VALUES:
                    return False
                continue
            hit = self.hits.get(entry.id)
            if hit is None or len(hit.locations) < MAX_LOCATIONS or (proc.who not in hit.whos and len(hit.whos) < 64):
                return False
            if entry.kind == "failure" and proc.first_failure is None:
                return False
        return True

    def _match_fn(self) -> Any:
        """(buffer, pos, end) -> (start, end) of the next candidate, or None. RE2's compiled object is called
        directly where it exposes Match (one C call per candidate line, no Python match object)."""
        regexp = getattr(self._prefilter, "_regexp", None)
        if regexp is not None and hasattr(regexp, "Match"):
            import re2  # type: ignore[import-not-found]

            anchor = re2._Anchor.UNANCHORED  # noqa: SLF001 - the public wrapper adds a generator per call

            def match(view: Any, pos: int, n: int) -> Optional[Tuple[int, int]]:
                spans = regexp.Match(anchor, view, pos, n)
                return None if spans[0][0] < 0 else spans[0]

            return match
        search = self._prefilter.search

        def match_re(view: Any, pos: int, n: int) -> Optional[Tuple[int, int]]:
            m = search(view, pos)
            return None if m is None else m.span()

        return match_re

    # ------------------------------------------------------------------ one candidate line

    def _info(self, raw: bytes) -> Optional[_LineInfo]:
        """Everything about a line that depends only on its bytes, computed once per distinct line."""
        cached = self._cache.get(raw, _MISSING)
        if cached is not _MISSING:
            return cached  # type: ignore[return-value]
        text = raw.decode("utf-8", "replace").rstrip("\r")
        entries: Dict[int, Any] = {}
        for k in self._keys_in(raw):
            for e in self._closure[k]:
                entries[id(e)] = e
        matches = []
        for e in entries.values():
            m = e.pattern.search(text)
            if m is not None:
                matches.append((e, e.value(m) if isinstance(e, Fact) else None))
        who, body = _who(text)
        struct = _struct(body)
        info: Optional[_LineInfo] = None
        if matches or struct is not None:
            rep = _REPEATED.search(text) if "repeated" in text else None
            ignored = _ignored_report(body, struct)
            info = _LineInfo(tuple(matches), who, struct, int(rep.group(1)) if rep else 1, text.strip()[:400],
                             ignored or _soft(body), ignored)
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[raw] = info
        return info

    def _keys_in(self, raw: bytes) -> List[bytes]:
        """The keys a line holds, the longest at each place, overlapping ones included: "Error 802" holds the
        structural key "Error" and the signature key "rror 802", which starts one byte later. The pre-filter is
        the alternation of the keys, so its match function (_match_fn) finds them."""
        out, pos, n, match = [], 0, len(raw), self._match
        while pos < n:
            span = match(raw, pos, n)
            if span is None:
                break
            out.append(raw[span[0]:span[1]])
            pos = span[0] + 1
        return out

    def _line(self, raw: bytes, source: str, line_no: int) -> Optional["_LineInfo"]:
        """Apply one candidate line; its _LineInfo (None: no pattern matched it)."""
        info = self._info(raw)
        if info is None:  # a key, but no pattern matched: as inert as a line without one
            if len(self._plain) >= _CACHE_LIMIT * 5:
                self._plain.clear()
            self._plain[raw] = None
            return None
        who = info.who if isinstance(info.who, str) else (source if info.who is None else f"{source} rank {info.who[1]}")
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
                ts = _timestamp(info.text)  # type: ignore[union-attr]
                if ts is not None:
                    self._source_ts[source] = ts
                    loc = Location(source, line_no, info.text, who, ts)  # type: ignore[union-attr]
                else:
                    loc = Location(source, line_no, info.text, who, self._source_ts.get(source), False)  # type: ignore[union-attr]
            return loc

        # this line belongs to an exception Python reported and ignored (the report's first line, its traceback, the
        # indented lines right under its exception line: `size mismatch for head.weight: ...` of a state_dict error)
        ignored = proc._ignored_from >= 0 and line_no - proc._ignored_from <= IGNORED_SPAN
        if not ignored and proc._ignored_tail >= 0 and line_no == proc._ignored_tail + 1 and raw[:1] in (b" ", b"\t"):
            ignored, proc._ignored_tail = True, line_no
        if info.struct is not None:
            self._structure(proc, info.struct, line_no)
        for entry, value in info.matches:
            if isinstance(entry, Fact):
                self._fact(entry, value or "", location, proc)
                continue
            self._hit(entry, info.times, location, proc)
            if entry.kind != "context":
                ignored_here = ignored or info.ignored
                self._seen(entry, source, line_no, location(), info.soft or self._asking or ignored_here, ignored_here)
        if loc is not None and proc.first_failure is loc:  # this line is the process's first failure:
            best = max((e for e, _ in info.matches if isinstance(e, Signature) and e.kind == "failure"), key=_strength)
            proc.failure_signature = best.id  # name its most telling signature, not the first one tried
        if raw not in self._inert and self._is_inert(info, proc):
            if len(self._inert) >= _CACHE_LIMIT:
                self._inert.clear()
            self._inert[raw] = (info, proc)
        return info

    def _seen(self, sig: Signature, source: str, line_no: int, where: Location, soft: bool, ignored: bool) -> None:
        table = (self._failures if sig.kind == "failure" else self._completions).setdefault(source, {})
        seen = table.get(sig.id)
        if seen is None:
            seen = table[sig.id] = _Seen(where, line_no, where)
        elif line_no >= seen.last_line:
            seen.last_line, seen.last = line_no, where
        seen.loud = seen.loud or not soft
        if not soft:
            seen.last_loud = line_no
            if seen.first_loud < 0:
                seen.first_loud = line_no
        seen.raised = seen.raised or not ignored
        seen.titled = seen.titled or (line_no == 1 and not soft)

    def _structure(self, proc: Process, struct: Tuple[str, str], line_no: int) -> None:
        """Track tracebacks: the innermost frame and the exception line that ends the first one."""
        kind, value = struct
        if kind == "ignored":
            proc._ignored_from = line_no
        elif kind == "tb":
            proc._in_traceback = True
        elif kind == "frame":
            if proc._in_traceback:
                proc._last_frame = value
        elif kind == "exc" and proc._ignored_from >= 0 and not proc._in_traceback:  # ignored, without traceback
            proc._ignored_from = -1
        elif proc._in_traceback:  # an exception line
            proc._in_traceback = False
            if proc._ignored_from >= 0:  # the exception Python reported and ignored: not the run's
                if not _WRAPPED.search(value):  # a DataLoader worker's own traceback follows: the same report
                    proc._ignored_from, proc._ignored_tail = -1, line_no
                return
            if proc.exception is None:
                proc.exception = value
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
        if sig.kind != "failure":
            return
        if proc.first_failure is None:
            proc.first_failure = location()
            proc.failure_signature = sig.id
            proc.failure_phase = proc.phase or self._source_phase.get(proc.source)


    def result(self) -> ScanResult:
        head = b"\n".join(self._head).decode("utf-8", "replace")
        still_open, loud, recoveries, recovered = self._recoveries()
        raised = {sid for failures in self._failures.values() for sid, f in failures.items() if f.raised}
        return ScanResult(self.hits, self.fact_values, self.processes, self.lines, self.bytes, self.sources, self.engine,
                          head, still_open, recoveries, recovered, still_open - loud, still_open - raised)

    def _recoveries(self) -> Tuple[FrozenSet[str], FrozenSet[str], List[Recovery], int]:
        """Per source, a failure is closed when a completion that closes it was last seen after the failure's last
        line: a completion without `closes` closes every failure; one with `closes` the failures it names and what
        was printed with them (every failure whose last line is within NEAR lines of theirs). A failure seen on a
        source's first line is never closed: a pasted report's first line is its title, the outcome the report is
        about ("axolotl hanging during training"), and what follows is the run that led to it — unless the title is
        soft itself (a question whether a message matters: "What does NCCL WARN ... mean?"). Also returns the open
        failures that, in some source where they stayed open, were printed at least once not as a warning."""
        by_id = {s.id: s for s in self.signatures}
        still_open, loud, recoveries, recovered = set(), set(), [], 0
        for source, failures in self._failures.items():
            completions = self._completions.get(source, {})
            # how far each completion with `closes` reaches: its failures' last line, and NEAR lines after it
            reach = {cid: max((failures[c].last_line + NEAR for c in by_id[cid].closes if c in failures), default=0)
                     for cid in completions if by_id[cid].closes}
            went_on = self._went_on.get(source)
            for sid, f in failures.items():
                closers = [(c.last_line, cid, c.last) for cid, c in completions.items()
                           if not by_id[cid].closes or sid in by_id[cid].closes or f.last_line <= reach[cid]]
                if went_on is not None and (f.first_loud < 0 or f.first_loud >= went_on[0]):
                    closers.append((went_on[1].line, LOGGED_WENT_ON, went_on[1]))
                best = max(closers, key=lambda t: t[0], default=None)
                if f.titled or best is None or best[0] <= f.last_line:
                    still_open.add(sid)
                    if f.loud:
                        loud.add(sid)
                    continue
                recovered += 1
                if len(recoveries) < MAX_RECOVERIES:
                    recoveries.append(Recovery(sid, f.first, f.last_line, best[1], best[2], best[0]))
        return frozenset(still_open), frozenset(loud), recoveries, recovered


_MISSING = object()
PIECE = 256 * 1024  # a block is scanned in newline-aligned pieces of about this size


def _line_above(chunk: bytes, start: int) -> str:
    """The nearest non-blank line before the line that starts at `start` (within two lines of it), as text."""
    end = start - 1
    for _ in range(3):
        if end < 0:
            return ""
        begin = chunk.rfind(b"\n", 0, end) + 1
        line = chunk[begin:end].strip()
        if line:
            return _PREFIXES.sub("", line.decode("utf-8", "replace"), count=1)
        end = begin - 1
    return ""


def _pieces(chunk: bytes) -> Iterable[bytes]:
    """A block cut at newlines into ~256 KiB pieces (the block itself when it is small)."""
    n, pos = len(chunk), 0
    while n - pos > 2 * PIECE:
        cut = chunk.find(b"\n", pos + PIECE)
        if cut < 0 or cut + 1 >= n:
            break
        yield chunk[pos:cut + 1]
        pos = cut + 1
    yield chunk[pos:] if pos else chunk
_PREPARED: Dict[Tuple[Any, ...], Tuple[Any, ...]] = {}


def _prepared(signatures: Sequence[Signature], facts: Sequence[Fact]) -> Tuple[Any, ...]:
    """The pre-filter and the key -> entries closure for one set of entries, built once per set: the benchmark
    builds a scanner per log (with and without a held-out repository's signatures)."""
    ident = (tuple(id(s) for s in signatures), tuple(id(f) for f in facts))
    hit = _PREPARED.get(ident)
    if hit is not None:
        return hit
    entries = [*signatures, *facts]
    free = [k for e in entries if case_free(e.pattern) for k in e.keys]
    keys = [k for e in entries if not case_free(e.pattern) for k in e.keys] + list(_STRUCT_KEYS)
    prefilter, engine = _engine_regex(keys, free=free)
    ordered = sorted(set(keys) | set(free), key=len, reverse=True)
    closure = _Closure(entries)
    if len(_PREPARED) > 256:
        _PREPARED.clear()
    _PREPARED[ident] = (prefilter, engine, ordered, closure)
    return _PREPARED[ident]


class _Closure(dict):  # type: ignore[type-arg]
    """Key bytes as found in a line -> the entries to try: those whose keys are that key or a substring of it
    (the alternation reports one key per spot), compared without case for case-free entries. Filled on first
    use of each spelling, since a case-free key can be found in any of its spellings. A spelling's substrings
    are looked up in a key index rather than every entry's keys tested against it: a found key is short and the
    entries are hundreds, so this is what keeps a log with many distinct keys from paying entries x keys each."""

    def __init__(self, entries: Sequence[Any]):
        super().__init__()
        self._exact: Dict[str, List[int]] = {}  # a case-sensitive key -> indexes of the entries holding it
        self._lower: Dict[str, List[int]] = {}  # a case-free key, lowered -> likewise
        for i, e in enumerate(entries):
            index = self._lower if case_free(e.pattern) else self._exact
            for k in e.keys:
                index.setdefault(k.lower() if index is self._lower else k, []).append(i)
        self._entries = list(entries)
        self._longest = max((len(k) for k in (*self._exact, *self._lower)), default=0)

    def __missing__(self, found: bytes) -> Tuple[Any, ...]:
        text = found.decode("utf-8", "replace")
        low = text.lower()
        hits: Set[int] = set()
        for spelling, index in ((text, self._exact), (low, self._lower)):
            n = len(spelling)
            for i in range(n):
                for j in range(i + 1, min(n, i + self._longest) + 1):
                    hits.update(index.get(spelling[i:j], ()))
        hit = tuple(self._entries[i] for i in sorted(hits))
        if len(self) < _CACHE_LIMIT:  # spellings are few in real logs; a bound keeps a hostile one small
            self[found] = hit
        return hit


def _strength(sig: Signature) -> float:
    return max(sig.supports.values(), default=0.0)


@dataclass(frozen=True)
class _LineInfo:
    matches: Tuple[Tuple[Any, Optional[str]], ...]
    who: Any  # a process name, None (the source itself) or ("rank", n) (a rank within the source)
    struct: Optional[Tuple[str, str]]  # ("tb"|"frame"|"exc", value) for the traceback tracker
    times: int  # Ray's [repeated Nx across cluster]
    text: str  # its time is parsed only when a location is kept (most candidate lines keep none)
    soft: bool = False  # printed at a warning, info or debug level (see _soft)
    ignored: bool = False  # Python's report of an exception it ignored, on this one line (_ignored_report)


def _who(text: str) -> Tuple[Any, str]:
    """Which process printed the line (see _LineInfo.who), and the line without Ray's prefix."""
    m = _RAY.match(text)
    if m:
        who = f"{m.group('actor')} pid={m.group('pid')}" if m.group("pid") else m.group("actor")
        if m.group("ip"):
            who += f" ip={m.group('ip')}"
        return who, text[m.end():]
    if "] NCCL" in text:
        m2 = _NCCL_WHO.search(text)
        if m2:
            return f"{m2.group('host')} pid={m2.group('pid')} [{m2.group('dev')}]", text
    if "ank" in text:
        r = _RANK.search(text)
        if r:
            return ("rank", r.group(1) or r.group(2)), text
    return None, text


def _soft(body: str) -> bool:
    """Whether the line's own log level says the program went on: a warning or info line by glog's `W1206`/`I1206`,
    torch's `[W socket.cpp:634]`, Python logging's `WARNING:name:`, a formatter's `2024-... - WARNING - ` or
    `[INFO|trainer.py:12]`, vLLM's `WARNING 03-05`. The level is the first one written in the line's opening
    characters (after rank and launcher prefixes). Not soft: a line without a level (a traceback, a bare message);
    NCCL's lines (its `WARN` is its error level, and its INFO lines carry the detail of failures: `ncclMaxSharedMem
    ... exceeds`); Python's `UserWarning` (torch's `CUDA initialization: ...` warning means no GPU for the run);
    DEBUG (a harness echoing a program's output at its own level). A reporter's question whether a message matters
    ("What does ... mean?", "can it be safely ignored?") is soft too: it quotes the message, it does not say the run
    failed. (Python's own report of an exception it ignored is soft as well: the scanner asks _ignored_report, once
    per line, since it also keeps which lines those are.)"""
    head = _PREFIXES.sub("", body, count=1)[:96]
    if _SOFT_MARK.search(head) or _ASKS.search(body):
        return True
    if "NCCL " in head:
        return False
    m = opening_level(head)
    return m is not None and m.group(1) in _SOFT_LEVELS


def _ignored_report(body: str, struct: Optional[Tuple[str, str]]) -> bool:
    """Whether the line is Python's report of an exception it ignored: the line that opens one (`struct`, from
    _struct, which already asked _opens_ignored) or Python 2's one-line `Exception E: 'msg' in <bound method
    X.__del__ of <...>> ignored`."""
    return (struct is not None and struct[0] == "ignored") or bool(_DEL_IGNORED.search(body))


def _opens_ignored(body: str) -> bool:
    """Python 3's `Exception ignored in: ...`, the line that opens an ignored-exception report (IGNORED_SPAN), also
    where a reporter quoted it (`> Exception ignored in`); or a logged error that says the program falls back,
    retries or rebuilds (`ERROR data: workers failed; rebuilding the loader with spawn`), whose traceback follows."""
    return body.lstrip(" >").startswith(_IGNORED) or ((";" in body or "," in body) and bool(_HANDLED.search(body)))


def _struct(body: str) -> Optional[Tuple[str, str]]:
    if _opens_ignored(body):
        return ("ignored", "")
    if "Traceback (most recent call last)" in body:
        return ("tb", "")
    if _FRAME_KEY in body:
        f = _FRAME.search(body)
        if f:
            return ("frame", f"{f.group('file')}:{f.group('line')} in {f.group('func')}")
    if "Error" in body or "Exception" in body or "Interrupt" in body:
        stripped = body.strip()
        if _EXC.match(stripped):
            return ("exc", stripped[:300])
    return None


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
