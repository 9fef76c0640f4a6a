"""Downloads of the files envbuild itself fetches (conda archives, wheels for a bundle): parallel, retried,
resumed, and hashed while they stream, so each byte is read once.

Why not urllib in a loop: a slime lock is ~130 wheels and ~200 conda archives, several of them over 1 GB;
one at a time with no retry, a dropped connection at 90 % of torch meant starting over. Here a
`<dest>.part` file keeps what arrived; a retry asks for the rest (`Range: bytes=N-`) and feeds the part
already on disk through the hash first. A file already at `dest` with a good hash is not fetched again.
`file://` URLs are copied the same way (and hashed: py-rattler does not check file:// archives).
Where uv does the fetching (the pip layer's install), uv does it.

Progress: one line per finished file when stderr is not a terminal (CI logs), a rich bar when it is.
"""
from __future__ import annotations

import concurrent.futures
import hashlib
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

from envbuild.errors import EnvbuildError
from envbuild.hashing import CHUNK

RETRIES = 4
TIMEOUT_S = 60


@dataclass(frozen=True)
class Download:
    url: str
    dest: Path
    sha256: Tuple[str, ...] = ()  # accepted digests; empty = not checked (md5 below may be)
    md5: str = ""


class DownloadHashMismatch(EnvbuildError):
    """The bytes that arrived are not the locked ones."""

    def __init__(self, item: Download, got: str):
        self.item, self.got = item, got
        want = " or ".join(item.sha256) or item.md5
        super().__init__(f"{item.dest.name}: sha256 {got} is not the locked hash (expected {want}); "
                         f"downloaded from {_redact(item.url)} and discarded")


def _redact(url: str) -> str:
    from envbuild.redact import url_without_credentials

    return url_without_credentials(url)


def _digests(path: Path) -> Tuple["hashlib._Hash", "hashlib._Hash"]:
    sha, md5 = hashlib.sha256(), hashlib.md5()
    if path.is_file():
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(CHUNK), b""):
                sha.update(chunk)
                md5.update(chunk)
    return sha, md5


def _good(item: Download, sha: str, md5: str) -> bool:
    if item.sha256:
        return sha in item.sha256
    return not item.md5 or md5 == item.md5


def _open(url: str, offset: int):
    req = urllib.request.Request(url, headers={"User-Agent": "envbuild"})
    if offset:
        req.add_header("Range", f"bytes={offset}-")
    return urllib.request.urlopen(req, timeout=TIMEOUT_S)


def fetch_one(item: Download, progress: Optional[Callable[[int], None]] = None) -> Path:
    """Fetch `item` to its dest (see the module docstring); returns dest. Raises DownloadHashMismatch or
    EnvbuildError (unreachable, HTTP error after RETRIES attempts) naming the file."""
    dest = Path(item.dest)
    if dest.is_file():
        sha, md5 = _digests(dest)
        if _good(item, sha.hexdigest(), md5.hexdigest()):
            return dest
        dest.unlink()
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    last: Optional[BaseException] = None
    ok = False
    for attempt in range(RETRIES):
        sha, md5 = _digests(part)  # resume: what is on disk goes through the hash first
        offset = part.stat().st_size if part.is_file() else 0
        try:
            with _open(item.url, offset) as resp:
                if offset and getattr(resp, "status", 200) != 206:  # the server ignored Range: start over
                    sha, md5, offset = hashlib.sha256(), hashlib.md5(), 0
                length = resp.headers.get("Content-Length")
                total = offset
                with open(part, "ab" if offset else "wb") as out:
                    for chunk in iter(lambda: resp.read(CHUNK), b""):
                        out.write(chunk)
                        sha.update(chunk)
                        md5.update(chunk)
                        total += len(chunk)
                        if progress:
                            progress(len(chunk))
                if length is not None and total < offset + int(length):  # the connection dropped: resume
                    raise ConnectionError(f"connection closed after {total} of {offset + int(length)} bytes")
            ok = True
            break
        except urllib.error.HTTPError as exc:
            last = exc
            if exc.code == 416:  # asked past the end: start over
                part.unlink(missing_ok=True)
            elif exc.code < 500 and exc.code != 429:
                break  # 404, 403: asking again will not help
        except (urllib.error.URLError, OSError) as exc:
            last = exc
            if item.url.startswith("file:"):
                break
        if attempt + 1 < RETRIES:
            time.sleep(min(8.0, 0.5 * 2 ** attempt))
    if not ok:
        reason = f"HTTP {last.code} {last.reason}" if isinstance(last, urllib.error.HTTPError) else (
            getattr(last, "reason", None) or last)
        raise EnvbuildError(f"{dest.name}: cannot download {_redact(item.url)}: {reason} "
                            f"(after {attempt + 1} attempt(s); a rerun resumes from {part.name})"
                            if part.is_file() else f"{dest.name}: cannot download {_redact(item.url)}: {reason}")
    got_sha, got_md5 = sha.hexdigest(), md5.hexdigest()
    if not _good(item, got_sha, got_md5):
        part.unlink(missing_ok=True)
        raise DownloadHashMismatch(item, got_sha)
    os.replace(part, dest)
    return dest


def fetch_all(items: Sequence[Download], jobs: int = 8, label: str = "download") -> List[Path]:
    """Fetch every item, `jobs` at a time; the first failure is raised after the others finish (their
    .part files stay for a resume). Returns the dest paths in the order given."""
    if not items:
        return []
    tty = sys.stderr.isatty()
    bar = _RichBar(label, len(items)) if tty else None
    results: List[Optional[Path]] = [None] * len(items)
    errors: List[BaseException] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(jobs, len(items)))) as pool:
        futures = {pool.submit(fetch_one, it, bar.advance_bytes if bar else None): i for i, it in enumerate(items)}
        for fut in concurrent.futures.as_completed(futures):
            i = futures[fut]
            try:
                results[i] = fut.result()
            except BaseException as exc:  # noqa: BLE001 - reported after the others finish
                errors.append(exc)
                continue
            if bar:
                bar.done_one()
            elif len(items) > 1:
                print(f"{label}: {items[i].dest.name} ok", file=sys.stderr, flush=True)
    if bar:
        bar.close()
    if errors:
        raise errors[0]
    return [r for r in results if r is not None]


class _RichBar:
    def __init__(self, label: str, total: int) -> None:
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                                 TransferSpeedColumn(), TextColumn("{task.fields[files]}"), transient=True)
        self.total = total
        self.done = 0
        self.task = self.progress.add_task(label, total=None, files=f"0/{total} files")
        self.progress.start()

    def advance_bytes(self, n: int) -> None:
        self.progress.advance(self.task, n)

    def done_one(self) -> None:
        self.done += 1
        self.progress.update(self.task, files=f"{self.done}/{self.total} files")

    def close(self) -> None:
        self.progress.stop()


def copy_verified(src: Path, dest: Path, sha256: Sequence[str]) -> Path:
    """Copy a local file to dest only if its hash is one of `sha256` (hashed while copied)."""
    return fetch_one(Download(url=Path(src).resolve().as_uri(), dest=Path(dest), sha256=tuple(sha256)))


__all__ = ["Download", "DownloadHashMismatch", "fetch_one", "fetch_all", "copy_verified"]
