"""`envbuild report merge`: node reports written by the real doctor (replaying the 2xH200 bundle), joined into
one fleet report; what an admin sees: the table, the exit code, the files."""
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / "tests" / "fixtures" / "bundles" / "h200x2"


def envbuild(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "envbuild", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env={"COLUMNS": "300", "PATH": "/usr/bin:/bin"})


@pytest.fixture(scope="module")
def node_report(tmp_path_factory):
    """One real single-node report (doctor replaying the bundle), as a dict."""
    out = tmp_path_factory.mktemp("one") / "one.json"
    proc = envbuild("doctor", "--root", BUNDLE, "--json", out, "-q")
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(out.read_text())


def write_node(folder: Path, name: str, report: dict, **changes) -> Path:
    data = json.loads(json.dumps(report))
    data["host"]["hostname"] = name
    data.update(changes)
    path = folder / f"{name}.json"
    path.write_text(json.dumps(data, indent=2))
    return path


@pytest.fixture
def fleet_dir(tmp_path, node_report):
    d = tmp_path / "reports"
    d.mkdir()
    for i in (1, 2, 10):
        write_node(d, f"gpu{i}", node_report)
    bad = json.loads(json.dumps(node_report))
    bad["results"][0].update(status="fail", summary="GPU 3 fell off the bus", remediation="reseat GPU 3")
    write_node(d, "gpu3", bad)
    return d


def test_merge_table_json_junit_prometheus(fleet_dir, tmp_path, node_report):
    out = tmp_path / "out"
    out.mkdir()  # envbuild never creates a report's folder
    proc = envbuild("report", "merge", fleet_dir, "-o", out / "fleet.json", "--junit", out / "fleet.xml",
                    "--prometheus", out / "fleet.prom")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stdout.splitlines()
    rows = [l.split()[0] for l in lines if l.startswith("gpu") and l.split()[1] in ("pass", "warn", "fail")]
    assert rows == ["gpu1", "gpu2", "gpu3", "gpu10"]  # natural order
    first = node_report["results"][0]["check_id"]
    assert any(l.startswith("FAIL") and first in l and "gpu3: GPU 3 fell off the bus" in l for l in lines)
    assert lines[-1].startswith("FAIL: 4 node(s)") and "bad nodes: gpu3" in lines[-1]

    data = json.loads((out / "fleet.json").read_text())
    assert data["schema"] == "envbuild.fleet" and data["schema_version"] == 1
    assert [n["node"] for n in data["nodes"]] == ["gpu1", "gpu2", "gpu3", "gpu10"]
    assert data["bad_nodes"] == ["gpu3"] and data["exit_code"] == 1
    entry = data["nodes"][0]
    # a node entry is the node's own report, unchanged, plus its name
    assert {k: v for k, v in entry.items() if k not in ("node", "source", "node_status", "error", "fleet_findings")} \
        == {**node_report, "host": {**node_report["host"], "hostname": "gpu1"}}

    suites = ET.parse(out / "fleet.xml").getroot()
    cases = list(suites.iter("testcase"))
    assert len(cases) == 4 * len(node_report["results"]) + 1  # node x check, plus fleet.envbuild_version
    assert len({(c.get("classname"), c.get("name")) for c in cases}) == len(cases)
    failed = [c for c in cases if c.find("failure") is not None]
    assert [c.get("classname").split(".")[1] for c in failed] == ["gpu3"]
    assert failed[0].find("failure").get("message") == "GPU 3 fell off the bus"
    assert "fix: reseat GPU 3" in failed[0].find("failure").text
    with_evidence = [r for r in node_report["results"] if r["evidence"]]
    passing = [c for c in cases if c.find("system-out").text.startswith("PASS")]
    # a passing case: summary and metrics, its evidence only in the fleet JSON; a non-pass case: all of it
    assert passing and not any("evidence:" in c.find("system-out").text for c in passing)
    if node_report["results"][0]["evidence"]:
        assert "evidence: {" in failed[0].find("failure").text
    assert with_evidence
    assert int(suites.get("tests")) == len(cases) and int(suites.get("failures")) == 1

    from prometheus_client.parser import text_string_to_metric_families

    fams = {f.name: f for f in text_string_to_metric_families((out / "fleet.prom").read_text())}
    nodes = {s.labels["node"] for s in fams["envbuild_check_result"].samples}
    assert nodes == {"gpu1", "gpu2", "gpu3", "gpu10"}
    status = {s.labels["node"]: s.value for s in fams["envbuild_node_status"].samples}
    assert status["gpu3"] == 4 and status["gpu1"] < 3


def test_same_inputs_same_bytes(fleet_dir, tmp_path):
    outs = []
    for run in ("a", "b"):
        o = tmp_path / run
        o.mkdir()
        proc = envbuild("report", "merge", fleet_dir, "-o", o / "f.json", "--junit", o / "f.xml",
                        "--prometheus", o / "f.prom")
        outs.append((proc.stdout, proc.returncode) + tuple((o / f).read_bytes() for f in ("f.json", "f.xml", "f.prom")))
    assert outs[0] == outs[1]
    # merging the merged file again gives the same verdict and table
    again = envbuild("report", "merge", tmp_path / "a" / "f.json")
    assert again.stdout == outs[0][0] and again.returncode == 1


def test_bad_node_reports_become_error_rows(tmp_path, node_report):
    d = tmp_path / "r"
    d.mkdir()
    write_node(d, "good1", node_report)
    write_node(d, "good2", node_report)
    write_node(d, "old", node_report, envbuild_version="0.0.1")
    text = json.dumps(node_report)
    (d / "cut.json").write_text(text[: len(text) // 2])
    (d / "junk.json").write_text('{"schema": "envbuild.report", "schema_version": 1,\n "results": [}\n')
    (d / "other.json").write_text(json.dumps({"hello": "world"}))
    write_node(d, "future", node_report, schema_version=7)
    (d / "empty.json").write_text("")
    proc = envbuild("report", "merge", d, "-o", tmp_path / "f.json")
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    out = proc.stdout
    assert f"{d / 'cut.json'}:1: truncated JSON" in out
    assert f"{d / 'junk.json'}:2: malformed JSON" in out
    assert "not an envbuild report" in out and "schema v7" in out and "empty file" in out
    assert "old: report written by envbuild 0.0.1" in out
    data = json.loads((tmp_path / "f.json").read_text())
    status = {n["node"]: n["node_status"] for n in data["nodes"]}
    assert status["cut"] == status["junk"] == status["other"] == status["future"] == status["empty"] == "error"
    assert status["old"] == "error" and status["good1"] != "error"
    assert [r["check_id"] for r in data["fleet_results"]] == ["fleet.envbuild_version"]


@pytest.mark.parametrize("args, message", [
    (["/nonexistent/reports"], "/nonexistent/reports: no such file or directory"),
    (["EMPTY"], "no *.json node reports in this directory"),
])
def test_unusable_input_exits_2(tmp_path, args, message):
    (tmp_path / "EMPTY").mkdir()
    proc = envbuild("report", "merge", *[tmp_path / a if a == "EMPTY" else a for a in args])
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_same_node_twice_keeps_the_newer_run(tmp_path, node_report):
    d = tmp_path / "r"
    d.mkdir()
    (d / "a").mkdir()
    write_node(d / "a", "n1", node_report, started_at="2026-01-01T00:00:00+00:00")
    bad = json.loads(json.dumps(node_report))
    bad["results"][0]["status"] = "fail"
    write_node(d, "n1", bad, started_at="2026-06-01T00:00:00+00:00")
    proc = envbuild("report", "merge", d, "-o", tmp_path / "f.json")
    data = json.loads((tmp_path / "f.json").read_text())
    assert [n["node"] for n in data["nodes"]] == ["n1"] and data["nodes"][0]["node_status"] == "fail"
    assert data["superseded"] == [str(d / "a" / "n1.json")] and proc.returncode == 1


NASTY = 'GPU <3> & "bus"\x01\ttab\nline 2 \\ ü'


def test_odd_characters_survive_every_format(tmp_path, node_report):
    """Summaries, subjects and fixes with XML/Prometheus specials and control characters: the JUnit parses and
    the Prometheus labels read back to the subject (the writers escape by hand, not through a library)."""
    d = tmp_path / "r"
    d.mkdir()
    bad = json.loads(json.dumps(node_report))
    bad["results"][0].update(status="fail", summary=NASTY, remediation=NASTY, subject='gpu"0\\x\ny',
                             evidence={"raw": NASTY, "n": [1, 2.5, None, True, {}, []]})
    write_node(d, "odd<&>", bad)
    write_node(d, "plain", node_report)
    out = tmp_path / "out"
    out.mkdir()
    proc = envbuild("report", "merge", d, "--strict", "-o", out / "f.json", "--junit", out / "f.xml",
                    "--prometheus", out / "f.prom")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    suites = ET.parse(out / "f.xml").getroot()
    case = [c for c in suites.iter("testcase") if c.get("classname").startswith("envbuild.odd<&>.")][0]
    assert case.get("name") == f"{bad['results'][0]['check_id']}[gpu\"0\\x\ny]"
    failure = case.find("failure")
    assert failure.get("message") == NASTY.replace("\x01", "\ufffd")  # XML 1.0 cannot hold \x01
    assert '"raw": "GPU <3> & \\"bus\\"\\u0001' in failure.text  # the evidence, JSON inside the text
    assert int(suites.get("failures")) == len([c for c in suites.iter("failure")])  # --strict: warns fail too

    from prometheus_client.parser import text_string_to_metric_families

    fams = {f.name: f for f in text_string_to_metric_families((out / "f.prom").read_text())}
    subjects = {s.labels["subject"] for s in fams["envbuild_check_result"].samples if s.labels["node"] == "odd<&>"}
    assert 'gpu"0\\x\ny' in subjects


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    | st.tuples(inner, inner),
    max_leaves=25)


@settings(derandomize=True, deadline=None, database=None, max_examples=300)
@given(JSON_VALUES)
def test_junit_evidence_text_is_json_dumps_text(value):
    """The JUnit writer's own indent=1 JSON formatter (2x the json module's speed) writes what json.dumps writes."""
    from envbuild.fleet.junit import _pretty_json

    assert _pretty_json(value) == json.dumps(value, indent=1, sort_keys=True, default=str)
