"""The last gate of `envbuild create` before the swap: the doctor's stack checks on the staged env.

Why here and not after: a stack that contradicts its profile (two NCCLs, a CPU torch, a missing pin) must
never replace a working env. The checks run with the staged prefix's python, static mode (no GPU work),
against the profile. Only `fail` results close the gate; warn/skip/error are reported and let it pass,
because a check that cannot run on this node (no GPU, no torch yet) is no verdict on the env.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, List

from envbuild.errors import EnvbuildError

if TYPE_CHECKING:
    from envbuild.profile import Profile


class DoctorGateFailed(EnvbuildError):
    """The staged env failed a stack check: exit 1 (a verdict, not bad input); the target is untouched."""

    exit_code = 1


@dataclass
class GateResult:
    results: list
    failed: list

    @property
    def ok(self) -> bool:
        return not self.failed


def run_stack_checks(prefix: Path, profile: Profile) -> GateResult:
    """The static stack checks against `prefix`'s python; the runner's skip/error handling applies, so only a
    real FAIL lands in `failed`."""
    from envbuild.doctor.context import DoctorContext
    from envbuild.doctor.registry import all_checks
    from envbuild.doctor.runner import run_checks
    from envbuild.facts.source import open_source
    from envbuild.report.model import Status

    python = str(Path(prefix) / "bin" / "python")
    checks = [c for c in all_checks() if c.category == "stack" and "static" in c.modes]
    ctx = DoctorContext(facts=open_source(None, python=python), profile=profile, mode="static", python=python)
    results = run_checks(checks, ctx) if checks else []
    failed: List = [r for r in results if r.status == Status.FAIL]
    return GateResult(results=results, failed=failed)
