"""`envbuild report html` and `envbuild doctor --html` as a user runs them: the recorded GPU runs of
docs/gpu-runs rendered into pages (exit code, file, what the page says), bad input refused with one line naming
the file, a report without GPU sections turned into a page that says what is missing, and the 64-node page's
size. The browser half (plots drawn, screenshot, no request) is test_report_html_browser.py."""
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUNS = REPO / "docs" / "gpu-runs"
BUNDLE = REPO / "tests" / "fixtures" / "bundles" / "h200x2"


class Run:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def envbuild(*args):
    """The console entry point (envbuild.cli:main) in this process: the same exit codes and output a user gets,
    without paying python's and matplotlib's start-up per call (one test below runs the real process)."""
    import contextlib
    import io

    from envbuild.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return Run(code, out.getvalue(), err.getvalue())


def render(tmp_path, *inputs, name="page.html", extra=()):
    out = tmp_path / name
    proc = envbuild("report", "html", *inputs, "-o", out, *extra)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return out.read_text(encoding="utf-8")


def bench():
    spec = importlib.util.spec_from_file_location("bench_report_html", REPO / "benchmarks" / "bench_report_html.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def marks(page, prefix):
    return len(re.findall(rf'id="{re.escape(prefix)}', page))


def test_full_doctor_run_page_leads_with_verdict_and_draws_its_sections(tmp_path):
    page = render(tmp_path, RUNS / "doctor-full-2gpu.json", extra=["--nccl-tests", RUNS / "bench-allreduce-s2.json"])
    body = page[page.index("<body"):]
    # verdict first: the header comes before every section, the causes before the failing checks
    assert body.index('id="verdict"') < body.index('id="causes"') < body.index('id="findings"') < body.index('id="p2p"')
    assert "PASS with warnings" in page and 'data-verdict="warn"' in page
    for cause in ("C3 · Two or more libnccl copies", "D1 · HMM on the open kernel modules"):
        assert cause in page
    # every warning of the run appears with its fix
    for check in ("node.ulimits", "node.uvm_hmm", "stack.nccl_copies"):
        assert f'<td class="mono">{check}' in page
    assert page.count('class="finding"') == 3 and page.count("<b>fix:</b>") >= 6
    # the plots are there, with the marks of the recorded numbers
    assert marks(page, "p2p-cell-0-1") == 1 and marks(page, "p2p-cell-1-0") == 1
    assert marks(page, "busbw-line-") == 10  # 5 collectives x NCCL_CUMEM_ENABLE=0/1
    assert marks(page, "nccl-ref-all_reduce") == 1  # nccl-tests' all_reduce_perf from the bench JSON
    assert "394 GB/s" in page and "line rate 478 GB/s" in page
    assert "<script" not in page.lower()


def test_page_has_no_external_reference(tmp_path):
    """Self-contained: no src/href to another place, no CSS url(), nothing but inline SVG (its xmlns is a name,
    not a fetch)."""
    page = render(tmp_path, RUNS / "doctor-quick-2gpu-s3.json")
    assert not re.search(r'(?:src|href)\s*=\s*"(?!#|data:)', page)  # in-page anchors and data: only
    assert not re.search(r"url\((?!#)", page) and "@import" not in page  # url(#clip) is an in-SVG reference
    assert set(re.findall(r"https?://[^\"' <)]+", page)) <= {"http://www.w3.org/2000/svg",
                                                             "http://www.w3.org/1999/xlink",
                                                             "http://purl.org/dc/elements/1.1/",
                                                             "http://creativecommons.org/ns#",
                                                             "http://www.w3.org/1999/02/22-rdf-syntax-ns#"}


def test_same_report_gives_the_same_page(tmp_path):
    a = render(tmp_path, RUNS / "h5-probes-2gpu-full.json", name="a.html")
    b = render(tmp_path, RUNS / "h5-probes-2gpu-full.json", name="b.html")
    assert a == b


def test_train_step_page_plots_memory_and_time_per_cycle(tmp_path):
    page = render(tmp_path, RUNS / "train-moe-default-2gpu.json")
    for key in ("used_after_step", "peak_allocated_bytes", "used_before_offload", "used_after_offload"):
        assert marks(page, f"train-mem-{key}") == 1, key
    steps = json.loads((RUNS / "train-moe-default-2gpu.json").read_text())["results"][0]["evidence"]["steps"]
    assert len(steps) == 13 and sum(1 for s in steps if s["cycle"]) == 10
    assert marks(page, "train-time-train_s-") == 13  # a bar per step
    for key in ("sync_s", "offload_s", "resume_s", "rebuild_s"):  # the cycle phases: a bar per cycle step
        assert marks(page, f"train-time-{key}-") == 10, key
    assert "GPU memory 140 GiB" in page


def test_hung_train_step_says_why_there_is_no_plot(tmp_path):
    page = render(tmp_path, RUNS / "train-moe-first-1gpu.json")
    assert "FAIL" in page and marks(page, "train-mem-") == 0
    assert "train.moe_step failed before it measured: [teardown] the train-step cycle hung" in page


def test_report_without_gpu_sections_says_what_is_missing(tmp_path):
    """The static replay of the node has no probe: each plot section names the check and how to run it."""
    page = render(tmp_path, RUNS / "node-doctor-static.json")
    assert "<svg" not in page
    assert "gpu.p2p did not run: it runs with `envbuild doctor --quick` or `--full` on 2 or more GPUs" in page
    assert "comm.nccl_collectives did not run" in page and "train.moe_step did not run" in page
    assert "stack.profile_match did not run: pass `--profile NAME` to `envbuild doctor`" in page
    assert "FAIL" in page  # the node's own failing check still leads the page


def test_several_reports_are_a_fleet_with_a_node_by_check_grid(tmp_path):
    inputs = [RUNS / n for n in ("doctor-full-2gpu.json", "doctor-quick-2gpu-s3-pool.json", "node-doctor-static.json")]
    page = render(tmp_path, *inputs)
    assert "2 of 3 nodes FAIL" in page
    grid = page[page.index('id="grid"'):page.index('id="p2p"')]
    assert grid.count('<tr class="v-') == 3
    # same hostname ("vm") on all three: the file names keep the rows apart
    for stem in ("doctor-full-2gpu", "doctor-quick-2gpu-s3-pool", "node-doctor-static"):
        assert f"vm · {stem}" in grid
    checks = grid.count('class="check"')
    assert grid.count("<td class=\"s-") == 3 * checks
    assert marks(page, "fleet-p2p") == 1 and marks(page, "fleet-busbw-") == 2


def test_folder_input_passes_over_non_reports_and_says_so(tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    for name in ("h5-probes-2gpu-full.json", "bench-allreduce-s2.json", "train-moe-pp2.json"):
        (folder / name).write_bytes((RUNS / name).read_bytes())
    out = tmp_path / "p.html"
    proc = envbuild("report", "html", folder, "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert "bench-allreduce-s2.json: not an envbuild report, passed over" in proc.stderr
    assert "of 2 nodes" in out.read_text() or "all 2 nodes pass" in out.read_text()


def merged(tmp_path, nodes, fleet_results=()):
    """A fleet report as `envbuild report merge` writes it (envbuild/fleet/merge.py on the fleet branch,
    fleet_to_dict): each entry the node's own report plus node/source/node_status/error/fleet_findings."""
    data = {"schema": "envbuild.fleet", "schema_version": 1, "envbuild_version": "0.1.0", "node_count": len(nodes),
            "fleet_results": list(fleet_results), "superseded": [], "nodes": nodes}
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps(data))
    return path


def node_entry(name, report, **extra):
    entry = {"node": name, "source": f"/reports/{name}.json", "node_status": "pass", "error": None,
             "fleet_findings": []}
    entry.update({k: v for k, v in report.items() if k not in entry})
    entry.update(extra)
    return entry


def test_merged_fleet_report_is_read_node_by_node(tmp_path):
    good = json.loads((RUNS / "h5-probes-2gpu-full.json").read_text())
    version = {"check_id": "fleet.envbuild_version", "category": "fleet", "status": "error",
               "summary": "envbuild 0.0.9 on this node, 0.1.0 on the fleet's majority: results do not compare",
               "evidence": {}, "remediation": "install one envbuild on every node", "metrics": [], "causes": [],
               "duration_s": 0.0, "subject": None}
    cross = dict(version, check_id="comm.cross_node", category="comm", status="fail", causes=["N3"],
                 summary="all_reduce across 4 nodes: gpu-02 at 0.41 of the fleet median busbw", remediation="drain gpu-02")
    nodes = [node_entry("gpu-00", good), node_entry("gpu-01", good, fleet_findings=[version]),
             node_entry("gpu-02", good),
             {"node": "gpu-03", "source": "/reports/gpu-03.json", "node_status": "error", "fleet_findings": [],
              "error": "/reports/gpu-03.json:1: truncated JSON: Expecting value (column 1)"}]
    page = render(tmp_path, merged(tmp_path, nodes, [cross]))
    assert "2 of 4 nodes FAIL; fleet-wide comm.cross_node FAIL" in page
    grid = page[page.index('id="grid"'):page.index('id="fleet-wide"')]
    assert all(f"{name}</th>" in grid for name in ("gpu-00", "gpu-01", "gpu-02", "gpu-03"))
    assert "gpu-03 · fleet.node_report · error: /reports/gpu-03.json:1: truncated JSON" in grid
    assert "gpu-01 · fleet.envbuild_version · error" in grid
    wide = page[page.index('id="fleet-wide"'):page.index('id="p2p"')]
    assert "all_reduce across 4 nodes: gpu-02 at 0.41" in wide and "drain gpu-02" in wide
    assert "N3 · " in page[page.index('id="causes"'):page.index('id="findings"')]


def test_merged_report_of_another_version_exits_2(tmp_path):
    path = merged(tmp_path, [])
    data = json.loads(path.read_text())
    data["schema_version"] = 2
    path.write_text(json.dumps(data))
    proc = envbuild("report", "html", path, "-o", tmp_path / "p.html")
    assert proc.returncode == 2 and f"{path}: envbuild.fleet schema_version 2" in proc.stderr


@pytest.mark.parametrize("case, content, message", [
    ("truncated", lambda t: t[: len(t) // 2], "not valid JSON: the file ends early (truncated?)"),
    ("older schema", lambda t: t.replace('"schema_version": 1', '"schema_version": 0', 1),
     "an older report format: envbuild.report schema_version 0; this envbuild reads version 1 only"),
    ("not a report", lambda t: '{"sizes": [1, 2]}', "not an envbuild doctor report"),
    ("no results", lambda t: json.dumps({k: v for k, v in json.loads(t).items() if k != "results"}),
     "not a complete envbuild.report v1 report: the key 'results' is missing"),
    ("bad status", lambda t: t.replace('"status": "pass"', '"status": "great"', 1), "'great' is not a valid Status"),
    ("a list", lambda t: "[1, 2]", "the top level is a JSON list"),
    ("options a list", lambda t: json.dumps(dict(json.loads(t), options=["--quick"])),
     "'options' is an array, expected an object"),
    ("subject an object", lambda t: t.replace('"subject": null', '"subject": {"gpu": 0}', 1),
     "results[2] (comm.nccl_churn): 'subject' is an object, expected a string or null"),
    ("metric value text", lambda t: t.replace('"value": ', '"value": "fast", "was": ', 1),
     "'value' is a string, expected a number"),
])
def test_bad_input_exits_2_naming_the_file_and_keeps_the_old_page(tmp_path, case, content, message):
    bad = tmp_path / "node-7.json"
    bad.write_text(content((RUNS / "h5-probes-2gpu-full.json").read_text()))
    out = tmp_path / "page.html"
    out.write_text("previous page")
    proc = envbuild("report", "html", RUNS / "h5-probes-2gpu-full.json", bad, "-o", out)
    assert proc.returncode == 2, (case, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert str(bad) in lines[0] and message in lines[0], lines[0]
    assert out.read_text() == "previous page"


def test_unknown_fields_within_v1_are_ignored(tmp_path):
    """Fields may be added within a schema version (docs/report-schema.md): a newer node's report still renders."""
    data = json.loads((RUNS / "h5-probes-2gpu-full.json").read_text())
    data["new_top_level"] = {"x": 1}
    for r in data["results"]:
        r["node"] = "gpu-07"
        for m in r["metrics"]:
            m["quantile"] = 0.5
    path = tmp_path / "newer.json"
    path.write_text(json.dumps(data))
    assert marks(render(tmp_path, path), "busbw-line-") == 10


def test_missing_file_and_bad_nccl_tests_reference_exit_2(tmp_path):
    proc = envbuild("report", "html", tmp_path / "nope.json", "-o", tmp_path / "p.html")
    assert proc.returncode == 2 and "nope.json: no such file or folder" in proc.stderr
    ref = tmp_path / "perf.txt"
    ref.write_text("# nccl-tests, but no rows\n")
    proc = envbuild("report", "html", RUNS / "h5-probes-2gpu-full.json", "--nccl-tests", ref, "-o", tmp_path / "p.html")
    assert proc.returncode == 2 and f"{ref}: no nccl-tests result rows" in proc.stderr
    assert not (tmp_path / "p.html").exists()


def test_nccl_tests_stdout_is_a_reference_too(tmp_path):
    """The plain stdout of all_reduce_perf (what a user has) draws the same crosses as the bench JSON."""
    stdout = json.loads((RUNS / "bench-allreduce-s2.json").read_text())["nccl_tests"]["stdout_tail"]
    ref = tmp_path / "all_reduce_perf.log"
    ref.write_text(stdout)
    page = render(tmp_path, RUNS / "doctor-full-2gpu.json", extra=["--nccl-tests", ref])
    assert marks(page, "nccl-ref-all_reduce") == 1
    assert "nccl-tests (all_reduce_perf.log)" in page and ">330<" in page  # 329.97 GB/s at 1 GiB in the table


def test_doctor_html_writes_the_page_of_its_own_run(tmp_path):
    """doctor --html on the captured 2xH200 bundle, compared with its profile: the page has the env-vs-image
    table, and is the page `report html` makes of the run's JSON."""
    page_path, json_path = tmp_path / "doctor.html", tmp_path / "doctor.json"
    proc = envbuild("doctor", "--root", BUNDLE, "--profile", "slime-v0.3.1-cu130", "--json", json_path,
                    "--html", page_path, "-q")
    assert proc.returncode == 0, proc.stderr
    page = page_path.read_text()
    rows = re.findall(r'<tr class="profile-row" data-verdict="([^"]+)"', page)
    match = [r for r in json.loads(json_path.read_text())["results"] if r["check_id"] == "stack.profile_match"][0]
    verdicts = [row["verdict"] for row in match["evidence"]["rows"]]
    assert len(verdicts) == 28 and sorted(rows) == sorted(verdicts) and rows.count("differs") == 3
    assert rows.index("match") > max(rows.index("differs"), rows.index("missing"))  # mismatches first
    assert page == render(tmp_path, json_path, name="again.html")


def test_report_help_lists_html_and_top_level_help_stays_light(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "envbuild", "report", "--help"], cwd=REPO, capture_output=True,
                          text=True)
    assert proc.returncode == 0 and "html" in proc.stdout
    out = tmp_path / "p.html"
    proc = subprocess.run([sys.executable, "-m", "envbuild", "report", "html", RUNS / "doctor-quick-2gpu-s3.json",
                           RUNS / "train-moe-first-1gpu.json", "-o", out], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith(f"wrote {out} (") and out.stat().st_size > 50_000
    code = ("import sys; from envbuild.cli import main\n"
            "try:\n main(['--help'])\nexcept SystemExit: pass\n"
            "sys.stderr.write(str(int('matplotlib' in sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert proc.stderr.strip() == "0"


def test_fleet_of_64_nodes_page_stays_under_5_mb(tmp_path):
    bench().write_fleet(tmp_path / "fleet", 64)
    page = render(tmp_path, tmp_path / "fleet")
    size = len(page.encode())
    assert size < 5_000_000, size
    assert "1 of 64 nodes FAIL" in page and "slowest node: node-017" in page
    grid = page[page.index('id="grid"'):page.index('id="p2p"')]
    assert grid.count('<tr class="v-') == 64


def test_corrupted_fields_give_a_page_or_exit_2_never_a_traceback(tmp_path):
    """Every top-level and result field of a real report replaced by JSON of other types (on the static run,
    which draws no plot, so 80 renders stay fast): exit 0 or 2, one line on a 2, no traceback."""
    base = json.loads((RUNS / "node-doctor-static.json").read_text())
    odd = [None, "x", [], {"a": None}, [1, "a"]]
    seen = {0: 0, 2: 0}
    for where in ["host", "gpus", "options", "profile", "duration_s", "results[4]"] + [
            f"results[4].{k}" for k in ("summary", "evidence", "remediation", "metrics", "causes", "duration_s",
                                        "subject", "category", "status")]:
        for value in odd:
            data = json.loads(json.dumps(base))
            if where.startswith("results[4]."):
                data["results"][4][where.split(".", 1)[1]] = value
            elif where == "results[4]":
                data["results"][4] = value
            else:
                data[where] = value
            path = tmp_path / "r.json"
            path.write_text(json.dumps(data))
            proc = envbuild("report", "html", path, "-o", tmp_path / "p.html")
            assert proc.returncode in (0, 2) and "Traceback" not in proc.stderr, (where, value, proc.stderr)
            if proc.returncode == 2:
                assert len(proc.stderr.strip().splitlines()) == 1 and str(path) in proc.stderr, (where, proc.stderr)
            seen[proc.returncode] += 1
    assert seen[2] > 40 and seen[0] > 5  # most are refused; a null profile or remediation is valid v1
