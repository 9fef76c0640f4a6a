"""In-process CLI runs for the hardening suites: argv -> (exit code, stdout, stderr), as a user would see them."""
from __future__ import annotations

import io
import sys
from contextlib import redirect_stderr, redirect_stdout
from typing import List, NamedTuple


class Outcome(NamedTuple):
    code: int
    out: str
    err: str


def run_cli(argv: List[str]) -> Outcome:
    """envbuild's own entry (envbuild.cli._run: the same error handling as the console script), in this process."""
    from envbuild.cli import _run

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = _run(argv)
        except SystemExit as exc:  # click's own exits (--help)
            code = exc.code if isinstance(exc.code, int) else 1
    return Outcome(code, out.getvalue(), err.getvalue())


def assert_clean_error(res: Outcome, *names: str) -> None:
    """Exit 2, one line (a usage error: click's three), naming `names`, no traceback."""
    assert res.code == 2, res
    assert "Traceback" not in res.err and "Traceback" not in res.out, res.err
    for name in names:
        assert name in res.err, (name, res.err)
