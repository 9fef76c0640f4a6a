"""Hex digests of files and streams, read in 1 MiB chunks.

Why one helper: locks, installs and bundles all verify archives and wheels by digest (conda archives by
sha256 or md5, wheels and bundle members by sha256); one reader keeps memory flat on multi-GB wheels and
gives every layer the same answer for the same bytes.
"""
from __future__ import annotations

import hashlib
import os
from typing import BinaryIO, Union

CHUNK = 1 << 20


def stream_digest(stream: BinaryIO, algo: str = "sha256") -> str:
    """Hex digest of everything left to read in a binary stream (a file, an HTTP response)."""
    h = hashlib.new(algo)
    for chunk in iter(lambda: stream.read(CHUNK), b""):
        h.update(chunk)
    return h.hexdigest()


def file_digest(path: Union[str, os.PathLike], algo: str = "sha256") -> str:
    """Hex digest of a file's bytes with the hashlib algorithm `algo` ("sha256", "md5", ...)."""
    with open(path, "rb") as fh:
        return stream_digest(fh, algo)


def sha256_file(path: Union[str, os.PathLike]) -> str:
    """Hex sha256 of a file's bytes."""
    return file_digest(path, "sha256")
