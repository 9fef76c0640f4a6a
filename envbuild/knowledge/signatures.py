"""Log signatures and facts as data (knowledge/signatures/*.toml, knowledge/facts.toml).

A signature is one pattern a failure log can hold, what it means, the causes it supports (by how much), the
causes it rules out, and its source; a fact is a value to extract (NCCL version, GPU model, phase). Both are
read by `envbuild explain` and by the doctor's folding of consequences (doctor/fold.py), so a log line is
described once. Every entry carries an example line; the loader checks that the pattern matches it and that
its literal `key` is in it, because the scanner only looks at lines holding a key (the fast pre-filter) — an
entry whose key is not in the lines it matches would silently never fire.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from envbuild.errors import InputFileError, parse_input_toml, read_input_text

KNOWLEDGE_DIR = Path(__file__).parent
SIGNATURES_DIR = KNOWLEDGE_DIR / "signatures"
FACTS_FILE = KNOWLEDGE_DIR / "facts.toml"

# failure: the log shows something broke; context: it only shifts the odds; completion: the run reached a point it
# reaches only when what failed before it was overcome (its end, or a step past a retried connect), so failures
# printed earlier in the same source were recovered from (explain/scan.py keeps which)
KINDS = ("failure", "context", "completion")
FACT_KINDS = ("value", "phase")  # phase: the last one seen before a failure is the phase it failed in
MAX_WEIGHT = 5.0
_SIG_KEYS = {"id", "pattern", "key", "kind", "means", "supports", "rules_out", "consequence_of", "requires",
             "source", "example", "flip", "written_from", "closes"}
_REPO = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$|^[a-z0-9-]+(\.[a-z0-9-]+)+$")
_FACT_KEYS = {"id", "pattern", "key", "kind", "source", "example", "expect", "means"}


@dataclass(frozen=True)
class Signature:
    id: str
    pattern: "re.Pattern[str]"
    keys: Tuple[str, ...]  # literal substrings; a line can match only if it holds one of them
    kind: str
    means: str
    supports: Dict[str, float]  # cause id -> weight (0, MAX_WEIGHT]
    rules_out: Tuple[str, ...]
    consequence_of: Tuple[str, ...]  # causes whose failing check makes this message a consequence (fold.py)
    requires: Tuple[str, ...]  # other signature ids that must also be seen for this one to count
    source: str
    example: str
    flip: Optional[str]  # an env var setting to flip and rerun that tells this signature's causes apart
    file: Path
    line: int
    # Repositories ("owner/name", or a site's host) whose logs the pattern was written from or revised against;
    # empty: written from documentation or the message's own format. The benchmark does not credit a signature
    # on a repository's logs when that repository is the only one it was written from (leave-one-repository-out).
    written_from: Tuple[str, ...] = ()
    # A completion's reach: the failure signatures it shows were overcome (a communicator that finished its set-up
    # after connects were retried); empty: every failure before it in its source (the run's own end)
    closes: Tuple[str, ...] = ()

    def credited_on(self, repository: Optional[str], strict: bool = False) -> bool:
        """Whether this signature would exist had `repository`'s logs been held out. By default a signature written
        from two or more repositories survives holding out either (the others would have produced it); `strict`
        drops it whenever `repository` is among them (a lower bound: the pattern may have been shaped by it)."""
        if repository is None or not self.written_from:
            return True
        return repository not in self.written_from if strict else set(self.written_from) != {repository}

    def holds_key(self, text: str) -> bool:
        """Whether `text` passes this entry's pre-filter (see `holds_key`)."""
        return holds_key(self.pattern, self.keys, text)


@dataclass(frozen=True)
class Fact:
    id: str
    pattern: "re.Pattern[str]"  # the named group `value` (or the whole match) is the fact's value
    keys: Tuple[str, ...]
    kind: str
    means: str
    source: str
    example: str
    file: Path
    line: int

    def value(self, m: "re.Match[str]") -> str:
        return (m.group("value") if "value" in self.pattern.groupindex else m.group(0)).strip()


def case_free(pattern: "re.Pattern[str]") -> bool:
    """Whether an entry is matched whatever the case: its pattern is compiled with `(?i)` at its start. People
    retype error messages in titles and sentences ("cuda error: out of memory", "NCCL Unhandled System Error"),
    so an entry for such a message opts in, and its literal keys are then matched case-insensitively too
    (the scanner's pre-filter, the loader's example check and the doctor's fold all ask this function)."""
    return bool(pattern.flags & re.IGNORECASE)


def holds_key(pattern: "re.Pattern[str]", keys: Tuple[str, ...], text: str) -> bool:
    """Whether `text` holds one of an entry's literal keys, in any case when its pattern is case-free."""
    if case_free(pattern):
        low = text.lower()
        return any(k.lower() in low for k in keys)
    return any(k in text for k in keys)


def _entry_lines(text: str, table: str) -> List[int]:
    """1-based line of each `[[table]]` header: TOML parsers do not report where an entry starts."""
    head = re.compile(r"^\s*\[\[\s*" + re.escape(table) + r"\s*\]\]")
    return [i + 1 for i, line in enumerate(text.splitlines()) if head.match(line)]


def _keys(value: Any) -> Tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and value and all(isinstance(v, str) and v for v in value):
        return tuple(value)
    raise ValueError("key must be a non-empty string or a list of them")


def _compile(pattern: Any) -> "re.Pattern[str]":
    if not isinstance(pattern, str) or not pattern:
        raise ValueError("pattern must be a non-empty regular expression")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"pattern does not compile: {exc}") from exc


def _check_example(pattern: "re.Pattern[str]", keys: Tuple[str, ...], example: Any) -> str:
    if not isinstance(example, str) or not example:
        raise ValueError("example must be a log line the pattern matches")
    if not pattern.search(example):
        raise ValueError(f"pattern does not match its own example {example!r}")
    if not holds_key(pattern, keys, example):
        raise ValueError(f"none of its keys {list(keys)} is in its example; the pre-filter would never pass it")
    return example


def _signature(entry: Dict[str, Any], path: Path, line: int, causes: Dict[str, Any]) -> Signature:
    unknown = set(entry) - _SIG_KEYS
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(sorted(unknown))}")
    for req in ("id", "pattern", "key", "means", "source", "example"):
        if not entry.get(req):
            raise ValueError(f"lacks {req}")
    kind = entry.get("kind", "failure")
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r} is not one of {', '.join(KINDS)}")
    pattern, keys = _compile(entry["pattern"]), _keys(entry["key"])
    supports = entry.get("supports", {})
    if not isinstance(supports, dict):
        raise ValueError("supports must be a table of cause id = weight")
    weights: Dict[str, float] = {}
    for cid, w in supports.items():
        if cid not in causes:
            raise ValueError(f"supports unknown cause {cid!r}")
        if not isinstance(w, (int, float)) or isinstance(w, bool) or not 0 < w <= MAX_WEIGHT:
            raise ValueError(f"weight of {cid} must be a number in (0, {MAX_WEIGHT:g}]")
        weights[cid] = float(w)
    lists = {}
    for name in ("rules_out", "consequence_of", "requires", "written_from", "closes"):
        value = entry.get(name, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{name} must be a list of ids")
        if name == "written_from":
            bad = [v for v in value if not _REPO.match(v)]
            if bad:
                raise ValueError(f"written_from holds {', '.join(bad)}: each must be owner/name or a site's host name")
        elif name not in ("requires", "closes"):
            bad = [v for v in value if v not in causes]
            if bad:
                raise ValueError(f"{name} names unknown cause(s) {', '.join(bad)}")
        lists[name] = tuple(value)
    if kind == "completion" and (weights or lists["rules_out"]):
        raise ValueError("a completion supports and rules out nothing: it only says what was overcome")
    if lists["closes"] and kind != "completion":
        raise ValueError("only a completion closes failures")
    return Signature(
        id=entry["id"], pattern=pattern, keys=keys, kind=kind, means=entry["means"], supports=weights,
        rules_out=lists["rules_out"], consequence_of=lists["consequence_of"], requires=lists["requires"],
        source=entry["source"], example=_check_example(pattern, keys, entry["example"]),
        flip=entry.get("flip"), file=path, line=line, written_from=lists["written_from"], closes=lists["closes"],
    )


def _fact(entry: Dict[str, Any], path: Path, line: int) -> Fact:
    unknown = set(entry) - _FACT_KEYS
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(sorted(unknown))}")
    for req in ("id", "pattern", "key", "source", "example", "expect"):
        if not entry.get(req):
            raise ValueError(f"lacks {req}")
    kind = entry.get("kind", "value")
    if kind not in FACT_KINDS:
        raise ValueError(f"kind {kind!r} is not one of {', '.join(FACT_KINDS)}")
    pattern, keys = _compile(entry["pattern"]), _keys(entry["key"])
    fact = Fact(id=entry["id"], pattern=pattern, keys=keys, kind=kind, means=entry.get("means", ""),
                source=entry["source"], example=_check_example(pattern, keys, entry["example"]), file=path, line=line)
    got = fact.value(pattern.search(fact.example))  # type: ignore[arg-type]
    if got != entry["expect"]:
        raise ValueError(f"extracts {got!r} from its example, expected {entry['expect']!r}")
    return fact


def _load_table(path: Path, table: str) -> List[Tuple[Dict[str, Any], int]]:
    text = read_input_text(path, "a knowledge file")
    data = parse_input_toml(path, text)
    unknown = set(data) - {table}
    if unknown:
        raise InputFileError(path, f"unknown table(s) {', '.join(sorted(unknown))}; expected only [[{table}]]")
    entries = data.get(table, [])
    lines = _entry_lines(text, table)
    if not isinstance(entries, list) or len(lines) != len(entries):
        raise InputFileError(path, f"write every entry as a [[{table}]] table")
    return list(zip(entries, lines))


def load_signature_file(path: Path) -> List[Signature]:
    """One signatures file, validated alone (a test can load a single file)."""
    from envbuild.knowledge import load_causes

    causes = load_causes()
    out = []
    for entry, line in _load_table(path, "signature"):
        try:
            out.append(_signature(entry, path, line, causes))
        except ValueError as exc:
            raise InputFileError(path, f"signature {entry.get('id', '?')}: {exc}", line) from exc
    return out


@lru_cache(maxsize=None)
def load_signatures(directory: Path = SIGNATURES_DIR) -> Tuple[Signature, ...]:
    """Every signature in `directory`/*.toml, ids unique across files, `requires` and `closes` resolved."""
    sigs: List[Signature] = []
    seen: Dict[str, Signature] = {}
    for path in sorted(directory.glob("*.toml")):
        for sig in load_signature_file(path):
            if sig.id in seen:
                first = seen[sig.id]
                raise InputFileError(path, f"signature id {sig.id} also at {first.file.name}:{first.line}", sig.line)
            seen[sig.id] = sig
            sigs.append(sig)
    for sig in sigs:
        for req in sig.requires:
            if req not in seen:
                raise InputFileError(sig.file, f"signature {sig.id} requires unknown signature {req!r}", sig.line)
        for closed in sig.closes:
            if closed not in seen or seen[closed].kind != "failure":
                raise InputFileError(sig.file, f"signature {sig.id} closes {closed!r}, which is no failure signature",
                                     sig.line)
    return tuple(sigs)


@lru_cache(maxsize=None)
def load_facts(path: Path = FACTS_FILE) -> Tuple[Fact, ...]:
    """Every fact pattern; one id may have several patterns (the NCCL banner and torch's error both name the
    NCCL version)."""
    out: List[Fact] = []
    for entry, line in _load_table(path, "fact"):
        try:
            out.append(_fact(entry, path, line))
        except ValueError as exc:
            raise InputFileError(path, f"fact {entry.get('id', '?')}: {exc}", line) from exc
    return tuple(out)


FLIPS_FILE = KNOWLEDGE_DIR / "flips.toml"


@dataclass(frozen=True)
class Flip:
    cause: str
    set: str  # what to set before the rerun, e.g. NCCL_NVLS_ENABLE=0
    reading: str  # what the rerun's outcome says


@lru_cache(maxsize=None)
def load_flips(path: Path = FLIPS_FILE) -> Dict[str, Tuple[Flip, ...]]:
    """Per cause, the variable flips that tell it apart from its neighbours (flips.toml)."""
    from envbuild.knowledge import load_causes

    causes = load_causes()
    out: Dict[str, List[Flip]] = {}
    for entry, line in _load_table(path, "flip"):
        missing = [k for k in ("cause", "set", "reading") if not entry.get(k)]
        if missing or set(entry) - {"cause", "set", "reading"}:
            raise InputFileError(path, f"flip needs exactly cause, set, reading (missing {', '.join(missing) or '-'})", line)
        if entry["cause"] not in causes:
            raise InputFileError(path, f"flip names unknown cause {entry['cause']!r}", line)
        out.setdefault(entry["cause"], []).append(Flip(entry["cause"], entry["set"], entry["reading"]))
    return {k: tuple(v) for k, v in out.items()}
