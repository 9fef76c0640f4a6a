"""FactSource: the one door through which checks read a node.

Three kinds share one interface:
- LiveSource reads the running node (files under a root, default "/"; commands; NVML; the stack facts, through
  the stack reader it is handed).
- RecordingSource wraps a LiveSource and remembers every answer, so `envbuild capture --node` can save
  exactly what the doctor read, no more.
- BundleSource answers from a saved bundle, so `envbuild doctor --root DIR` gives the same verdicts on a
  laptop with no GPU.

Facts never mutate the node. A fact that cannot be known (permission, not captured, no driver) raises
FactUnavailable with a reason a person can act on; a file that does not exist raises FileNotFoundError,
because its absence is itself a fact (no /etc/ld.so.preload is the healthy case).
"""
from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Dict, List, Optional

from envbuild.children import CommandHung, run_bounded
from envbuild.facts.errors import FactHung, FactUnavailable  # noqa: F401  (re-exported: every reader of a source catches it)

BUNDLE_MARKER = ".envbuild/bundle.json"
BUNDLE_FORMAT = 1
_MAX_READ = 4 * 1024 * 1024  # node files the checks read are small; a cap keeps a runaway file from filling memory


def _norm(path: str) -> str:
    """Absolute POSIX path inside the node, e.g. 'proc/x' -> '/proc/x'."""
    p = str(PurePosixPath("/") / path)
    return p


# Commands a check may ask for, by name. Each is read-only and bounded in time. Checks ask by name so a
# bundle can hold their output; keep names stable (they are file names in bundles).
COMMANDS: Dict[str, List[str]] = {
    "journalctl-kernel": ["journalctl", "-k", "-b", "--no-pager", "-q", "-o", "short-monotonic"],
    "dmesg": ["dmesg", "--kernel", "--ctime"],
    "ldconfig-p": ["ldconfig", "-p"],
    "systemctl-fabricmanager": ["systemctl", "is-active", "nvidia-fabricmanager"],
    "nv-fabricmanager-version": ["nv-fabricmanager", "--version"],
    "lspci-nvidia-vvv": ["lspci", "-vvv", "-d", "10de:"],
    "nvidia-smi-topo": ["nvidia-smi", "topo", "-m"],
    "nvidia-smi-nvlink-status": ["nvidia-smi", "nvlink", "-s"],
    "uname-r": ["uname", "-r"],
    # /dev/shm usage: statvfs cannot go through a FactSource, so its `df` line is recorded like any command.
    "df-dev-shm": ["df", "-P", "-B1", "/dev/shm"],
    # ACSCtl of the PCIe bridges above the GPUs (capabilities are shown to root only).
    "lspci-vvv": ["lspci", "-vvv"],
}


class CommandResult:
    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr

    def to_dict(self) -> Dict[str, Any]:
        return {"returncode": self.returncode, "stdout": self.stdout, "stderr": self.stderr}


class FactSource:
    """Interface shared by live, recording and bundle sources."""

    is_live: bool = True
    description: str = ""

    def read_text(self, path: str) -> str:
        raise NotImplementedError

    def exists(self, path: str) -> bool:
        try:
            self.read_text(path)
            return True
        except FileNotFoundError:
            return False
        except (FactUnavailable, IsADirectoryError):
            return True

    def listdir(self, path: str) -> List[str]:
        raise NotImplementedError

    def readlink(self, path: str) -> str:
        raise NotImplementedError

    def command(self, name: str) -> CommandResult:
        raise NotImplementedError

    def nvml(self) -> Dict[str, Any]:
        raise NotImplementedError

    def stack(self) -> Dict[str, Any]:
        raise NotImplementedError

    def stack_pending(self) -> bool:
        """Whether asking for stack() now would wait for a stack probe that is still running."""
        return False

    def glob(self, pattern: str) -> List[str]:
        """Paths matching a POSIX glob with '*' inside one directory level at a time."""
        parts = PurePosixPath(_norm(pattern)).parts[1:]
        found = ["/"]
        for part in parts:
            nxt = []
            for base in found:
                if any(ch in part for ch in "*?["):
                    try:
                        names = self.listdir(base)
                    except (FileNotFoundError, NotADirectoryError, FactUnavailable):
                        continue
                    nxt.extend(str(PurePosixPath(base) / n) for n in names if fnmatch.fnmatchcase(n, part))
                else:
                    nxt.append(str(PurePosixPath(base) / part))
            found = nxt
        return sorted(p for p in found if self.exists(p) or self._is_dir(p))

    def _is_dir(self, path: str) -> bool:
        try:
            self.listdir(path)
            return True
        except (FileNotFoundError, NotADirectoryError, FactUnavailable):
            return False


class LiveSource(FactSource):
    """The running node. `root` lets tests point it at a fake /proc + /sys tree."""

    is_live = True

    def __init__(self, root: str = "/", python: Optional[str] = None,
                 nvml_reader: Optional[Callable[[], Dict[str, Any]]] = None,
                 stack_reader: Optional[Callable[[str], Dict[str, Any]]] = None,
                 command_timeout_s: float = 15.0):
        self.root = Path(root)
        self.python = python
        self.description = f"live node (root {root})"
        self._nvml_reader = nvml_reader
        self._stack_reader = stack_reader
        self._command_timeout_s = command_timeout_s
        self._nvml_cache: Optional[Dict[str, Any]] = None
        self._nvml_error: Optional[FactUnavailable] = None
        self._stack_cache: Optional[Dict[str, Any]] = None
        self._stack_error: Optional[str] = None
        self._commands: Dict[str, CommandResult] = {}

    def _path(self, path: str) -> Path:
        return self.root / _norm(path).lstrip("/")

    def read_text(self, path: str) -> str:
        p = self._path(path)
        try:
            # Read in small chunks: a single huge read() of a /proc/sys file fails with ENOMEM.
            chunks: List[bytes] = []
            size = 0
            with open(p, "rb", buffering=0) as fh:
                while size < _MAX_READ:
                    chunk = fh.read(65536)
                    if not chunk:
                        break
                    chunks.append(chunk)
                    size += len(chunk)
            data = b"".join(chunks)
        except PermissionError as exc:
            raise FactUnavailable(f"permission denied reading {_norm(path)} (run as root to read it)") from exc
        except IsADirectoryError:
            raise
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise FactUnavailable(f"cannot read {_norm(path)}: {exc.strerror or exc}") from exc
        return data.decode("utf-8", errors="replace")

    def listdir(self, path: str) -> List[str]:
        try:
            return sorted(os.listdir(self._path(path)))
        except PermissionError as exc:
            raise FactUnavailable(f"permission denied listing {_norm(path)}") from exc

    def readlink(self, path: str) -> str:
        return os.readlink(self._path(path))

    def command(self, name: str) -> CommandResult:
        if name in self._commands:
            return self._commands[name]
        argv = COMMANDS[name]
        if str(self.root) != "/":
            raise FactUnavailable(f"command {name!r} is not run against a non-/ root {self.root}")
        exe = shutil.which(argv[0])
        if exe is None:
            raise FactUnavailable(f"{argv[0]} is not installed")
        try:
            proc = run_bounded([exe] + argv[1:], self._command_timeout_s)
        except CommandHung as exc:
            raise FactHung(f"{' '.join(argv)} did not answer within {self._command_timeout_s:g} s (killed with "
                           "its child processes)") from exc
        except OSError as exc:
            raise FactUnavailable(f"cannot run {argv[0]}: {exc}") from exc
        result = CommandResult(proc.returncode, proc.stdout, proc.stderr)
        self._commands[name] = result
        return result

    def nvml(self) -> Dict[str, Any]:
        if self._nvml_cache is None and self._nvml_error is None:
            reader = self._nvml_reader
            if reader is None:
                from envbuild.facts.nvml import take_snapshot_within as reader  # lazy: pynvml is not free to import
            try:
                self._nvml_cache = reader()
            except FactUnavailable as exc:
                self._nvml_error = exc
        if self._nvml_error is not None:  # the same kind each time: a hung driver stays an error, not a skip
            raise type(self._nvml_error)(str(self._nvml_error))
        return self._nvml_cache  # type: ignore[return-value]

    def stack(self) -> Dict[str, Any]:
        if self._stack_cache is None and self._stack_error is None:
            reader = self._stack_reader
            if reader is None:  # the doctor hands one in (envbuild/doctor/stack_reader.py): facts/ runs no payload
                raise FactUnavailable("stack facts need a stack reader (this source was made without one)")
            try:
                self._stack_cache = reader(self.python or "")
            except FactUnavailable as exc:
                self._stack_error = str(exc)
        if self._stack_error is not None:
            raise FactUnavailable(self._stack_error)
        return self._stack_cache  # type: ignore[return-value]

    def stack_pending(self) -> bool:
        if self._stack_cache is not None or self._stack_error is not None:
            return False
        pending = getattr(self._stack_reader, "pending", None)  # a reader that runs the probe ahead (a prefetch)
        return bool(pending()) if pending is not None else False


_ENVIRON = re.compile(r"^/proc/[^/]+/environ$")


def redact_environ(text: str) -> str:
    """A bundle travels to other people: see envbuild.redact (allowlist of variables whose values are kept)."""
    from envbuild.redact import redact_environ as redact

    return redact(text)


def _unavailable_record(exc: FactUnavailable) -> Dict[str, Any]:
    """How a capture records a reading it could not take: the reason, and whether it hung (replayed as FactHung,
    the node's trouble, rather than a skip)."""
    return {"unavailable": str(exc), **({"hung": True} if isinstance(exc, FactHung) else {})}


def _replayed_unavailable(record: Dict[str, Any], why: str) -> FactUnavailable:
    """The error a bundle replays for a reading recorded by _unavailable_record."""
    return (FactHung if record.get("hung") else FactUnavailable)(why + " (when captured)")


class RecordingSource(FactSource):
    """Wraps a live source and records every answer, for `envbuild capture --node`."""

    def __init__(self, inner: FactSource):
        self.inner = inner
        self.is_live = inner.is_live
        self.description = inner.description
        self.files: Dict[str, str] = {}
        self.absent: set = set()
        self.unreadable: Dict[str, str] = {}
        self.dirs: Dict[str, List[str]] = {}
        self.links: Dict[str, str] = {}
        self.commands: Dict[str, Any] = {}
        self.nvml_data: Optional[Dict[str, Any]] = None
        self.nvml_error: Optional[FactUnavailable] = None
        self.stack_data: Optional[Dict[str, Any]] = None
        self.stack_error: Optional[str] = None

    def read_text(self, path: str) -> str:
        key = _norm(path)
        try:
            text = self.inner.read_text(path)
        except FileNotFoundError:
            self.absent.add(key)
            raise
        except FactUnavailable as exc:
            self.unreadable[key] = str(exc)
            raise
        self.files[key] = text
        return text

    def listdir(self, path: str) -> List[str]:
        key = _norm(path)
        try:
            names = self.inner.listdir(path)
        except (FileNotFoundError, NotADirectoryError):
            self.absent.add(key)
            raise
        except FactUnavailable as exc:
            self.unreadable[key] = str(exc)
            raise
        self.dirs[key] = names
        return names

    def readlink(self, path: str) -> str:
        key = _norm(path)
        try:
            target = self.inner.readlink(path)
        except (FileNotFoundError, OSError):
            self.absent.add(key)
            raise
        self.links[key] = target
        return target

    def command(self, name: str) -> CommandResult:
        try:
            result = self.inner.command(name)
        except FactUnavailable as exc:
            self.commands[name] = _unavailable_record(exc)
            raise
        self.commands[name] = result.to_dict()
        return result

    def nvml(self) -> Dict[str, Any]:
        try:
            self.nvml_data = self.inner.nvml()
        except FactUnavailable as exc:
            self.nvml_error = exc
            raise
        return self.nvml_data

    def stack(self) -> Dict[str, Any]:
        try:
            self.stack_data = self.inner.stack()
        except FactUnavailable as exc:
            self.stack_error = str(exc)
            raise
        return self.stack_data

    def stack_pending(self) -> bool:
        return self.inner.stack_pending()

    def save(self, directory: Path, meta: Dict[str, Any]) -> None:
        """Write the bundle: node files at their paths under `directory`, the rest under .envbuild/."""
        from envbuild.redact import scrub_json, scrub_text

        directory = Path(directory)
        meta_dir = directory / ".envbuild"
        meta_dir.mkdir(parents=True, exist_ok=True)
        for key, text in self.files.items():
            text = redact_environ(text) if _ENVIRON.match(key) else scrub_text(text)
            dest = directory / key.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text, encoding="utf-8")
        index = scrub_json({
            "absent": sorted(self.absent),
            "unreadable": dict(sorted(self.unreadable.items())),
            "dirs": dict(sorted(self.dirs.items())),
            "links": dict(sorted(self.links.items())),
        })
        (meta_dir / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
        (meta_dir / "commands.json").write_text(json.dumps(scrub_json(self.commands), indent=1, sort_keys=True) + "\n")
        nvml = {"data": self.nvml_data, "unavailable": None,
                **(_unavailable_record(self.nvml_error) if self.nvml_error is not None else {})}
        (meta_dir / "nvml.json").write_text(json.dumps(scrub_json(nvml), indent=1, sort_keys=True) + "\n")
        stack = {"data": self.stack_data, "unavailable": self.stack_error}
        (meta_dir / "stack.json").write_text(json.dumps(scrub_json(stack), indent=1, sort_keys=True) + "\n")
        marker = dict(meta, format=BUNDLE_FORMAT)
        (directory / BUNDLE_MARKER).write_text(json.dumps(scrub_json(marker), indent=1, sort_keys=True) + "\n")


class BundleSource(FactSource):
    """Answers from a bundle written by RecordingSource.save (`envbuild capture --node DIR`)."""

    is_live = False

    def __init__(self, directory: Path):
        from envbuild.errors import EnvbuildError
        from envbuild.facts import bundle_files

        self.root = Path(directory)
        marker = self.root / BUNDLE_MARKER
        if not self.root.is_dir():
            raise EnvbuildError(f"--root {self.root}: no such directory")
        if not marker.is_file() and not marker.is_symlink():
            raise EnvbuildError(
                f"--root {self.root} is not an envbuild bundle (no {BUNDLE_MARKER}); "
                "make one with `envbuild capture --node DIR` on the node"
            )
        bundle_files.scan(self.root)  # links, special files, sizes: refused before anything is read
        self.meta = bundle_files.load_meta(self.root, "bundle.json")
        if self.meta.get("format") != BUNDLE_FORMAT:
            raise EnvbuildError(f"--root {self.root}: bundle format {self.meta.get('format')!r}, this envbuild reads {BUNDLE_FORMAT}")
        self._index = bundle_files.load_meta(self.root, "index.json")
        self._commands = bundle_files.load_meta(self.root, "commands.json")
        self._nvml = bundle_files.load_meta(self.root, "nvml.json")
        self._stack = bundle_files.load_meta(self.root, "stack.json")
        self.touched: List[str] = []  # bundle files handed to checks, in order (named when a check crashes)
        self.description = f"bundle {self.root} (captured {self.meta.get('captured_at', '?')} on {self.meta.get('hostname', '?')})"

    def read_text(self, path: str) -> str:
        from envbuild.facts import bundle_files

        key = _norm(path)
        if key in self._index["unreadable"]:
            raise FactUnavailable(self._index["unreadable"][key] + " (when captured)")
        if key in self._index["absent"]:
            raise FileNotFoundError(key)
        self.touched.append(key.lstrip("/"))
        try:
            return bundle_files.read_text(self.root, key)
        except (FileNotFoundError, NotADirectoryError):
            raise FactUnavailable(f"{key} was not captured in the bundle")
        except bundle_files.BundleError as exc:
            raise FactUnavailable(f"{exc} (refused)") from exc

    def listdir(self, path: str) -> List[str]:
        key = _norm(path)
        if key in self._index["dirs"]:
            return list(self._index["dirs"][key])
        if key in self._index["unreadable"]:
            raise FactUnavailable(self._index["unreadable"][key] + " (when captured)")
        if key in self._index["absent"]:
            raise FileNotFoundError(key)
        raise FactUnavailable(f"directory {key} was not captured in the bundle")

    def readlink(self, path: str) -> str:
        key = _norm(path)
        if key in self._index["links"]:
            return self._index["links"][key]
        raise FileNotFoundError(key)

    def command(self, name: str) -> CommandResult:
        rec = self._commands.get(name)
        self.touched.append(".envbuild/commands.json")
        if rec is None:
            raise FactUnavailable(f"output of {name!r} was not captured in the bundle")
        if "unavailable" in rec:
            raise _replayed_unavailable(rec, rec["unavailable"])
        return CommandResult(rec["returncode"], rec["stdout"], rec["stderr"])

    def nvml(self) -> Dict[str, Any]:
        self.touched.append(".envbuild/nvml.json")
        if self._nvml.get("data") is None:
            raise _replayed_unavailable(self._nvml, self._nvml.get("unavailable") or "NVML was not read")
        return self._nvml["data"]

    def stack(self) -> Dict[str, Any]:
        self.touched.append(".envbuild/stack.json")
        if self._stack.get("data") is None:
            raise FactUnavailable((self._stack.get("unavailable") or "stack facts were not captured") + " (when captured)")
        return self._stack["data"]


def open_source(root: Optional[str], python: Optional[str] = None,
                stack_reader: Optional[Callable[[str], Dict[str, Any]]] = None,
                nvml_reader: Optional[Callable[[], Dict[str, Any]]] = None) -> FactSource:
    """`--root DIR` (a captured bundle) gives a BundleSource; no root, or '/', the live node, whose stack facts
    `stack_reader` reads (the doctor's: envbuild/doctor/stack_reader.py) and NVML's snapshot `nvml_reader` (default:
    taken when first asked)."""
    if root is None or root == "/":
        return LiveSource("/", python=python, stack_reader=stack_reader, nvml_reader=nvml_reader)
    return BundleSource(Path(root))
