"""Shared by the backends that shell out to a conda binary (micromamba, conda): an @EXPLICIT install.

The binary installs the same verified archives, named by file:// URL and md5 in an @EXPLICIT file, offline,
into the staging prefix. Its prefix placeholders then name the staging path, which
envbuild.install.conda_layer.relocate rewrites to the target (text files, and null-padded binary strings:
the staging path is always longer than the target path, so binary rewrites fit).
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Optional, Sequence

from envbuild.errors import EnvbuildError
from envbuild.hashing import file_digest
from envbuild.install.backends import BaseRequest


def missing(exe: str) -> Optional[str]:
    """health_check() of a binary backend: None when `exe` is on PATH."""
    if shutil.which(exe) is None:
        return f"no `{exe}` executable on PATH; install it or use the default embedded backend (--backend rattler)"
    return None


def install(exe: str, flags: Sequence[str], request: BaseRequest) -> None:
    """`exe create --yes --prefix STAGING --file EXPLICIT *flags`, then relocate staging -> target."""
    from envbuild.install.conda_layer import relocate

    path = shutil.which(exe)
    if path is None:
        raise EnvbuildError(f"--backend {exe}: {missing(exe)}")
    staging = request.staging
    explicit = staging.parent / f".{staging.name}.explicit.txt"
    lines = ["@EXPLICIT"] + [Path(p).as_uri() + "#" + file_digest(Path(p), "md5") for p in request.archives]
    explicit.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cmd = [path, "create", "--yes", "--prefix", str(staging), "--file", str(explicit), *flags]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    finally:
        explicit.unlink(missing_ok=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise EnvbuildError(f"{exe} create failed (exit {proc.returncode}):\n{tail}")
    relocate(staging, staging, request.target)
