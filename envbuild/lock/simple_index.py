"""A loopback PEP 503 index that enforces index priority for pip, which has no per-package index option.

Why: pip merges the candidates of every --index-url/--extra-index-url and takes the highest version, so a
package that must come from the CUDA index (torch +cu129, the cu129 kernels) can silently be taken from
PyPI instead (research/envbuilders.md §5: the cu129-before-PyPI lesson, sglang PR #23593). uv solves it
with "explicit" indexes; with pip we put this proxy in front: pip sees ONE index, and for each project the
proxy serves the page of exactly one upstream index:

- a project named in an index's `packages` comes only from that index (404 there = not found, no fallback);
- any other project comes from the first fallback index (empty `packages`) that knows it.

Pages are re-rendered with absolute file URLs, so pip downloads files (and PEP 658 metadata) straight from
the upstream; the proxy only answers /<project>/ page requests. Every file it served is remembered
(`files_of`) so the lock can list the hashes of all compatible files of a pinned version.
"""
from __future__ import annotations

import html
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from html.parser import HTMLParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from packaging.utils import canonicalize_name

_PAGE_ATTRS = ("data-requires-python", "data-yanked", "data-dist-info-metadata", "data-core-metadata")


@dataclass(frozen=True)
class IndexFile:
    """One distribution file listed on a project page."""

    filename: str
    url: str  # absolute, without the #hash fragment
    hashes: Dict[str, str]  # from the #sha256=... fragment, when the index gives one
    index: str  # name of the index that served it
    attrs: Tuple[Tuple[str, str], ...] = ()

    @property
    def sha256(self) -> Optional[str]:
        return self.hashes.get("sha256")


class _LinkParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: List[Tuple[Dict[str, Optional[str]], str]] = []
        self._current: Optional[Dict[str, Optional[str]]] = None
        self._text: List[str] = []

    def handle_starttag(self, tag: str, attrs: List[Tuple[str, Optional[str]]]) -> None:
        if tag == "a":
            self._current = dict(attrs)
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._current is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._current is not None:
            self.links.append((self._current, "".join(self._text).strip()))
            self._current = None


def parse_project_page(page: str, page_url: str, index_name: str) -> List[IndexFile]:
    """Files of a PEP 503 project page, with hrefs made absolute against `page_url`."""
    parser = _LinkParser()
    parser.feed(page)
    files: List[IndexFile] = []
    for attrs, text in parser.links:
        href = attrs.get("href")
        if not href:
            continue
        absolute = urllib.parse.urljoin(page_url, href)
        url, _, fragment = absolute.partition("#")
        hashes: Dict[str, str] = {}
        if "=" in fragment:
            algo, _, digest = fragment.partition("=")
            hashes[algo.lower()] = digest.lower()
        filename = urllib.parse.unquote(url.rstrip("/").rsplit("/", 1)[-1]) or text
        kept = tuple((k, v if v is not None else "") for k, v in sorted(attrs.items()) if k in _PAGE_ATTRS)
        files.append(IndexFile(filename=filename, url=url, hashes=hashes, index=index_name, attrs=kept))
    return files


def render_project_page(project: str, files: Sequence[IndexFile]) -> str:
    """A PEP 503 page pointing at absolute upstream URLs (keeps requires-python, yanked, metadata attrs)."""
    rows = []
    for f in files:
        href = f.url + (f"#sha256={f.sha256}" if f.sha256 else "")
        extra = "".join(f' {k}="{html.escape(v)}"' for k, v in f.attrs)
        rows.append(f'<a href="{html.escape(href)}"{extra}>{html.escape(f.filename)}</a><br/>')
    return ("<!DOCTYPE html><html><head><title>Links for %s</title></head><body>\n%s\n</body></html>\n"
            % (html.escape(project), "\n".join(rows)))


@dataclass
class _Upstream:
    name: str
    url: str  # base of the simple index, ending in /
    packages: frozenset  # canonical names; empty = fallback


@dataclass
class PriorityIndex:
    """The routing table and the pages fetched so far (shared with the HTTP handler threads)."""

    upstreams: List[_Upstream]
    pages: Dict[str, List[IndexFile]] = field(default_factory=dict)
    errors: List[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def from_indexes(cls, indexes: Sequence[object]) -> "PriorityIndex":
        """Build from recipe PipIndex objects (name, url, packages), in priority order."""
        ups = []
        for idx in indexes:
            url = getattr(idx, "url")
            ups.append(_Upstream(name=getattr(idx, "name"), url=url if url.endswith("/") else url + "/",
                                 packages=frozenset(canonicalize_name(p) for p in getattr(idx, "packages", []) or [])))
        return cls(upstreams=ups)

    def route(self, project: str) -> List[_Upstream]:
        """The upstream indexes allowed to serve `project`, in the order to try them."""
        named = [u for u in self.upstreams if project in u.packages]
        if named:
            return named[:1]
        return [u for u in self.upstreams if not u.packages]

    def owner(self, project: str) -> Optional[str]:
        named = [u.name for u in self.upstreams if project in u.packages]
        return named[0] if named else None

    def fetch(self, project: str) -> Optional[List[IndexFile]]:
        with self.lock:
            if project in self.pages:
                return self.pages[project]
        for up in self.route(project):
            page_url = urllib.parse.urljoin(up.url, project + "/")
            text = _read_page(page_url)
            if text is None:
                continue
            files = parse_project_page(text, page_url, up.name)
            with self.lock:
                self.pages[project] = files
            return files
        return None

    def files_of(self, project: str) -> List[IndexFile]:
        return list(self.pages.get(canonicalize_name(project), []))


def _read_page(page_url: str) -> Optional[str]:
    """GET a project page (http(s) or file://); None when the index does not know the project."""
    if page_url.startswith("file://"):
        path = Path(urllib.request.url2pathname(urllib.parse.urlparse(page_url).path))
        target = path / "index.html" if path.is_dir() else path
        return target.read_text(encoding="utf-8") if target.is_file() else None
    req = urllib.request.Request(page_url, headers={"Accept": "text/html", "User-Agent": "envbuild-lock"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.read().decode(resp.headers.get_content_charset() or "utf-8")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


class _Handler(BaseHTTPRequestHandler):
    table: PriorityIndex  # set on the subclass made per server

    def do_GET(self) -> None:  # noqa: N802 (http.server naming)
        parts = [p for p in urllib.parse.urlparse(self.path).path.split("/") if p]
        if len(parts) != 2 or parts[0] != "simple":
            self.send_error(404)
            return
        project = canonicalize_name(parts[1])
        try:
            files = self.table.fetch(project)
        except Exception as exc:  # an upstream failure is reported to the caller, not swallowed
            with self.table.lock:
                self.table.errors.append(f"{project}: {exc}")
            self.send_error(502, str(exc)[:200])
            return
        if files is None:
            self.send_error(404)
            return
        body = render_project_page(project, files).encode("utf-8")
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # silence per-request logging
        return


class PriorityIndexServer:
    """Context manager: serve a PriorityIndex on 127.0.0.1 (an ephemeral port) while pip resolves."""

    def __init__(self, table: PriorityIndex):
        self.table = table
        handler = type("Handler", (_Handler,), {"table": table})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/simple/"

    def __enter__(self) -> "PriorityIndexServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
