"""Downloads of the files envbuild itself fetches (conda archives, wheels for a bundle): parallel, retried,
resumed, and hashed while they stream, so each byte is read once.

Why not urllib in a loop: a slime lock is ~130 wheels and ~200 conda archives, several of them over 1 GB;
one at a time with no retry, a dropped connection at 90 % of torch meant starting over. Here a
`<dest>.part` file keeps what arrived; a retry asks for the rest (`Range: bytes=N-`) and feeds the part
already on disk through the hash first. A file already at `dest` with a good hash is not fetched again.
`file://` URLs are copied the same way (and hashed: py-rattler does not check file:// archives).
Where uv does the fetching (the pip layer's install), uv does it.

Progress: the caller's envbuild.progress.Phase, when it passes one, counts the files and the bytes (a rich
bar in a terminal, `still running` lines with bytes and rate in a log); downloads print nothing themselves.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple, TypeVar

from envbuild.errors import EnvbuildError
from envbuild.fsutil import naming
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

    def __init__(self, item: Download, got: str, got_md5: str = ""):
        self.item, self.got, self.got_md5 = item, got, got_md5
        algo, shown, want = ("sha256", got, " or ".join(item.sha256)) if item.sha256 else ("md5", got_md5, item.md5)
        super().__init__(f"{item.dest.name}: {algo} {shown} is not the locked hash (expected {want}); "
                         f"downloaded from {_redact(item.url)} and discarded")


class DownloadFailed(EnvbuildError):
    """The file could not be fetched (unreachable, missing, an HTTP error after the retries); `reason` says why."""

    def __init__(self, message: str, reason: str):
        self.reason = reason
        super().__init__(message)


def _redact(url: str) -> str:
    from envbuild.redact import url_without_credentials

    return url_without_credentials(url)


class _Digests:
    """sha256 of what arrives, and md5 only where the lock has no sha256 (hashing costs as much as copying)."""

    def __init__(self, item: Download) -> None:
        self.sha = hashlib.sha256()
        self.md5 = hashlib.md5() if not item.sha256 and item.md5 else None

    def update(self, chunk: bytes) -> None:
        self.sha.update(chunk)
        if self.md5 is not None:
            self.md5.update(chunk)

    def good(self, item: Download) -> bool:
        if item.sha256:
            return self.sha.hexdigest() in item.sha256
        return self.md5 is None or self.md5.hexdigest() == item.md5


def _digests(item: Download, path: Path) -> _Digests:
    dig = _Digests(item)
    if path.is_file():
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(CHUNK), b""):
                dig.update(chunk)
    return dig


def _open(url: str, offset: int):
    req = urllib.request.Request(url, headers={"User-Agent": "envbuild"})
    if offset:
        req.add_header("Range", f"bytes={offset}-")
    return urllib.request.urlopen(req, timeout=TIMEOUT_S)


def fetch_one(item: Download, progress: Optional[Callable[[int], None]] = None) -> Path:
    """Fetch `item` to its dest (see the module docstring); returns dest. Raises DownloadHashMismatch or
    EnvbuildError (unreachable, HTTP error after RETRIES attempts) naming the file. `progress` is told the
    size of each chunk as it arrives."""
    dest = Path(item.dest)
    if dest.is_file():
        if _digests(item, dest).good(item):
            return dest
        dest.unlink()
    part = dest.with_name(dest.name + ".part")
    download_to(item, part, progress, resume=True)
    os.replace(part, dest)
    return dest


class _LocalWriteFailed(Exception):
    """Carries the OSError of writing a download's part file (a full disk, a quota) past the retry loop, which
    retries only what the network did."""

    def __init__(self, error: OSError):
        super().__init__(str(error))
        self.error = error


@contextlib.contextmanager
def _local(part: Path) -> Iterator[None]:
    try:
        with naming(part):
            yield
    except OSError as exc:
        raise _LocalWriteFailed(exc) from None


def download_to(item: Download, part: Path, progress: Optional[Callable[[int], None]] = None,
                resume: bool = False) -> None:
    """Stream `item.url` into `part`, retried (with `resume`, a rerun also continues a `part` already there),
    hashed while it streams; `item.dest` is not touched (the caller publishes `part`, e.g. into a shared
    cache under its lock). A hash mismatch removes `part` and raises DownloadHashMismatch."""
    dest = Path(item.dest)
    part.parent.mkdir(parents=True, exist_ok=True)
    if not resume:
        part.unlink(missing_ok=True)
    last: Optional[BaseException] = None
    ok = False
    for attempt in range(RETRIES):
        dig = _digests(item, part)  # resume: what is on disk goes through the hash first
        offset = part.stat().st_size if part.is_file() else 0
        try:
            with _open(item.url, offset) as resp:
                if offset and getattr(resp, "status", 200) != 206:  # the server ignored Range: start over
                    dig, offset = _Digests(item), 0
                length = resp.headers.get("Content-Length")
                total = offset
                with _local(part), open(part, "ab" if offset else "wb") as out:
                    for chunk in iter(lambda: resp.read(CHUNK), b""):
                        with _local(part):
                            out.write(chunk)
                        dig.update(chunk)
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
        except _LocalWriteFailed as exc:  # this machine's disk, not the network: asking again will not help
            raise exc.error from None
        except (urllib.error.URLError, OSError) as exc:
            last = exc
            if item.url.startswith("file:"):
                break
        if attempt + 1 < RETRIES:
            time.sleep(min(8.0, 0.5 * 2 ** attempt))
    if not ok:
        reason = str(f"HTTP {last.code} {last.reason}" if isinstance(last, urllib.error.HTTPError) else (
            getattr(last, "reason", None) or last))
        raise DownloadFailed(f"{dest.name}: cannot download {_redact(item.url)}: {reason} "
                             f"(after {attempt + 1} attempt(s); a rerun resumes from {part.name})"
                             if resume and part.is_file() else f"{dest.name}: cannot download {_redact(item.url)}: {reason}",
                             reason)
    if not dig.good(item):
        part.unlink(missing_ok=True)
        raise DownloadHashMismatch(item, dig.sha.hexdigest(), dig.md5.hexdigest() if dig.md5 is not None else "")


T = TypeVar("T")


class Stopped(Exception):
    """A worker of in_parallel saw the stop flag (the main thread was interrupted): it gives up mid-file."""


def in_parallel(work: Callable[[Any, threading.Event], T], items: Sequence[Any], jobs: int = 8,
                done: Optional[Callable[[Any], None]] = None) -> List[T]:
    """`work(item, stop)` for every item, `jobs` at a time; results in the order given; `done(item)` after
    each success. The first failure is raised once the running ones finish; those not started yet are
    dropped (a rerun does them). On Ctrl-C `stop` is set, which a worker checks between chunks (raising
    Stopped), so an interrupt does not wait for a large file to finish."""
    if not items:
        return []
    results: List[Any] = [None] * len(items)
    errors: List[BaseException] = []
    stop = threading.Event()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(jobs, len(items))))
    try:
        futures = {pool.submit(work, it, stop): i for i, it in enumerate(items)}
        for fut in concurrent.futures.as_completed(futures):
            i = futures[fut]
            try:
                results[i] = fut.result()
            except concurrent.futures.CancelledError:
                continue
            except BaseException as exc:  # noqa: BLE001 - raised after the running ones finish
                if not errors:
                    for other in futures:
                        other.cancel()
                errors.append(exc)
                continue
            if done:
                done(items[i])
    except BaseException:
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    if errors:
        raise errors[0]
    return results


def stoppable(stop: threading.Event, progress: Optional[Callable[[int], None]] = None) -> Callable[[int], None]:
    """A chunk callback for fetch_one/download_to that raises Stopped once `stop` is set (and else tells
    `progress` the chunk's size)."""
    def on_chunk(n: int) -> None:
        if stop.is_set():
            raise Stopped("interrupted")
        if progress:
            progress(n)
    return on_chunk


def fetch_all(items: Sequence[Download], jobs: int = 8, phase: Any = None) -> List[Path]:
    """Fetch every item, `jobs` at a time (in_parallel's rules; the .part files of failed ones stay for a
    resume). `phase` (an envbuild.progress.Phase) counts files and bytes. Returns the dest paths in order."""
    bytes_cb = phase.add_bytes if phase is not None else None
    return in_parallel(lambda it, stop: fetch_one(it, stoppable(stop, bytes_cb)), items, jobs,
                       done=(lambda _it: phase.advance()) if phase is not None else None)


def copy_verified(src: Path, dest: Path, sha256: Sequence[str]) -> Path:
    """Copy a local file to dest only if its hash is one of `sha256` (hashed while copied)."""
    return fetch_one(Download(url=Path(src).resolve().as_uri(), dest=Path(dest), sha256=tuple(sha256)))


__all__ = ["Download", "DownloadHashMismatch", "DownloadFailed", "fetch_one", "download_to", "fetch_all", "in_parallel", "stoppable", "Stopped",
           "copy_verified"]
