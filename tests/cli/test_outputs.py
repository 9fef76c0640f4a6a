"""Where a user points a report flag: one line and exit 2 for paths that cannot be written (nothing left behind,
no folders made), `-` is stdout, devices and FIFOs are written in place, and files get the umask's mode."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from clirun import assert_clean_error

REPORT_FLAGS = ["--json", "--junit", "--prometheus"]
DOCTOR = ["doctor", "-q", "--check", "node.ulimits"]


def _bad_paths(tmp_path: Path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    return {
        "a directory": (str(tmp_path), "is a directory"),
        "a missing parent": (str(tmp_path / "missing" / "r.out"), "does not exist"),
        "under /proc": ("/proc/x", "/proc/x"),
        "empty": ("", "empty"),
        "an unwritable folder": (str(ro / "r.out"), "permission denied" if os.geteuid() else None),
    }


@pytest.mark.parametrize("flag", REPORT_FLAGS)
@pytest.mark.parametrize("case", ["a directory", "a missing parent", "under /proc", "empty", "an unwritable folder"])
def test_report_path_that_cannot_be_written(cli, tmp_path, flag, case):
    path, words = _bad_paths(tmp_path)[case]
    if words is None:
        pytest.skip("root writes into a 0500 folder")
    res = cli([*DOCTOR, flag, path])
    assert_clean_error(res, words)
    assert not (tmp_path / "missing").exists(), "folders are never created for a report"
    assert not [p for p in tmp_path.rglob("*") if ".part" in p.name or p.name.startswith(".r.out")]


def test_dash_is_stdout_for_every_report_flag(cli):
    for flag in REPORT_FLAGS:
        res = cli([*DOCTOR, flag, "-"])
        assert res.code in (0, 1), res.err
        assert not Path("-").exists()
        if flag == "--json":
            assert json.loads(res.out)["schema"] == "envbuild.report"
        elif flag == "--junit":
            assert res.out.startswith("<?xml")
        else:
            assert "# TYPE envbuild_" in res.out
        assert "OK" in res.err or "FAIL" in res.err  # the verdict moved to stderr


def test_two_reports_on_stdout_is_bad_usage(cli):
    assert_clean_error(cli([*DOCTOR, "--json", "-", "--junit", "-"]), "--json -", "--junit -")


def test_dev_stdout_is_written_in_place_not_renamed(tmp_path):
    out = tmp_path / "captured.txt"
    with open(out, "w") as fh:
        proc = subprocess.run([sys.executable, "-m", "envbuild", *DOCTOR, "--json", "/dev/stdout"], stdout=fh,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr
    assert json.loads(out.read_text())["schema"] == "envbuild.report"
    assert os.path.islink("/dev/stdout") or stat.S_ISCHR(os.stat("/dev/stdout").st_mode)


def test_fifo_is_written_in_place(cli, tmp_path):
    fifo = tmp_path / "r.fifo"
    os.mkfifo(fifo)
    got = {}
    reader = threading.Thread(target=lambda: got.setdefault("text", open(fifo).read()))
    reader.start()
    res = cli([*DOCTOR, "--prometheus", str(fifo)])
    reader.join(30)
    assert res.code in (0, 1), res.err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and "# TYPE envbuild_" in got["text"]


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_reports_honour_the_umask(cli, tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        paths = {flag: tmp_path / f"r{flag}" for flag in REPORT_FLAGS}
        res = cli([*DOCTOR, *[x for f, p in paths.items() for x in (f, str(p))]])
    finally:
        os.umask(old)
    assert res.code in (0, 1), res.err
    for p in paths.values():
        assert stat.S_IMODE(p.stat().st_mode) == mode, p


def test_atomic_writer_used_by_locks_and_manifests_honours_the_umask(tmp_path):
    from envbuild.fsutil import atomic_write_text

    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "sub" / "manifest.json", "{}\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "sub" / "manifest.json").stat().st_mode) == 0o644


def test_a_link_to_the_report_stays_a_link(cli, tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old\n")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    assert cli([*DOCTOR, "--json", str(link)]).code in (0, 1)
    assert link.is_symlink() and json.loads(real.read_text())["schema"] == "envbuild.report"


@pytest.mark.parametrize("argv, words", [
    (["doctor", "--prefix", ""], "--prefix"),
    (["doctor", "--root", ""], "--root"),
    (["doctor", "--python", ""], "--python"),
    (["create", "--prefix", "", "--dry-run"], "--prefix"),
    (["create", "--name", "", "--dry-run"], "--name"),
    (["capture", "--node", ""], "--node"),
    (["pack", "-o", ""], "--output"),
    (["lock", "--lockfiles", ""], "--lockfiles"),
    (["doctor", "--quick", "--full"], "--quick and --full"),
    (["doctor", "--full", "--quick"], "cannot be given together"),
])
def test_empty_values_and_conflicting_modes_are_usage_errors(cli, argv, words):
    assert_clean_error(cli(argv), words)


@pytest.mark.parametrize("case", ["a file", "a missing parent", "/proc/x", "-"])
def test_capture_and_pack_destinations(cli, tmp_path, case):
    f = tmp_path / "f"
    f.write_text("x")
    node = {"a file": str(f), "a missing parent": str(tmp_path / "no" / "b"), "/proc/x": "/proc/x/b", "-": None}[case]
    if node is not None:
        assert_clean_error(cli(["capture", "--node", node]), "--node")
    out = {"a file": str(tmp_path), "a missing parent": str(tmp_path / "no" / "b.tar"), "/proc/x": "/proc/x",
           "-": "-"}[case]
    assert_clean_error(cli(["pack", "-o", out]), "--output")
    assert not list(tmp_path.rglob("*.part"))


def test_the_atomic_writer_never_renames_over_a_device_or_a_fifo(tmp_path):
    """Every writer (lock files, manifests, fleet reports, HTML pages) goes through atomic_write_text; as root a
    rename over /dev/null would replace the node's /dev/null with a regular file."""
    import stat

    from envbuild.fsutil import atomic_write_text

    before = os.stat("/dev/null")
    atomic_write_text("/dev/null", "nothing\n")
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    atomic_write_text(fifo, "through the pipe\n")
    assert os.read(reader, 100) == b"through the pipe\n" and stat.S_ISFIFO(os.stat(fifo).st_mode)
    os.close(reader)
