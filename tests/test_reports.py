"""Report writers: JUnit XML as Jenkins/GitLab read it, the Prometheus textfile as node_exporter and
Prometheus parse it, and the JSON schema v1 as documented in docs/report-schema.md."""
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from envbuild.report.json_report import report_from_dict, report_to_dict, write_json
from envbuild.report.junit import write_junit
from envbuild.report.model import Metric, Report, Result, Status
from envbuild.report.prometheus import write_prometheus

REPO = Path(__file__).resolve().parent.parent


def sample_report(strict=False):
    results = [
        Result("node.driver_version", "node", Status.PASS, "driver 580.159.04 everywhere", duration_s=0.01),
        Result("node.uvm_hmm", "node", Status.WARN, 'HMM on: "open" module\nkernel 6.18', causes=["D1"],
               remediation="options nvidia_uvm uvm_disable_hmm=1", duration_s=0.02),
        Result("gpu.basic", "gpu", Status.FAIL, "gpu1 slow", subject="gpu1", causes=["D3"],
               metrics=[Metric("d2d_busbw", 123.5, "GB/s", ">= 335", "azurehpc-health-checks nd96isr_h100_v5.conf")], duration_s=1.5),
        Result("gpu.basic", "gpu", Status.PASS, "gpu0 ok", subject="gpu0",
               metrics=[Metric("d2d_busbw", 390.0, "GB/s")], duration_s=1.5),
        Result("comm.churn", "comm", Status.SKIP, "needs at least 2 GPUs; 1 selected"),
        Result("stack.torch", "stack", Status.ERROR, "the check itself failed: KeyError: 'x'",
               evidence={"traceback": "Traceback\x00 (most recent call last)\x1b[0m"}),
        Result("stack.nccl_copies", "stack", Status.WARN, "two copies", causes=["C3"]),
        Result("stack.nccl_copies", "stack", Status.WARN, "same check and subject twice", causes=["C3"]),
    ]
    return Report(host={"hostname": "node-7", "kernel": "6.18", "source": "live node (root /)", "captured_at": None},
                  gpus=[{"index": 0, "name": "NVIDIA H200"}], results=results, profile="slime-v0.3.1-cu129",
                  options={"strict": strict}, started_at="2026-11-29T19:22:19+00:00", duration_s=3.0,
                  envbuild_version="0.1.0")


def test_junit_structure_for_jenkins_and_gitlab(tmp_path):
    path = tmp_path / "r.xml"
    write_junit(sample_report(), path)
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors"), root.get("skipped")) == ("8", "1", "1", "1")
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert list(suites) == ["envbuild.node", "envbuild.stack", "envbuild.gpu", "envbuild.comm"]
    for s in suites.values():
        for attr in ("name", "tests", "failures", "errors", "skipped", "time", "timestamp", "hostname"):
            assert s.get(attr) is not None, (s.get("name"), attr)
        cases = s.findall("testcase")
        assert int(s.get("tests")) == len(cases)
        assert int(s.get("failures")) == sum(1 for c in cases if c.find("failure") is not None)
        assert int(s.get("errors")) == sum(1 for c in cases if c.find("error") is not None)
        assert int(s.get("skipped")) == sum(1 for c in cases if c.find("skipped") is not None)
        for c in cases:
            assert c.get("classname") == s.get("name") and c.get("name") and float(c.get("time")) >= 0
    gpu = {c.get("name"): c for c in suites["envbuild.gpu"].findall("testcase")}
    failure = gpu["gpu.basic[gpu1]"].find("failure")
    assert failure.get("message") == "gpu1 slow"
    assert "causes: D3" in failure.text and "d2d_busbw = 123.5 GB/s (expect >= 335)" in failure.text
    assert gpu["gpu.basic[gpu0]"].find("failure") is None
    skipped = suites["envbuild.comm"].find("testcase/skipped")
    assert skipped.get("message") == "needs at least 2 GPUs; 1 selected"
    err = suites["envbuild.stack"].find("testcase/error")
    assert "Traceback" in err.text and "\x00" not in err.text
    warn_case = suites["envbuild.node"].findall("testcase")[1]
    assert warn_case.find("failure") is None and warn_case.find("system-out").text.startswith("WARN: ")


def test_junit_strict_turns_warnings_into_failures(tmp_path):
    path = tmp_path / "r.xml"
    write_junit(sample_report(strict=True), path)
    root = ET.parse(path).getroot()
    assert root.get("failures") == "4"
    node = root.find("testsuite[@name='envbuild.node']")
    assert node.findall("testcase")[1].find("failure").get("type") == "warn"


def test_prometheus_textfile_parses_and_is_one_hot(tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    path = tmp_path / "envbuild.prom"
    path.write_text("old content\n")
    write_prometheus(sample_report(), path)
    assert os.listdir(tmp_path) == ["envbuild.prom"], "the temp file must be renamed away"
    text = path.read_text()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in ("envbuild_check_status", "envbuild_check_result", "envbuild_check_duration_seconds",
                 "envbuild_metric", "envbuild_checks", "envbuild_exit_code", "envbuild_last_run_timestamp_seconds",
                 "envbuild_info", "envbuild_run_duration_seconds"):
        assert name in families, name
        assert families[name].type == "gauge"
        assert f"# HELP {name} " in text and f"# TYPE {name} gauge" in text
    status = families["envbuild_check_status"].samples
    per_result = {}
    for s in status:
        key = (s.labels["check"], s.labels["subject"])
        per_result.setdefault(key, {})[s.labels["status"]] = s.value
    assert len(per_result) == 8  # duplicate (check, subject) got a distinct subject
    for key, by_status in per_result.items():
        assert sorted(by_status) == sorted(st.value for st in Status) and sum(by_status.values()) == 1, key
    assert per_result[("gpu.basic", "gpu1")]["fail"] == 1
    assert per_result[("stack.nccl_copies", "#2")]["warn"] == 1
    codes = {(s.labels["check"], s.labels["subject"]): s.value for s in families["envbuild_check_result"].samples}
    assert codes[("gpu.basic", "gpu1")] == 4 and codes[("node.driver_version", "")] == 0
    metric = [s for s in families["envbuild_metric"].samples if s.labels["subject"] == "gpu1"][0]
    assert metric.labels == {"check": "gpu.basic", "subject": "gpu1", "name": "d2d_busbw", "unit": "GB/s"}
    assert metric.value == 123.5
    assert families["envbuild_exit_code"].samples[0].value == 1
    import datetime

    started = datetime.datetime(2026, 11, 29, 19, 22, 19, tzinfo=datetime.timezone.utc).timestamp()
    assert families["envbuild_last_run_timestamp_seconds"].samples[0].value == started
    counts = {s.labels["status"]: s.value for s in families["envbuild_checks"].samples}
    assert counts == {"pass": 2, "warn": 3, "fail": 1, "skip": 1, "error": 1}
    samples = [line.split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")]
    assert len(samples) == len(set(samples)), "duplicate series"


def _documented_keys(doc: str, section: str):
    body = doc.split(f"### {section}", 1)[1].split("\n### ", 1)[0] if section else doc.split("## Top level", 1)[1].split("\n### ", 1)[0]
    return set(re.findall(r"^\| `([a-z_]+)`", body, flags=re.M)) | {
        k for cell in re.findall(r"^\| (`[a-z_]+`(?:, `[a-z_]+`)+) \|", body, flags=re.M) for k in re.findall(r"`([a-z_]+)`", cell)}


def test_json_report_keys_are_documented_and_round_trip(tmp_path):
    report = sample_report()
    report.options = {"mode": "static", "gpus": None, "checks": [], "skips": [], "strict": False,
                      "python": sys.executable, "root": None, "set": {}}
    data = report_to_dict(report)
    doc = (REPO / "docs" / "report-schema.md").read_text()
    assert set(data) == _documented_keys(doc, "")
    assert set(data["host"]) <= _documented_keys(doc, "host")
    assert set(data["options"]) <= _documented_keys(doc, "options")
    assert set(data["results"][0]) == _documented_keys(doc, "results")
    path = tmp_path / "r.json"
    write_json(report, path)
    again = report_from_dict(json.loads(path.read_text()))
    assert [r.to_dict() for r in again.results] == [r.to_dict() for r in report.results]
    with pytest.raises(ValueError):
        report_from_dict(dict(data, schema_version=2))


def test_doctor_on_this_cpu_machine_writes_all_three_reports(tmp_path):
    j, x, p = tmp_path / "r.json", tmp_path / "r.xml", tmp_path / "r.prom"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", COLUMNS="160")
    proc = subprocess.run([sys.executable, "-m", "envbuild", "doctor", "--json", str(j), "--junit", str(x),
                           "--prometheus", str(p)], capture_output=True, text=True, env=env, cwd=str(REPO),
                          timeout=300)
    data = json.loads(j.read_text())
    assert data["schema"] == "envbuild.report" and data["exit_code"] == proc.returncode
    root = ET.parse(x).getroot()
    assert int(root.get("tests")) == len(data["results"])
    from prometheus_client.parser import text_string_to_metric_families

    fams = {f.name: f for f in text_string_to_metric_families(p.read_text())}
    assert fams["envbuild_exit_code"].samples[0].value == proc.returncode
    for r in data["results"]:
        if r["status"] == "skip":
            assert r["summary"], r["check_id"]
        if r["status"] in ("fail", "warn"):
            assert r["causes"], r["check_id"]
