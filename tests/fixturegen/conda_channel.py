"""Build a small, real, indexed conda channel for tests: .tar.bz2 and .conda archives with info/index.json,
info/paths.json, info/files and info/has_prefix, then `rattler.index.index_fs` writes repodata.json.

The packages are tiny but exercise what a real CUDA channel does to an installer: a `__cuda` constraint that
only solves with the recipe's virtual packages, text and binary prefix placeholders that must be rewritten,
a noarch package, both archive formats, an optional cuda-compat package, and a `python` whose bin/python is a
symlink to the interpreter running the tests (so doctor payloads can run inside the created prefix).

Archives are byte-reproducible (fixed mtimes and timestamps), so two builds of the channel hash the same.
"""
from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import sys
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

PLACEHOLDER = "/opt/anaconda1anaconda2anaconda3"
# Binary files carry conda-build's long host placeholder, so a long target prefix still fits when padded.
LONG_PLACEHOLDER = "/home/build/_h_env_" + "placehold_" * 23 + "pl"
_TIMESTAMP_MS = 1767225600000  # 2026-01-01, fixed so archives and repodata are reproducible


@dataclass
class Pkg:
    name: str
    version: str
    build: str
    subdir: str = "linux-64"
    depends: List[str] = field(default_factory=list)
    constrains: List[str] = field(default_factory=list)
    files: Dict[str, bytes] = field(default_factory=dict)  # relative path -> content
    text_prefix: Sequence[str] = ()  # files whose placeholder is rewritten in text mode
    binary_prefix: Sequence[str] = ()  # files rewritten in binary mode (null-padded)
    symlinks: Dict[str, str] = field(default_factory=dict)  # relative path -> link target
    fmt: str = "tar.bz2"  # or "conda"
    noarch: Optional[str] = None

    @property
    def filename(self) -> str:
        return f"{self.name}-{self.version}-{self.build}.{self.fmt}"


def _tar_bytes(entries: List[Tuple[str, bytes, int]], symlinks: Dict[str, str], mode: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode, format=tarfile.GNU_FORMAT) as tf:
        for arc, data, perm in sorted(entries):
            ti = tarfile.TarInfo(arc)
            ti.size, ti.mode, ti.mtime, ti.uid, ti.gid, ti.uname, ti.gname = len(data), perm, 0, 0, 0, "", ""
            tf.addfile(ti, io.BytesIO(data))
        for arc, target in sorted(symlinks.items()):
            ti = tarfile.TarInfo(arc)
            ti.type, ti.linkname, ti.mtime, ti.mode = tarfile.SYMTYPE, target, 0, 0o777
            tf.addfile(ti)
    return buf.getvalue()


def _info_files(p: Pkg) -> Dict[str, bytes]:
    index = {"name": p.name, "version": p.version, "build": p.build, "build_number": 0, "depends": p.depends,
             "constrains": p.constrains, "license": "MIT", "subdir": p.subdir, "timestamp": _TIMESTAMP_MS}
    if p.noarch:
        index["noarch"] = p.noarch
    else:
        index["arch"], index["platform"] = "x86_64", "linux"
    paths = []
    for rel, data in sorted(p.files.items()):
        entry = {"_path": rel, "path_type": "hardlink", "sha256": hashlib.sha256(data).hexdigest(),
                 "size_in_bytes": len(data)}
        if rel in p.text_prefix or rel in p.binary_prefix:
            entry["file_mode"] = "text" if rel in p.text_prefix else "binary"
            entry["prefix_placeholder"] = PLACEHOLDER if rel in p.text_prefix else LONG_PLACEHOLDER
        paths.append(entry)
    for rel in sorted(p.symlinks):
        paths.append({"_path": rel, "path_type": "softlink"})
    out = {
        "info/index.json": json.dumps(index, indent=2, sort_keys=True).encode(),
        "info/paths.json": json.dumps({"paths": paths, "paths_version": 1}, indent=2).encode(),
        "info/files": ("\n".join(sorted(list(p.files) + list(p.symlinks))) + "\n").encode(),
    }
    prefixed = [(rel, "text", PLACEHOLDER) for rel in p.text_prefix]
    prefixed += [(rel, "binary", LONG_PLACEHOLDER) for rel in p.binary_prefix]
    if prefixed:
        out["info/has_prefix"] = "".join(f"{ph} {mode} {rel}\n" for rel, mode, ph in sorted(prefixed)).encode()
    return out


def build_package(p: Pkg, channel: Path) -> Path:
    """Write one archive into channel/<subdir>/ and return its path."""
    import zstandard

    out = channel / p.subdir / p.filename
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = [(rel, data, 0o755 if rel.startswith("bin/") else 0o644) for rel, data in p.files.items()]
    info = [(rel, data, 0o644) for rel, data in _info_files(p).items()]
    if p.fmt == "tar.bz2":
        out.write_bytes(_tar_bytes(payload + info, p.symlinks, "w:bz2"))
    elif p.fmt == "conda":
        stem = p.filename[: -len(".conda")]
        zc = zstandard.ZstdCompressor(level=3)
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as zf:
            for arc, data in (("metadata.json", json.dumps({"conda_pkg_format_version": 2}).encode()),
                              (f"info-{stem}.tar.zst", zc.compress(_tar_bytes(info, {}, "w"))),
                              (f"pkg-{stem}.tar.zst", zc.compress(_tar_bytes(payload, p.symlinks, "w")))):
                zi = zipfile.ZipInfo(arc, date_time=(2026, 1, 1, 0, 0, 0))
                zf.writestr(zi, data)
    else:
        raise ValueError(p.fmt)
    return out


def index_channel(channel: Path) -> None:
    """Write <subdir>/repodata.json for every subdir (noarch always present) with py-rattler's indexer."""
    from rattler.index import index_fs

    (channel / "noarch").mkdir(parents=True, exist_ok=True)
    asyncio.run(index_fs(channel, write_zst=False, write_shards=False, force=True))


def default_packages(python_exe: Optional[str] = None) -> List[Pkg]:
    """The fixture profile's packages. `python` links to the interpreter running the tests."""
    py = os.path.realpath(python_exe or sys.executable)
    bin_blob = b"\x7fELF-fixture\x00" + LONG_PLACEHOLDER.encode() + b"/lib/libfoo.so\x00tail\x00"
    return [
        Pkg("python", "3.11.7", "h0_fixture", depends=["__glibc >=2.17"], symlinks={"bin/python": py},
            files={"share/python-fixture/README": b"python links to the host interpreter\n"}),
        Pkg("libfoo", "1.0", "h0_0", files={"lib/libfoo.txt": b"libfoo 1.0\n"}),
        Pkg("libfoo", "1.1", "h0_0", files={"lib/libfoo.txt": b"libfoo 1.1\n"}, fmt="conda"),
        Pkg("cuda-version", "12.9", "h0_0", depends=["__cuda >=12"], constrains=["cuda-compat 12.9.*"],
            files={"share/cuda-version/12.9": b"12.9\n"}, fmt="conda"),
        Pkg("footool", "2.0", "cuda129_0", depends=["libfoo >=1.0,<1.1", "cuda-version 12.9.*", "__cuda >=12.9",
                                                     "__glibc >=2.17"],
            files={"bin/footool": f"#!/bin/sh\necho footool prefix={PLACEHOLDER}\n".encode(),
                   "lib/libfootool.so": bin_blob},
            text_prefix=("bin/footool",), binary_prefix=("lib/libfootool.so",)),
        Pkg("foodata", "0.1", "pyh_0", subdir="noarch", noarch="generic",
            files={"share/foodata/README": b"noarch data\n"}, fmt="conda"),
        Pkg("cuda-compat", "12.9.1", "h0_0", depends=["cuda-version 12.9.*"],
            files={"cuda-compat/libcuda.so.575.57.08": b"fake forward-compat driver\n"}),
    ]


def build_channel(channel: Path, packages: Optional[List[Pkg]] = None) -> Dict[str, Path]:
    """Build and index the channel; returns filename -> archive path."""
    channel = Path(channel)
    built = {p.filename: build_package(p, channel) for p in (packages or default_packages())}
    index_channel(channel)
    return built


if __name__ == "__main__":
    for name, path in build_channel(Path(sys.argv[1])).items():
        print(name, hashlib.sha256(path.read_bytes()).hexdigest()[:12])


FIXTURE_PROFILE = """schema = 1
[profile]
name = "{name}"
description = "fixture profile for envbuild's lock/create tests"
image = "none"
framework = "none"
cuda = "12.9"
cuda_major = 12
python = "3.11"

[components]

[recipe]
platforms = ["linux-64"]
virtual_packages = ["__cuda=12.9", "__glibc=2.35"]

[recipe.conda]
channels = ["{channel}"]
specs = ["python 3.11.*", "footool 2.*", "foodata"]
optional = {{ compat = ["cuda-compat 12.9.*"] }}

[recipe.activation]
env = {{ FOO_HOME = "$CONDA_PREFIX/share/foodata", FIXTURE_MARK = "{mark}" }}
"""


def write_fixture_profile(base: Path, channel: Path, name: str = "fx", mark: str = "a") -> Path:
    """lockfiles-style folder base/<name>/profile.toml whose recipe uses the fixture channel."""
    folder = Path(base) / name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "profile.toml"
    path.write_text(FIXTURE_PROFILE.format(name=name, channel=Path(channel).as_uri(), mark=mark), encoding="utf-8")
    return path
