"""envbuild.downloads against a loopback server that drops the first connection half-way: the retry
resumes with a Range request, the hash (computed while streaming, the part on disk included) decides, a
changed file is discarded, and several files go in parallel."""
from __future__ import annotations

import hashlib
import io
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from envbuild.downloads import Download, DownloadHashMismatch, fetch_all, fetch_one
from envbuild.progress import Steps

BLOB = bytes(range(256)) * 4096  # 1 MiB


class _Flaky(BaseHTTPRequestHandler):
    files = {}
    seen = []
    drop_first = set()

    def do_GET(self):  # noqa: N802
        data = self.files.get(self.path)
        if data is None:
            self.send_error(404)
            return
        rng = self.headers.get("Range")
        self.seen.append((self.path, rng))
        start = int(rng.split("=")[1].rstrip("-")) if rng else 0
        self.send_response(206 if rng else 200)
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        if self.path in self.drop_first:
            self.drop_first.discard(self.path)
            self.wfile.write(data[start:start + len(data) // 2])
            self.wfile.flush()
            self.connection.shutdown(2)  # the connection drops at 50 %
            return
        self.wfile.write(data[start:])

    def log_message(self, *args):
        return


@pytest.fixture()
def server():
    _Flaky.files, _Flaky.seen, _Flaky.drop_first = {}, [], set()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_a_dropped_download_resumes_and_is_verified(server, tmp_path, monkeypatch):
    monkeypatch.setattr("envbuild.downloads.time.sleep", lambda _s: None)
    _Flaky.files["/big.whl"] = BLOB
    _Flaky.drop_first.add("/big.whl")
    got = fetch_one(Download(f"{server}/big.whl", tmp_path / "big.whl", (hashlib.sha256(BLOB).hexdigest(),)))
    assert got.read_bytes() == BLOB and not (tmp_path / "big.whl.part").exists()
    ranges = [r for p, r in _Flaky.seen if p == "/big.whl"]
    assert ranges[0] is None and ranges[-1] == f"bytes={len(BLOB) // 2}-"


def test_a_changed_file_is_discarded_naming_it(server, tmp_path):
    _Flaky.files["/x.whl"] = b"not the locked bytes"
    with pytest.raises(DownloadHashMismatch) as err:
        fetch_one(Download(f"{server}/x.whl", tmp_path / "x.whl", ("0" * 64,)))
    assert str(err.value).startswith("x.whl: sha256 ") and "0" * 64 in str(err.value)
    assert not list(tmp_path.iterdir())


def test_parallel_fetch_of_many_files_and_a_404(server, tmp_path):
    for i in range(6):
        _Flaky.files[f"/f{i}"] = BLOB[i:]
    items = [Download(f"{server}/f{i}", tmp_path / f"f{i}", (hashlib.sha256(BLOB[i:]).hexdigest(),)) for i in range(6)]
    log = io.StringIO()
    with Steps("pack", stream=log, tty=False).phase("wheels", total=len(items), unit="wheels") as ph:
        paths = fetch_all(items, jobs=4, phase=ph)
    assert [p.read_bytes() for p in paths] == [BLOB[i:] for i in range(6)]
    size = sum(len(BLOB[i:]) for i in range(6))
    assert ph.done == 6 and ph.bytes == size  # the phase counted every file and byte as it arrived
    assert re.fullmatch(r"pack: wheels \.\.\.\npack: wheels: done in [0-9.]+ s \(6/6 wheels, 6\.0 MiB, [0-9.]+ \w+/s\)\n",
                        log.getvalue()), log.getvalue()
    with pytest.raises(Exception) as err:
        fetch_all([Download(f"{server}/missing.whl", tmp_path / "missing.whl", ("0" * 64,))])
    assert "missing.whl: cannot download" in str(err.value) and "404" in str(err.value)


class _Trickle(BaseHTTPRequestHandler):
    """/slow: 40 MiB sent 1 MiB every 0.1 s (4 s in all); /fast: 1 KiB at once."""

    def do_GET(self):  # noqa: N802
        size = 40 << 20 if self.path == "/slow" else 1024
        self.send_response(200)
        self.send_header("Content-Length", str(size))
        self.end_headers()
        try:
            if self.path != "/slow":
                self.wfile.write(b"f" * size)
                return
            for _ in range(40):
                self.wfile.write(b"s" * (1 << 20))
                self.wfile.flush()
                time.sleep(0.1)
        except OSError:  # the client gave up: that is the point
            pass

    def log_message(self, *args):
        return


def test_ctrl_c_during_a_parallel_fetch_does_not_wait_for_a_large_file(tmp_path):
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Trickle)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"

    class CtrlC:  # a Ctrl-C arrives in the main thread as the first file completes
        def add_bytes(self, n):
            pass

        def advance(self):
            raise KeyboardInterrupt

    items = [Download(f"{url}/slow", tmp_path / "slow.bin", ("0" * 64,)),
             Download(f"{url}/fast", tmp_path / "fast.bin", (hashlib.sha256(b"f" * 1024).hexdigest(),))]
    t0 = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            fetch_all(items, jobs=2, phase=CtrlC())
        took = time.monotonic() - t0
    finally:
        srv.shutdown()
        srv.server_close()
    assert took < 2.0, f"the interrupt waited {took:.1f}s for the large file (it takes 4 s)"
    assert (tmp_path / "fast.bin").is_file() and not (tmp_path / "slow.bin").exists()
    assert 0 < (tmp_path / "slow.bin.part").stat().st_size < 40 << 20  # what arrived stays for a resume
