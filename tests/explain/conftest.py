"""Fixtures of the explain tests: `envbuild explain` run as a user runs it. Shared constants and assertions are in
explain_helpers.py."""
import json
import subprocess
import sys

import pytest


def _run(*args: str, stdin: bytes = b"", **kw) -> subprocess.CompletedProcess:
    """`envbuild explain ARGS` as a user runs it: its exit code, stdout and stderr."""
    return subprocess.run([sys.executable, "-m", "envbuild", "explain", *args], input=stdin,
                          capture_output=True, **kw)


@pytest.fixture
def explain():
    return _run


@pytest.fixture
def explain_text(tmp_path):
    """`envbuild explain LOG --json -` on a log holding `text` (UTF-8): (the process, its JSON answer)."""
    def run(text: str):
        log = tmp_path / "x.log"
        log.write_text(text, encoding="utf-8")
        proc = _run(str(log), "--json", "-")
        return proc, json.loads(proc.stdout)
    return run
