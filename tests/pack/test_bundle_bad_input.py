"""A damaged or hostile bundle is one line and exit 2, before anything is built: a manifest member far over any
real manifest's size (a small .tar.gz that unpacks to gigabytes) is refused before it is extracted, and a
manifest of the wrong shape is named as such, never a traceback."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile


def _bundle(path, manifest: bytes, size: int = 0):
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("envbuild-bundle.json")
        if size:
            class Zeros(io.RawIOBase):  # streams `size` zero bytes without holding them
                left = size

                def readable(self):
                    return True

                def readinto(self, b):
                    n = min(len(b), self.left)
                    b[:n] = bytes(n)
                    self.left -= n
                    return n
            info.size = size
            tar.addfile(info, io.BufferedReader(Zeros(), 1 << 20))
        else:
            info.size = len(manifest)
            tar.addfile(info, io.BytesIO(manifest))
    return path


def _create(bundle, tmp_path):
    return subprocess.run([sys.executable, "-m", "envbuild", "create", "--bundle", str(bundle), "--prefix",
                           str(tmp_path / "env"), "--dry-run"], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, ENVBUILD_CACHE_DIR=str(tmp_path / "cache")))


def test_a_huge_manifest_member_is_refused_before_it_is_extracted(tmp_path):
    bundle = _bundle(tmp_path / "b.tar.gz", b"", size=80 * 2**20)
    assert bundle.stat().st_size < 2**20  # small on disk, 80 MiB unpacked
    r = _create(bundle, tmp_path)
    assert r.returncode == 2, r.stderr
    assert "member envbuild-bundle.json is 83886080 bytes, over the" in r.stderr and "Traceback" not in r.stderr
    extracted = [p for p in (tmp_path / "cache").rglob("envbuild-bundle.json")] if (tmp_path / "cache").exists() else []
    assert extracted == []


def test_a_manifest_of_the_wrong_shape_is_one_line(tmp_path):
    for i, manifest in enumerate((b"[1, 2]", json.dumps({"format": 2, "members": ["a"]}).encode(),
                                  json.dumps({"format": 2, "members": {"a": {"sha256": 5}}}).encode())):
        r = _create(_bundle(tmp_path / f"b{i}.tar.gz", manifest), tmp_path)
        assert r.returncode == 2, r.stderr
        lines = [ln for ln in r.stderr.splitlines() if ln.startswith("envbuild: error:")]
        assert len(lines) == 1 and "envbuild-bundle.json" in lines[0] and "Traceback" not in r.stderr, r.stderr
