"""Small, real wheels and PEP 503 indexes for the pip-layer tests, built by the tests themselves.

Wheels are written directly as zip files with METADATA, WHEEL and a RECORD of sha256 digests, the same
bytes `pip wheel` would give a one-module package, so pip installs, hashes and uninstalls them like any
wheel. Fixed zip timestamps make them byte-reproducible. `write_simple_index` lays out a PEP 503 tree
(with `#sha256=` fragments and PEP 658 `.metadata` files, as PyPI serves) and `serve` puts a folder on
127.0.0.1 with http.server so pip and uv really talk HTTP to a loopback index. Each project page is also
written as PEP 691 JSON with PEP 700 `upload-time`s (`upload_time`, default 2026-01-01), which `serve`
answers when the client asks for JSON, as PyPI does: uv's `--exclude-newer` needs upload times.
"""
from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import html
import io
import json
import threading
import zipfile
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence

_ZIP_DATE = (2026, 1, 1, 0, 0, 0)


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def make_wheel(
    dest: Path,
    name: str,
    version: str,
    requires: Sequence[str] = (),
    tag: str = "py3-none-any",
    requires_python: Optional[str] = None,
    module_text: Optional[str] = None,
    console_scripts: Sequence[str] = (),
) -> Path:
    """Write `<name>-<version>-<tag>.whl` into `dest` holding module `<name>` with `__version__`;
    `console_scripts` ("tool = module:function") go into its entry_points.txt."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    if requires_python:
        meta.append(f"Requires-Python: {requires_python}")
    meta += [f"Requires-Dist: {r}" for r in requires]
    files: Dict[str, bytes] = {
        f"{dist}/__init__.py": (module_text or f'__version__ = "{version}"\n').encode(),
        f"{info}/METADATA": ("\n".join(meta) + "\n\n").encode(),
        f"{info}/WHEEL": (f"Wheel-Version: 1.0\nGenerator: envbuild-tests\nRoot-Is-Purelib: true\nTag: {tag}\n").encode(),
        f"{info}/top_level.txt": f"{dist}\n".encode(),
    }
    if console_scripts:
        files[f"{info}/entry_points.txt"] = ("[console_scripts]\n" + "".join(f"{c}\n" for c in console_scripts)).encode()
    record = [f"{path},{_record_hash(data)},{len(data)}" for path, data in files.items()]
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    out = dest / f"{dist}-{version}-{tag}.whl"
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for path, data in files.items():
            zf.writestr(zipfile.ZipInfo(path, date_time=_ZIP_DATE), data)
    return out


def wheel_metadata(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return zf.read(name)


UPLOAD_TIME = "2026-01-01T00:00:00Z"


def write_simple_index(root: Path, wheels: Sequence[Path], with_hashes: bool = True,
                       upload_times: Optional[Dict[str, str]] = None) -> Path:
    """A PEP 503 tree under `root` (root/<project>/index.html + index.json + the files); returns root.

    `upload_times` maps a wheel's file name to its PEP 700 upload-time (default UPLOAD_TIME).
    """
    root = Path(root)
    by_project: Dict[str, List[Path]] = {}
    for w in wheels:
        project = w.name.split("-")[0].replace("_", "-").lower()
        by_project.setdefault(project, []).append(Path(w))
    links = []
    for project, files in sorted(by_project.items()):
        pdir = root / project
        pdir.mkdir(parents=True, exist_ok=True)
        rows = []
        entries = []
        for w in sorted(files):
            data = w.read_bytes()
            (pdir / w.name).write_bytes(data)
            meta = wheel_metadata(w)
            (pdir / (w.name + ".metadata")).write_bytes(meta)
            frag = f"#sha256={hashlib.sha256(data).hexdigest()}" if with_hashes else ""
            meta_attr = f' data-core-metadata="sha256={hashlib.sha256(meta).hexdigest()}"'
            rows.append(f'<a href="{html.escape(w.name + frag)}"{meta_attr}>{html.escape(w.name)}</a><br/>')
            entries.append({"filename": w.name, "url": w.name, "size": len(data),
                            "hashes": {"sha256": hashlib.sha256(data).hexdigest()} if with_hashes else {},
                            "core-metadata": {"sha256": hashlib.sha256(meta).hexdigest()},
                            "upload-time": (upload_times or {}).get(w.name, UPLOAD_TIME)})
        page = {"meta": {"api-version": "1.1"}, "name": project, "files": entries,
                "versions": sorted({e["filename"].split("-")[1] for e in entries})}
        (pdir / "index.json").write_text(json.dumps(page, indent=1) + "\n")
        (pdir / "index.html").write_text("<html><body>\n" + "\n".join(rows) + "\n</body></html>\n")
        links.append(f'<a href="{project}/">{project}</a><br/>')
    root.mkdir(parents=True, exist_ok=True)
    (root / "index.html").write_text("<html><body>\n" + "\n".join(links) + "\n</body></html>\n")
    return root


class _QuietHandler(SimpleHTTPRequestHandler):
    """http.server that answers a PEP 691 JSON request for a folder with its index.json, and tells clients
    not to reuse a page without asking (loopback ports are reused by later servers with other packages)."""

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-cache")
        super().end_headers()

    def send_head(self):  # type: ignore[override]
        wants_json = "application/vnd.pypi.simple.v1+json" in self.headers.get("Accept", "")
        folder = Path(self.translate_path(self.path))
        if wants_json and self.path.endswith("/") and (folder / "index.json").is_file():
            data = (folder / "index.json").read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            return io.BytesIO(data)
        return super().send_head()

    def log_message(self, format: str, *args: object) -> None:
        return


@contextlib.contextmanager
def serve(directory: Path, hold: Optional[threading.Event] = None) -> Iterator[str]:
    """Serve `directory` over http on 127.0.0.1; yields the base URL (ending in /). With `hold`, every
    request waits until the event is set (a test sees what a client prints while it waits on the index)."""
    cls = _QuietHandler
    if hold is not None:
        class _Held(_QuietHandler):
            def send_head(self):  # type: ignore[override]
                hold.wait(60)
                return super().send_head()

        cls = _Held
    handler = functools.partial(cls, directory=str(directory))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        if hold is not None:
            hold.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def tamper(wheel: Path) -> None:
    """Change a wheel's bytes in place (a valid zip still, with a different sha256)."""
    with zipfile.ZipFile(wheel, "a") as zf:
        zf.writestr(zipfile.ZipInfo("tampered.txt", date_time=_ZIP_DATE), b"not what was locked\n")


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released): an index or mirror that refuses connections."""
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
