"""The result model every check returns and every renderer reads.

Kept small and stable on purpose: the JSON schema (report/json_report.py) is this model written out,
and admins parse it across many nodes and versions.
"""
from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional

# The categories of checks, in the order every listing and report shows them (node facts first, the train step
# last). Kept with the result model because every renderer sorts by it and the doctor declares checks with it.
CATEGORIES = ("node", "stack", "gpu", "comm", "train")


def category_rank(category: str) -> int:
    """Position of a category in every listing and report; an unknown category sorts after the known ones."""
    return CATEGORIES.index(category) if category in CATEGORIES else len(CATEGORIES)


class Status(str, enum.Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"
    ERROR = "error"  # the check itself broke; never a verdict on the node

    @property
    def rank(self) -> int:
        """Severity order used to pick the worst of several statuses."""
        return {"pass": 0, "skip": 1, "warn": 2, "error": 3, "fail": 4}[self.value]


@dataclass
class Metric:
    """A number with its unit and, where held against one, the expectation and where it comes from."""

    name: str
    value: float
    unit: str
    expect: Optional[str] = None  # e.g. ">= 0.80 x 478 GB/s line rate"
    source: Optional[str] = None  # where the threshold comes from (a public source: an issue, a datasheet, ...)


@dataclass
class Result:
    """One check's verdict. `skip` and every non-pass must carry a summary a person can act on."""

    check_id: str
    category: str
    status: Status
    summary: str
    evidence: Dict[str, Any] = field(default_factory=dict)
    remediation: Optional[str] = None
    metrics: List[Metric] = field(default_factory=list)
    causes: List[str] = field(default_factory=list)  # ids in envbuild/knowledge
    duration_s: float = 0.0
    subject: Optional[str] = None  # e.g. "gpu0" when one check reports per GPU

    @property
    def label(self) -> str:
        """The result as the terminal report and the fold name it: the check, and its subject in brackets."""
        return self.check_id + (f" [{self.subject}]" if self.subject else "")

    @property
    def consequences(self) -> List[str]:
        """The results the doctor's fold put under this one as their root cause (evidence['consequences'], by
        label); empty for any other result."""
        found = self.evidence.get("consequences") if isinstance(self.evidence, dict) else None
        return list(found or [])

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
        return data

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "Result":
        data = dict(data)
        data["status"] = Status(data["status"])
        data["metrics"] = [Metric(**m) for m in data.get("metrics", [])]
        return cls(**data)


@dataclass
class Report:
    """Everything one doctor run found: host facts, GPU inventory and all results."""

    host: Dict[str, Any]
    gpus: List[Dict[str, Any]]
    results: List[Result]
    profile: Optional[str] = None
    options: Dict[str, Any] = field(default_factory=dict)
    started_at: str = ""
    duration_s: float = 0.0
    envbuild_version: str = ""
    # Set when a stop signal ended the run early: {"signal": "SIGTERM", "exit_code": 143, "where": "..."}.
    interrupted: Optional[Dict[str, Any]] = None

    def counts(self) -> Dict[str, int]:
        out = {s.value: 0 for s in Status}
        for r in self.results:
            out[r.status.value] += 1
        return out

    def exit_code(self, strict: bool = False) -> int:
        """0 no fail, 1 any fail (or warn under --strict), 128 + the signal when a stop signal cut the run short.
        Errors count as fails: a broken check proves nothing."""
        if self.interrupted:
            return int(self.interrupted.get("exit_code", 130))
        bad = {Status.FAIL, Status.ERROR} | ({Status.WARN} if strict else set())
        return 1 if any(r.status in bad for r in self.results) else 0
