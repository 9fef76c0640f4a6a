"""Root causes as data: one entry per cause in causes.toml (id, title, mechanism, signatures, fix, sources).

Checks name cause ids; the report and (later) `envbuild explain` look them up here. Keeping causes as data
means a new root cause is a TOML edit that a test validates, not code.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Tuple

from envbuild.errors import InputFileError, parse_input_toml, read_input_text

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
    """The causes file, parsed and validated once per process: causes_in_text consults it for every failing
    stack check, and a malformed entry must stop the run with its file and line, not surface mid-report."""
    data = parse_input_toml(path, read_input_text(path, "the causes file"))
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
