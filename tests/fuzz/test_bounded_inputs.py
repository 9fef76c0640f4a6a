"""Every input file has a size cap and a file-type check, and bad input is one clear line (issue 27's pass):
profile.toml as /dev/zero or a FIFO, `report html --nccl-tests /dev/zero`, a 5000-character profile name, deep
JSON to report merge/html and explain, a report whose host is a number, a binary --report. Then generated inputs
of the same classes (hypothesis, derandomized)."""
import json
import os
import stat
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clirun import assert_clean_error, run_cli

FUZZ = dict(derandomize=True, deadline=None, database=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
REPO = Path(__file__).resolve().parents[2]
NODE_REPORT = REPO / "docs" / "gpu-runs" / "doctor-quick-2gpu-s3.json"


@pytest.fixture
def profiles(tmp_path, monkeypatch):
    base = tmp_path / "lockfiles"
    (base / "p1").mkdir(parents=True)
    monkeypatch.setenv("ENVBUILD_LOCKFILES", str(base))
    return base


@pytest.mark.timeout(60)  # a FIFO used to hang the reader: a hang is a failure, not a stuck suite
@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "directory"])
@pytest.mark.parametrize("argv", [["profiles", "show", "p1"], ["lock", "--profile", "p1"]])
def test_a_profile_that_is_not_a_regular_file_is_refused_at_once(profiles, kind, argv):
    toml = profiles / "p1" / "profile.toml"
    if kind == "dev-zero":
        toml.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(toml)
    else:
        toml.mkdir()
    res = run_cli(argv)
    assert_clean_error(res, "profile.toml")
    assert "not a regular file" in res.err or "is a directory" in res.err.lower(), res.err


def test_an_oversized_profile_is_refused_without_reading_it(profiles):
    toml = profiles / "p1" / "profile.toml"
    with open(toml, "wb") as fh:
        fh.truncate(200 * 1024 * 1024)  # sparse: 200 MB of size, no disk
    res = run_cli(["profiles", "show", "p1"])
    assert_clean_error(res, "profile.toml", "limit")


def test_a_5000_character_profile_name_is_one_line(profiles):
    res = run_cli(["profiles", "show", "a" * 5000])
    assert_clean_error(res)
    assert len(res.err.strip().splitlines()) == 1


def test_nccl_tests_from_dev_zero_is_refused(tmp_path):
    res = run_cli(["report", "html", str(NODE_REPORT), "--nccl-tests", "/dev/zero", "-o", str(tmp_path / "r.html")])
    assert_clean_error(res, "/dev/zero", "not a regular file")


def deep(n):
    return "[" * n + "]" * n


def test_deep_json_is_one_line_everywhere(tmp_path):
    f = tmp_path / "deep.json"
    f.write_text(deep(100_000))
    merged = run_cli(["report", "merge", str(f)])
    assert merged.code == 1 and "deep.json: JSON nested too deeply to read" in merged.out, merged
    assert_clean_error(run_cli(["report", "html", str(f), "-o", str(tmp_path / "r.html")]), "nested too deeply")
    assert_clean_error(run_cli(["explain", "--report", str(f)]), "nested too deeply")


def test_a_report_whose_host_is_a_number_is_that_nodes_error_row(tmp_path):
    data = json.loads(NODE_REPORT.read_text())
    data["host"] = 5
    f = tmp_path / "n.json"
    f.write_text(json.dumps(data))
    res = run_cli(["report", "merge", str(f), "-o", str(tmp_path / "fleet.json")])
    assert res.code == 1 and "Traceback" not in res.err, res
    node = json.loads((tmp_path / "fleet.json").read_text())["nodes"][0]
    assert node["node"] == "n" and node["error"]


def test_a_binary_report_to_explain_is_one_line(tmp_path):
    f = tmp_path / "r.json"
    f.write_bytes(bytes(range(256)) * 10)
    assert_clean_error(run_cli(["explain", "--report", str(f)]), "r.json", "not UTF-8")


# generated: JSON of any shape and depth, and any bytes, to every JSON reader; any file type to the profile reader

json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                           lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids,
                                                                                        max_size=3), max_leaves=12)


@settings(max_examples=25, **FUZZ)
@given(data=st.data(), depth=st.integers(0, 5000), raw=st.binary(max_size=64))
def test_generated_reports_never_trace_back(tmp_path_factory, data, depth, raw):
    tmp = tmp_path_factory.mktemp("rep")
    report = json.loads(NODE_REPORT.read_text())
    key = data.draw(st.sampled_from(["host", "results", "gpus", "schema_version", "node", "options"]))
    report[key] = data.draw(json_values)
    body = data.draw(st.sampled_from([json.dumps(report), deep(depth), raw.decode("latin-1")]))
    f = tmp / "r.json"
    f.write_text(body, encoding="utf-8", errors="surrogateescape")
    for argv in (["report", "merge", str(f), "-q"], ["report", "html", str(f), "-o", str(tmp / "o.html")],
                 ["explain", "--report", str(f)]):
        res = run_cli(argv)
        assert "Traceback" not in res.err + res.out and res.code in (0, 1, 2), (argv, res)
        if res.code == 2:
            assert len(res.err.strip().splitlines()) == 1, res.err


@pytest.mark.timeout(300)
@settings(max_examples=30, **FUZZ)
@given(kind=st.sampled_from(["fifo", "chr", "dir", "socket", "big", "binary"]), size=st.integers(4 << 20, 1 << 34))
def test_generated_profile_file_types_and_sizes_are_refused(tmp_path_factory, kind, size):
    import socket

    base = tmp_path_factory.mktemp("lf")
    (base / "p1").mkdir()
    toml = base / "p1" / "profile.toml"
    if kind == "fifo":
        os.mkfifo(toml)
    elif kind == "chr":
        toml.symlink_to("/dev/urandom")
    elif kind == "dir":
        toml.mkdir()
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(toml))
        s.close()
    elif kind == "big":
        with open(toml, "wb") as fh:
            fh.truncate(size)
    else:
        toml.write_bytes(os.urandom(64) + b"\xff")
    os.environ["ENVBUILD_LOCKFILES"] = str(base)
    try:
        res = run_cli(["profiles", "show", "p1"])
    finally:
        del os.environ["ENVBUILD_LOCKFILES"]
    assert_clean_error(res, "profile.toml")
    assert len(res.err.strip().splitlines()) == 1
