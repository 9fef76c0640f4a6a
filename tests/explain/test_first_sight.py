"""benchmarks/first_sight.py as a user runs it: it pools the blind slices' first scores from their docs, counts
rows the way bench_explain.py counted them, and says which file and line it cannot read (exit 2, no traceback)."""
import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "first_sight.py"
HEADER = ("| log | thread | established cause | explain: verdict, first cause (others) | confidence | bench |\n"
          "|---|---|---|---|---|---|\n")


def _doc(folder: Path, number: int, rows: str, prose: str = "Scored once.\n\n") -> None:
    (folder / f"explain-slice{number}-before.md").write_text(f"# slice {number}\n\n{prose}{HEADER}{rows}\nAfter.\n")


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def test_pools_slices_and_measures_each_confidence_word(tmp_path):
    _doc(tmp_path, 4, "| a.log | u | C1 | explained, C1 (D9) | high | ok |\n"
                      "| b.log | u | D9 | unknown, C1 (D9) | low | top3 |\n"
                      "| c.log | u | unknown | explained, U2 | medium | ok (failure recognised) |\n"
                      "| d.log | u | none | ok, none named | - | ok |\n")
    _doc(tmp_path, 10, "| e.log | u | U5 (also U1) | explained, U1 (U2) | high | ok (via also) |\n"
                       "| f.log | u | U2 | explained, U3 | high | MISS |\n"
                       "| g.log | u | C10 | ok | - | MISS |\n"
                       "| h.log | u | N3 | explained, N3 | medium | ok |\n")
    proc = _run("--docs", str(tmp_path), "--last", "1", "--json", str(tmp_path / "out.json"))
    assert proc.returncode == 0, proc.stderr
    # 7 logs with a cause or none (c.log is unknown): right first a, d, e, h; among three also b.
    assert "first sight, pooled (slices 4-10, 7 logs with a cause or none): top-1 57.1% (4)  top-3 71.4% (5)" in proc.stdout
    assert "first sight, recent (slice 10, 4 logs with a cause or none): top-1 50.0% (2)" in proc.stdout
    # high: a, e right, f wrong; medium: h (c is unknown-labelled, not a point); low: b; d and g said ok.
    assert "high 3 answers, 66.7% right  medium 1 answers, 100.0% right  low 1 answers, 0.0% right" in proc.stdout
    data = json.loads((tmp_path / "out.json").read_text())
    assert data["pooled"]["top3_n"] == 5 and len(data["rows"]) == 8
    assert [r["log"] for r in data["rows"]][:2] == ["a.log", "b.log"]  # slice 4 before slice 10, numerically


def test_a_row_with_a_missing_cell_names_its_file_and_line(tmp_path):
    _doc(tmp_path, 5, "| a.log | u | C1 | explained, C1 | ok |\n")
    proc = _run("--docs", str(tmp_path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == f"first_sight: {tmp_path / 'explain-slice5-before.md'}:7: 5 cells, the table has 6"


def test_a_verdict_it_does_not_know_is_refused(tmp_path):
    _doc(tmp_path, 6, "| a.log | u | C1 | maybe, C1 | high | ok |\n")
    proc = _run("--docs", str(tmp_path))
    assert proc.returncode == 2 and "verdict 'maybe' is not explained, unknown or ok" in proc.stderr


def test_a_json_path_that_cannot_be_written_is_one_line_and_exit_2(tmp_path):
    _doc(tmp_path, 7, "| a.log | u | C1 | explained, C1 | high | ok |\n")
    proc = _run("--docs", str(tmp_path), "--json", str(tmp_path / "missing" / "out.json"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == f"first_sight: --json {tmp_path / 'missing' / 'out.json'}: No such file or directory"


def test_no_slice_doc_is_exit_2(tmp_path):
    proc = _run("--docs", str(tmp_path))
    assert proc.returncode == 2 and "no explain-slice<N>-before.md under" in proc.stderr


def test_the_committed_docs_agree_with_the_slice_lines_they_printed():
    """Each doc's table, counted back, gives the top-1/top-3 counts of the benchmark line the doc quotes."""
    sys.path.insert(0, str(SCRIPT.parent))
    import first_sight

    rows = first_sight.read_docs()
    assert len({r.slice for r in rows}) >= 20
    for n in sorted({r.slice for r in rows}):
        text = (REPO / "docs" / f"explain-slice{n}-before.md").read_text()
        quoted = re.search(r"top-1 [0-9.]+% \((\d+)\)\s+top-3 [0-9.]+% \((\d+)\)", text)
        got = first_sight.score(r for r in rows if r.slice == n)
        assert quoted and (got["top1_n"], got["top3_n"]) == (int(quoted.group(1)), int(quoted.group(2))), n
