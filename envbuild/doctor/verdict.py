"""How a check returns a result without restating who it is: `verdict(status, summary, ...)`.

The runner (envbuild/doctor/runner.py) stamps the running check's id and category on every result, so the id
is written once, where the check is declared. Kept apart from the registry so that the probe helpers
(envbuild/doctor/probes.py) and the registry both use it without importing each other.
"""
from __future__ import annotations

from typing import Any

from envbuild.report.model import Result, Status

# A hang in a collective or in communicator setup: per-step communicator churn (M4) or a GPU held by a
# stale process (D7) are the causes envbuild/knowledge/causes.toml names for it.
DEFAULT_HANG_CAUSES = ("M4", "D7")


def verdict(status: Status, summary: str, **fields: Any) -> Result:
    """A Result of the running check: the runner fills in its id and category, so a check never restates them."""
    return Result("", "", status, summary, **fields)


def mismatch_status(severity: str) -> Status:
    """How a difference from the image is judged: a fail where the profile marks the component `fail`, else a warn."""
    return Status.FAIL if severity == "fail" else Status.WARN
