"""Issue 25: "a cause may not be raised by evidence that every healthy run prints". Lines that runs which went
through print (tests/explain/fixtures/healthy-lines.txt, each copied from a public thread or the message's format)
must not match a signature that supports a cause or says something failed, and a log of them alone is `ok`."""
from pathlib import Path

import pytest

from envbuild.explain.explain import ExplainOptions, run
from envbuild.knowledge.signatures import load_signatures

FIXTURE = Path(__file__).parent / "fixtures" / "healthy-lines.txt"
LINES = [ln for ln in FIXTURE.read_text(encoding="utf-8").splitlines() if ln.strip() and not ln.startswith("#")]


def _runs():
    """The fixture's lines by source (a `# source` line starts one): each group is one run's lines, so facts of
    different runs (one run's driver, another's NCCL build) are not read as one log."""
    groups, cur = [], []
    for ln in FIXTURE.read_text(encoding="utf-8").splitlines():
        if ln.startswith("#"):
            if cur:
                groups.append(cur)
            cur = []
        elif ln.strip():
            cur.append(ln)
    return groups + ([cur] if cur else [])


def test_the_fixture_holds_lines():
    assert len(LINES) >= 12


@pytest.mark.parametrize("line", LINES, ids=[ln[-60:] for ln in LINES])
def test_no_signature_that_raises_a_cause_or_a_failure_matches_a_healthy_line(line):
    fired = [s.id for s in load_signatures()
             if (s.supports or s.kind == "failure") and s.holds_key(line) and s.pattern.search(line)]
    assert fired == [], f"{fired} fire on a line healthy runs print"


@pytest.mark.parametrize("lines", _runs(), ids=lambda g: g[0][-40:])
def test_a_log_of_one_runs_healthy_lines_is_ok(tmp_path, lines):
    log = tmp_path / "healthy.log"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = run(ExplainOptions(paths=[str(log)]))
    assert result["verdict"] == "ok" and result["causes"] == [], [(c["id"], c["adjustments"]) for c in result["causes"]]


def test_a_missing_library_is_still_read_outside_nccls_plugin_probe():
    """The narrowing must not blind the entry: a library the loader cannot find is still evidence."""
    sig = next(s for s in load_signatures() if s.id == "py.cannot_open_so")
    assert sig.pattern.search("OSError: libcudart.so.12: cannot open shared object file: No such file or directory")
    assert not sig.pattern.search(LINES[0])
