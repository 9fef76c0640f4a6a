"""Root causes as data: one entry per cause in causes.toml (id, title, mechanism, signatures, fix, sources).

Checks name cause ids; the report and (later) `envbuild explain` look them up here. Keeping causes as data
means a new root cause is a TOML edit that a test validates, not code.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Tuple

from envbuild.errors import InputFileError
from envbuild.tomlcompat import toml

CAUSES_FILE = Path(__file__).with_name("causes.toml")
_REQUIRED = ("id", "title", "mechanism", "signatures", "detect", "fix", "sources", "confidence")


@dataclass(frozen=True)
class Cause:
    id: str
    title: str
    mechanism: str
    signatures: Tuple[str, ...]  # exact strings as they appear in logs
    detect: str
    fix: str
    sources: Tuple[str, ...]
    confidence: str


@lru_cache(maxsize=None)
def load_causes(path: Path = CAUSES_FILE) -> Dict[str, Cause]:
    text = path.read_text(encoding="utf-8")
    try:
        data = toml.loads(text)
    except toml.TOMLDecodeError as exc:
        raise InputFileError(path, f"malformed TOML: {exc}", getattr(exc, "lineno", None)) from exc
    causes: Dict[str, Cause] = {}
    for i, entry in enumerate(data.get("cause", [])):
        missing = [k for k in _REQUIRED if k not in entry]
        if missing:
            raise InputFileError(path, f"cause #{i + 1} ({entry.get('id', '?')}) lacks {', '.join(missing)}")
        if entry["id"] in causes:
            raise InputFileError(path, f"cause id {entry['id']} appears twice")
        causes[entry["id"]] = Cause(
            id=entry["id"], title=entry["title"], mechanism=entry["mechanism"],
            signatures=tuple(entry["signatures"]), detect=entry["detect"], fix=entry["fix"],
            sources=tuple(entry["sources"]), confidence=entry["confidence"],
        )
    return causes


def cause_ids() -> List[str]:
    return sorted(load_causes())
