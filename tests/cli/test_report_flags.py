"""Every report flag of every command meets the same rules (envbuild/outputs.py), checked before any work: a
missing folder, a folder, a read-only place and a planted symlink are one line and exit 2 naming the flag; `-`
and /dev/stdout are standard output; an existing symlink is written through; /dev/full is one line, exit 2.

"Before any work" is seen from outside: the inputs named here do not exist (report merge, report html, explain),
so a command that looked at its inputs first would name them instead; the doctor would print its verdict."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import List, NamedTuple

import pytest

from clirun import assert_clean_error


class Flag(NamedTuple):
    id: str
    argv: List[str]  # the command before the flag; "{in}" is replaced by a real input (for the cases that write)
    flag: str
    kind: str  # what the written text starts with


DOCTOR = ["doctor", "-q", "--check", "node.ulimits"]
FLAGS = [
    Flag("doctor --json", DOCTOR, "--json", "{"),
    Flag("doctor --junit", DOCTOR, "--junit", "<?xml"),
    Flag("doctor --prometheus", DOCTOR, "--prometheus", "# HELP"),
    Flag("doctor --html", DOCTOR, "--html", "<!DOCTYPE html>"),
    Flag("report merge -o", ["report", "merge", "{in}"], "-o", "{"),
    Flag("report merge --output", ["report", "merge", "{in}"], "--output", "{"),
    Flag("report merge --junit", ["report", "merge", "{in}"], "--junit", "<?xml"),
    Flag("report merge --prometheus", ["report", "merge", "{in}"], "--prometheus", "# HELP"),
    Flag("report html -o", ["report", "html", "{in}"], "-o", "<!DOCTYPE html>"),
    Flag("explain --json", ["explain", "{log}"], "--json", "{"),
]
# the launchers of doctor that refuse before they start (no Ray cluster, no Slurm job in CI)
LAUNCHERS = [
    Flag("doctor --ray --json", ["doctor", "--ray", "127.0.0.1:9"], "--json", ""),
    Flag("doctor --ray --junit", ["doctor", "--ray", "127.0.0.1:9"], "--junit", ""),
    Flag("doctor --ray --html", ["doctor", "--ray", "127.0.0.1:9"], "--html", ""),
    Flag("doctor --health-check --json", ["doctor", "--health-check", "--check", "node.ulimits"], "--json", ""),
]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A real doctor report (for merge and html) and a log (for explain)."""
    from clirun import run_cli

    d = tmp_path_factory.mktemp("inputs")
    res = run_cli([*DOCTOR, "--json", str(d / "node.json")])
    assert res.code in (0, 1), res.err
    (d / "run.log").write_text("torch.distributed.DistBackendError: NCCL error: unhandled cuda error\n")
    return d


def _argv(f: Flag, inputs: Path, missing: bool) -> List[str]:
    node = "/nonexistent/node.json" if missing else str(inputs / "node.json")
    log = "/nonexistent/run.log" if missing else str(inputs / "run.log")
    return [a.replace("{in}", node).replace("{log}", log) for a in f.argv]


def _read_only_place(tmp_path: Path) -> str:
    """A folder no file can be created in: 0500 for a user; root writes there, so /proc (no file can be made in it
    even by root: access() says yes, the real create says no)."""
    if os.geteuid() == 0:
        return "/proc/envbuild-report.out"
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    return str(ro / "r.out")


def _refusals(tmp_path: Path):
    return {
        "a missing folder": (str(tmp_path / "missing" / "r.out"), "does not exist"),
        "a folder": (str(tmp_path), "is a directory"),
        "a read-only place": (_read_only_place(tmp_path), "cannot create a file in" if os.geteuid() == 0
                              else "permission denied"),
    }


ALL = FLAGS + LAUNCHERS


@pytest.mark.parametrize("case", ["a missing folder", "a folder", "a read-only place"])
@pytest.mark.parametrize("f", ALL, ids=[f.id for f in ALL])
def test_a_path_that_cannot_be_written_is_refused_before_any_work(cli, inputs, tmp_path, monkeypatch, f, case):
    path, words = _refusals(tmp_path)[case]
    if case == "a folder" and "--health-check" in f.argv:  # docs/fleet.md: --json DIR/ gets DIR/<node>.json
        monkeypatch.setenv("SLURMD_NODENAME", "n7")
        res = cli([*_argv(f, inputs, missing=True), f.flag, path])
        assert res.code in (0, 1), res
        assert json.loads((tmp_path / "n7.json").read_text())["node"] == "n7"
        return
    res = cli([*_argv(f, inputs, missing=True), f.flag, path])
    assert_clean_error(res, f.flag, path, words)
    assert "/nonexistent" not in res.err and "OK:" not in res.err + res.out and "FAIL:" not in res.err + res.out
    assert not (tmp_path / "missing").exists(), "envbuild never creates a report's folder"


@pytest.mark.parametrize("f", FLAGS, ids=[f.id for f in FLAGS])
def test_dash_is_standard_output(cli, inputs, tmp_path, monkeypatch, f):
    monkeypatch.chdir(tmp_path)
    res = cli([*_argv(f, inputs, missing=False), f.flag, "-"])
    assert res.code in (0, 1), res.err
    assert res.out.lstrip().startswith(f.kind), res.out[:200]
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("f", FLAGS, ids=[f.id for f in FLAGS])
def test_an_existing_symlink_is_written_through_and_stays_a_link(cli, inputs, tmp_path, f):
    real = tmp_path / "real.out"
    real.write_text("old\n")
    link = tmp_path / "link.out"
    link.symlink_to(real)
    res = cli([*_argv(f, inputs, missing=False), f.flag, str(link)])
    assert res.code in (0, 1), res.err
    assert link.is_symlink() and real.read_text().lstrip().startswith(f.kind)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a symlink to another user (lchown)")
@pytest.mark.parametrize("f", ALL, ids=[f.id for f in ALL])
def test_a_symlink_planted_by_another_user_in_a_sticky_folder_is_refused(cli, inputs, tmp_path, f):
    """/tmp's attack: another user's link named like our report, pointing at a file of ours. The kernel refuses
    to follow it (fs.protected_symlinks); realpath and rename would not ask, so envbuild does."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    link = shared / "r.out"
    link.symlink_to(victim)
    os.lchown(link, 54321, 54321)
    res = cli([*_argv(f, inputs, missing=True), f.flag, str(link)])
    assert_clean_error(res, f.flag, "fs.protected_symlinks", "uid 54321")
    assert victim.read_text() == "precious\n"


def test_a_symlink_of_the_sticky_folders_owner_is_followed(cli, inputs, tmp_path):
    """The kernel's rule allows a link owned by the folder's owner (or by us): so does envbuild."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    real = tmp_path / "real.json"
    link = shared / "r.json"
    link.symlink_to(real)
    res = cli([*DOCTOR, "--json", str(link)])
    assert res.code in (0, 1), res.err
    assert json.loads(real.read_text())["schema"] == "envbuild.report"


def _subprocess(argv: List[str], stdout) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envbuild", *argv], stdout=stdout, stderr=subprocess.PIPE,
                          text=True, timeout=120)


@pytest.fixture
def dev_stdout_kept():
    """/dev/stdout must still be the link to /proc/self/fd/1 after a run: a writer that renamed over it (as root)
    replaced the shared machine's /dev/stdout with a regular file. Put it back, then fail."""
    yield
    if os.path.islink("/dev/stdout") or stat.S_ISCHR(os.stat("/dev/stdout").st_mode):
        return
    if os.geteuid() == 0:
        os.unlink("/dev/stdout")
        os.symlink("/proc/self/fd/1", "/dev/stdout")
    pytest.fail("a report writer replaced /dev/stdout with a regular file (restored)")


@pytest.mark.parametrize("f", FLAGS, ids=[f.id for f in FLAGS])
def test_dev_stdout_is_standard_output_and_dev_full_one_line(inputs, tmp_path, dev_stdout_kept, f):
    out = tmp_path / "captured.txt"
    with open(out, "w") as fh:
        proc = _subprocess([*_argv(f, inputs, missing=False), f.flag, "/dev/stdout"], fh)
    assert proc.returncode in (0, 1), proc.stderr
    assert out.read_text().lstrip().startswith(f.kind)
    assert os.path.islink("/dev/stdout") or stat.S_ISCHR(os.stat("/dev/stdout").st_mode)
    proc = _subprocess([*_argv(f, inputs, missing=False), f.flag, "/dev/full"], subprocess.DEVNULL)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    named = "--output" if f.flag == "-o" else f.flag  # messages name the long form of a flag
    assert f"{named} /dev/full: cannot write: No space left on device" in proc.stderr
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_report_html_with_an_empty_output_is_usage_not_a_traceback(cli, inputs):
    """The report group used to load its commands without the shared usage rules."""
    assert_clean_error(cli(["report", "html", str(inputs / "node.json"), "--output", ""]), "--output", "empty")


def test_health_check_takes_no_report_it_cannot_write(cli, tmp_path):
    assert_clean_error(cli(["doctor", "--health-check", "--junit", str(tmp_path / "r.xml")]),
                       "--junit", "--health-check writes its report with --json only")


@pytest.mark.parametrize("launcher", ["--slurm", "--health-check"])
def test_a_per_node_json_folder_that_does_not_exist_is_refused_not_made(cli, tmp_path, monkeypatch, launcher):
    """`--json DIR/` with a missing DIR used to be created (--slurm) or written as a file named DIR
    (--health-check)."""
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURMD_NODENAME", "n7")
    missing = tmp_path / "reports"
    res = cli(["doctor", launcher, "--check", "node.ulimits", "--json", f"{missing}/"])
    assert_clean_error(res, "--json", str(missing), "does not exist")
    assert not missing.exists()
