"""Bad input to `envbuild explain`: one clear line, exit 2 when nothing can be read, a note beside the result
when part of it can, never a traceback."""
import gzip
import os
import sys

import pytest

from explain_helpers import CORPUS


def _no_traceback(proc):
    assert b"Traceback" not in proc.stderr and b"Traceback" not in proc.stdout, proc.stderr


def test_missing_path_exits_2_naming_it(explain, tmp_path):
    proc = explain(str(tmp_path / "nope.log"))
    assert proc.returncode == 2
    assert f"{tmp_path / 'nope.log'}: no such file or directory".encode() in proc.stderr
    _no_traceback(proc)


def test_no_arguments_is_bad_usage(explain):
    proc = explain()
    assert proc.returncode == 2 and b"give one or more log files" in proc.stderr
    _no_traceback(proc)


def test_empty_file_exits_2(explain, tmp_path):
    p = tmp_path / "empty.log"
    p.write_bytes(b"")
    proc = explain(str(p))
    assert proc.returncode == 2 and b"no log text to read" in proc.stderr
    _no_traceback(proc)


def test_binary_junk_is_skipped_with_a_note(explain, tmp_path):
    p = tmp_path / "core.bin"
    p.write_bytes(os.urandom(4096) + b"\x00" * 4096)
    proc = explain(str(p))
    assert proc.returncode == 2 and b"binary data, not a text log" in proc.stderr
    _no_traceback(proc)
    # beside a readable log the binary one is a note, and the log is still explained
    proc = explain(str(p), str(CORPUS / "nccl-1653.log"))
    assert proc.returncode == 1 and b"binary data, not a text log" in proc.stdout and b"most likely M1" in proc.stdout


def test_non_utf8_text_is_read(explain, tmp_path):
    p = tmp_path / "latin1.log"
    p.write_bytes("caf\xe9 d\xe9j\xe0 vu\n".encode("latin-1") + b"\xff\xfe Cuda failure 217 'peer access is not supported between these two devices'\n")
    proc = explain(str(p))
    assert proc.returncode == 1 and b"most likely M2" in proc.stdout
    _no_traceback(proc)


def test_truncated_gzip_reads_what_is_there(explain, tmp_path):
    data = gzip.compress((CORPUS / "nccl-1653.log").read_bytes() * 50)
    p = tmp_path / "cut.log.gz"
    p.write_bytes(data[: len(data) // 2])
    proc = explain(str(p))
    assert proc.returncode == 1 and b"truncated gzip stream" in proc.stdout and b"most likely M1" in proc.stdout
    _no_traceback(proc)


def test_damaged_gzip_header_is_a_note(explain, tmp_path):
    p = tmp_path / "bad.gz"
    p.write_bytes(b"\x1f\x8b\x08\x00garbage-not-deflate" * 10)
    proc = explain(str(p))
    assert proc.returncode == 2 and b"gzip" in proc.stderr
    _no_traceback(proc)


def test_100mb_single_line_is_bounded(explain, tmp_path):
    p = tmp_path / "one-line.log"
    with open(p, "wb") as f:
        for _ in range(100):
            f.write(b"x" * (1 << 20))
        f.write(b" NCCL WARN Cuda failure 'named symbol not found'\n")
    proc = explain(str(p), timeout=120)
    assert proc.returncode == 1 and b"most likely D10" in proc.stdout
    _no_traceback(proc)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads every file")
def test_unreadable_files_in_a_directory_are_noted(explain, tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    (d / "good.log").write_bytes((CORPUS / "nccl-1653.log").read_bytes())
    secret = d / "secret.log"
    secret.write_text("x\n")
    secret.chmod(0)
    locked = d / "locked"
    locked.mkdir()
    (locked / "inner.log").write_text("y\n")
    locked.chmod(0)
    try:
        proc = explain(str(d))
    finally:
        locked.chmod(0o755)
    out = proc.stdout
    assert proc.returncode == 1, proc.stderr
    assert b"secret.log: skipped: cannot read" in out and b"locked: skipped: cannot list" in out
    assert b"most likely M1" in out
    _no_traceback(proc)


def test_directory_without_files_exits_2(explain, tmp_path):
    d = tmp_path / "empty-dir"
    d.mkdir()
    proc = explain(str(d))
    assert proc.returncode == 2 and b"directory holds no files" in proc.stderr
    _no_traceback(proc)


@pytest.mark.parametrize("flag,value,words", [
    ("--report", "notjson", b"not valid JSON"),
    ("--report", '{"results": [{"status": "fail"}]}', b"not an envbuild doctor report"),
    ("--root", None, b"is not an envbuild bundle"),
    ("--profile", "no-such-profile", b"unknown profile 'no-such-profile'"),
])
def test_bad_context_inputs_exit_2(explain, tmp_path, flag, value, words):
    if flag == "--report":
        arg = tmp_path / "doctor.json"
        arg.write_text(value)
    elif flag == "--root":
        arg = tmp_path
    else:
        arg = value
    proc = explain(str(CORPUS / "nccl-1653.log"), flag, str(arg))
    assert proc.returncode == 2 and words in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    _no_traceback(proc)
