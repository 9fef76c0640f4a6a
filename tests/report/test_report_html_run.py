"""`envbuild report html RUN_DIR`: the page of an `envbuild record` run directory (a timeline per process), from a
run dir laid out as docs/record.md says (a small explicit builder; tests/record/test_record_explain.py renders
the pages of real recorded jobs)."""
import json
import re
import subprocess
import sys
from pathlib import Path

from test_report_html_browser import Opened, chromium, drawn  # noqa: F401 (chromium: the module's browser fixture)

REPO = Path(__file__).resolve().parents[2]


def _proc(root, pid, role, events, alive, env=None, host="h1"):
    pd = root / host / "proc" / f"{pid}-100"
    pd.mkdir(parents=True)
    (pd / "start.json").write_text(json.dumps({"schema": "envbuild.record.process/1", "pid": pid, "role": role,
                                               "host": host, "t_start": 1000.0, "env": env or {}, "heartbeat_s": 1}))
    (pd / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (pd / "alive.json").write_text(json.dumps({"t": alive, "pid": pid}))


def _run_dir(root):
    root.mkdir()
    (root / "run.json").write_text(json.dumps({"schema": "envbuild.record.run/1", "envbuild_version": "0.1.0"}))
    pg = {"kind": "process_group", "op": "init", "backend": "gloo", "world": 2}
    _proc(root, 11, "Trainer", [{"t": 1000.0, "kind": "start"}, {"t": 1001.0, **pg, "rank": 0},
                                {"t": 1004.0, "kind": "hang", "stuck_s": 2.0, "collective": "all_reduce"},
                                {"t": 1010.0, "kind": "exception", "first": True, "type": "RuntimeError",
                                 "message": "Timed out waiting 8000ms for recv"}], alive=1010.5)
    _proc(root, 12, "Trainer", [{"t": 1000.0, "kind": "start"}, {"t": 1001.0, **pg, "rank": 1}], alive=1002.0)
    _proc(root, 13, "Rollout", [{"t": 1000.0, "kind": "start"}, {"t": 1011.0, "kind": "exit", "code": None}],
          alive=1011.0)


def _html(args, **kw):
    return subprocess.run([sys.executable, "-m", "envbuild", "report", "html", *args], capture_output=True,
                          text=True, cwd=REPO, timeout=120, **kw)


def test_run_dir_page_has_one_timeline_row_per_process_and_names_the_first_failure(tmp_path):
    _run_dir(tmp_path / "run")
    out = tmp_path / "run.html"
    proc = _html([str(tmp_path / "run"), "-o", str(out)])
    assert proc.returncode == 0, proc.stderr
    assert "wrote" in proc.stdout + proc.stderr
    page = out.read_text()
    rows = re.findall(r'<g id="proc-row-\d+" class="row state-(\w+)( first)?"', page)
    assert sorted(s for s, _ in rows) == ["exited", "failed", "silent"]
    assert [s for s, first in rows if first] == ["silent"]  # the stopped trainer went silent first
    assert "U6" in page and "pid 12" in page.split('id="causes"')[1].split("</section>")[0]
    assert re.search(r"<title>[^<]*hang: main thread still for 2.0 s in all_reduce</title>", page)
    assert "<script" not in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    again = tmp_path / "again.html"
    _html([str(tmp_path / "run"), "-o", str(again)])
    assert again.read_bytes() == out.read_bytes()  # no generation time: the same run dir, the same page


def test_a_run_dir_with_nothing_recorded_still_gets_a_page_saying_so(tmp_path):
    (tmp_path / "run" / "h1" / "proc" / "7-1").mkdir(parents=True)
    proc = _html([str(tmp_path / "run"), "-o", str(tmp_path / "p.html")])
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "p.html").read_text()
    assert "no recorded failure" in page and "no start.json" in page


def test_an_unwritable_output_is_one_line_and_exit_2(tmp_path):
    _run_dir(tmp_path / "run")
    proc = _html([str(tmp_path / "run"), "-o", str(tmp_path / "no-such-dir" / "p.html")])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_run_page_opens_offline_with_its_timeline_drawn_in_chromium(chromium, tmp_path):
    from envbuild.report.html import write_html
    from envbuild.explain.run_page import render_run

    _run_dir(tmp_path / "run")
    page = tmp_path / "run.html"
    write_html(render_run(str(tmp_path / "run"))[0], str(page))
    view = Opened(chromium, page)
    try:
        view.assert_isolated()
        bars = view.boxes("#plot-timeline g.row rect.bar")
        assert len(bars) == 3 and drawn(bars, 2, 10), bars
        marks = view.boxes("#plot-timeline g.row rect.mark")
        assert len(marks) == 5 and drawn(marks, 3, 15), marks  # 2 group inits, the hang, the exception, the exit
        first = view.page.evaluate("getComputedStyle(document.querySelector('g.first rect.bar')).stroke")
        assert first.startswith("rgb(198, 40, 40)"), first  # the first failure is outlined in the fail colour
        assert view.page.inner_text("#verdict h1").startswith("U6")
    finally:
        view.close()
