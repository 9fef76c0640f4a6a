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
    """The doctor's static stack checks against `prefix`'s python, run as one doctor session (the same
    selection, runner and report `envbuild doctor --check stack --prefix P --profile F` gives), so the
    runner's skip/error handling applies and only a real FAIL lands in `failed`."""
    import contextlib
    import io
    import json
    import tempfile

    from envbuild.doctor.session import DoctorOptions, run_doctor
    from envbuild.report.json_report import report_from_dict
    from envbuild.report.model import Status

    with tempfile.TemporaryDirectory(prefix="envbuild-gate-") as tmp:
        out = Path(tmp) / "report.json"
        opts = DoctorOptions(profile=str(profile.path), prefix=str(prefix), mode="static", checks=["stack"],
                             quiet=True, json_path=str(out))
        with contextlib.redirect_stdout(io.StringIO()):  # create keeps stdout clean; the UI prints the verdict
            run_doctor(opts)
        results = report_from_dict(json.loads(out.read_text(encoding="utf-8"))).results
    failed: List = [r for r in results if r.status == Status.FAIL]
    return GateResult(results=results, failed=failed)
