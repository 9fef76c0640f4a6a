"""The CLI shell: lazy imports, exit codes, selection errors, --list."""
import json
import subprocess
import sys

from envbuild.report.model import Report, Result, Status


def run(args, **kw):
    return subprocess.run([sys.executable, "-m", "envbuild"] + args, capture_output=True, text=True, **kw)


def test_help_lists_commands_without_heavy_imports():
    code = (
        "import sys, runpy\n"
        "sys.argv=['envbuild','--help']\n"
        "try:\n runpy.run_module('envbuild', run_name='__main__')\n"
        "except SystemExit as e:\n assert e.code == 0, e.code\n"
        "heavy=[m for m in ('torch','rich','pynvml','rattler','conda_lock','jinja2','yaml') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    for name in ("doctor", "create", "lock", "pack", "profiles", "capture"):
        assert name in proc.stdout
    assert "HEAVY []" in proc.stdout


def test_unknown_command_is_usage_error():
    proc = run(["frobnicate"])
    assert proc.returncode == 2
    assert "frobnicate" in proc.stderr


def test_check_pattern_matching_nothing_is_exit_2():
    proc = run(["doctor", "--check", "no.such.check*"])
    assert proc.returncode == 2
    assert "no check matches 'no.such.check*'" in proc.stderr


def test_list_prints_registered_checks():
    proc = run(["doctor", "--list"])
    assert proc.returncode == 0, proc.stderr
    from envbuild.doctor.registry import all_checks

    ids = [c.id for c in all_checks()]
    assert ids, "no checks registered"
    for cid in ids:
        assert cid in proc.stdout


def test_bad_set_option_is_exit_2():
    proc = run(["doctor", "--set", "novalue"])
    assert proc.returncode == 2
    assert "KEY=VALUE" in proc.stderr


def test_exit_code_rules():
    def rep(*statuses):
        return Report(host={}, gpus=[], results=[Result("x", "node", s, "s") for s in statuses])

    assert rep(Status.PASS, Status.SKIP).exit_code() == 0
    assert rep(Status.PASS, Status.WARN).exit_code() == 0
    assert rep(Status.PASS, Status.WARN).exit_code(strict=True) == 1
    assert rep(Status.FAIL).exit_code() == 1
    assert rep(Status.ERROR).exit_code() == 1


def test_json_report_round_trip(tmp_path):
    from envbuild.report.json_report import report_from_dict, report_to_dict, write_json
    from envbuild.report.model import Metric

    r = Report(host={"hostname": "h"}, gpus=[], results=[
        Result("comm.x", "comm", Status.WARN, "slow", metrics=[Metric("busbw", 1.5, "GB/s", ">= 2")], causes=["C2"])])
    path = tmp_path / "r.json"
    write_json(r, path)
    data = json.loads(path.read_text())
    assert data["schema"] == "envbuild.report" and data["summary"]["warn"] == 1
    back = report_from_dict(data)
    assert back.results[0].metrics[0].unit == "GB/s"
    assert report_to_dict(back) == data


def test_static_run_on_a_cpu_machine_lists_every_gpu_check_as_skipped_with_why(tmp_path):
    """The CI machine has no driver: exit 0, and each GPU probe is in the report with the reason."""
    from envbuild.doctor.registry import all_checks

    out = tmp_path / "r.json"
    proc = run(["doctor", "-q", "--json", str(out)], env={**__import__("os").environ, "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = {r["check_id"]: r for r in json.loads(out.read_text())["results"]}
    gpu_checks = [c for c in all_checks() if c.modes and "static" not in c.modes]
    assert gpu_checks
    for c in gpu_checks:
        r = results[c.id]
        assert r["status"] == "skip", (c.id, r)
        assert ("driver" in r["summary"]) or ("runs with --" in r["summary"]), (c.id, r["summary"])
