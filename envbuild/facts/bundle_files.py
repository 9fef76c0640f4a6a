"""Reading a node bundle (`envbuild doctor --root DIR`) as untrusted input: no links, bounded sizes, checked shapes.

A bundle comes from another machine, often from another person. So:

- nothing in it is followed: a symbolic link (absolute or relative, also a linked parent folder), a hard link
  to a file outside it, a device or FIFO is refused when the bundle is opened, naming the file, and every
  later read opens each path component with O_NOFOLLOW (a link swapped in after the check is still refused);
- what it holds is bounded (a file, and the bundle in total), so a crafted bundle cannot fill memory;
- its metadata (.envbuild/*.json) must have the shapes `envbuild capture --node` writes; anything else is
  one error naming the file and the key, exit 2 — never a check that crashes on a list where a dict belongs.
"""
from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path, PurePosixPath
from typing import Any, Dict, List, Optional, Tuple

from envbuild.errors import EnvbuildError

MAX_FILE_BYTES = 16 * 1024 * 1024  # the largest node file or metadata file a capture writes is a few MiB
MAX_BUNDLE_BYTES = 256 * 1024 * 1024
MAX_FILES = 20000


class BundleError(EnvbuildError):
    """A bundle file that is a link, too big, or not in the shape a capture writes (names the file)."""


def scan(root: Path) -> None:
    """Refuse the bundle at `root` if anything in it is a link, a special file, or too big (one line, exit 2)."""
    total = count = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            try:
                st = os.lstat(path)
            except OSError as exc:
                raise BundleError(f"--root {root}: cannot read {path}: {exc.strerror or exc}") from exc
            if stat.S_ISLNK(st.st_mode):
                raise BundleError(f"--root {root}: {path} is a symbolic link (to {os.readlink(path)}); a bundle holds "
                                  "only plain files and folders, and envbuild never follows a link out of it")
            if stat.S_ISDIR(st.st_mode):
                continue
            if not stat.S_ISREG(st.st_mode):
                raise BundleError(f"--root {root}: {path} is not a plain file (a device, FIFO or socket)")
            if st.st_nlink > 1:
                raise BundleError(f"--root {root}: {path} is a hard link ({st.st_nlink} names); a capture writes "
                                  "none, and a hard link may point at a file outside the bundle")
            if st.st_size > MAX_FILE_BYTES:
                raise BundleError(f"--root {root}: {path} is {st.st_size} bytes; bundle files are at most "
                                  f"{MAX_FILE_BYTES} bytes")
            total += st.st_size
            count += 1
            if total > MAX_BUNDLE_BYTES or count > MAX_FILES:
                raise BundleError(f"--root {root}: more than {MAX_BUNDLE_BYTES} bytes or {MAX_FILES} files; not a "
                                  "bundle written by `envbuild capture --node`")


def read_bytes(root: Path, rel: str, cap: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of `rel` (a POSIX path inside the bundle), opened component by component with O_NOFOLLOW.

    Raises FileNotFoundError when absent, IsADirectoryError for a folder, BundleError for a link, a special
    file, a hard link, '..' or more than `cap` bytes."""
    parts = [p for p in PurePosixPath(rel).parts if p not in ("/", "")]
    if any(p in (".", "..") for p in parts):
        raise BundleError(f"{root}: path {rel!r} leaves the bundle")
    if not parts:
        raise IsADirectoryError(rel)
    flags_dir = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    fd = os.open(str(root), os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i, part in enumerate(parts[:-1]):
            try:
                nxt = os.open(part, flags_dir, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(os.path.join(str(root), *parts[:i + 1])):
                    raise BundleError(f"{root}/{'/'.join(parts)}: a folder on its path is a symbolic link; "
                                      "not followed") from exc
                raise
            os.close(fd)
            fd = nxt
        try:
            ffd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise BundleError(f"{root}/{'/'.join(parts)} is a symbolic link; not followed") from exc
            raise
        try:
            st = os.fstat(ffd)
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(rel)
            if not stat.S_ISREG(st.st_mode):
                raise BundleError(f"{root}/{'/'.join(parts)} is not a plain file")
            if st.st_nlink > 1:
                raise BundleError(f"{root}/{'/'.join(parts)} is a hard link; not read")
            chunks: List[bytes] = []
            size = 0
            while size <= cap and st.st_size <= cap:  # a file that grows while read is cut at cap + 1 bytes
                chunk = os.read(ffd, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            blob = b"".join(chunks) if st.st_size <= cap else b"x" * (cap + 1)
        finally:
            os.close(ffd)
    finally:
        os.close(fd)
    if len(blob) > cap:
        raise BundleError(f"{root}/{'/'.join(parts)} is larger than {cap} bytes; not read")
    return blob


def read_text(root: Path, rel: str) -> str:
    return read_bytes(root, rel).decode("utf-8", errors="replace")


# -- shapes of the metadata files --------------------------------------------------------------------------------
# a spec is a tuple of allowed Python types, ("list", spec), ("map", spec) or {key: spec} (an object whose listed
# keys, when present, have those shapes; other keys may hold anything). REQUIRED lists keys that must be present.
_NUM = (int, float)
_OPT_STR = (str, type(None))
_OPT_NUM = (int, float, type(None))
_DEVICE = {"index": (int,), "name": _OPT_STR, "uuid": _OPT_STR, "serial": _OPT_STR, "pci_bus_id": _OPT_STR,
           "memory_total_mib": _OPT_NUM, "memory_used_mib": _OPT_NUM, "errors": ("map", (str,)),
           "nvlink": ("list", {"link": _OPT_NUM, "active": (bool, type(None)), "version": _OPT_NUM,
                               "remote_pci": _OPT_STR, "errors": ("map", _OPT_NUM)}),
           "processes": ("list", {"pid": (int,), "used_memory_mib": _OPT_NUM}),
           "pcie": (dict, type(None)), "fabric": (dict, type(None)), "ecc_mode": (dict, type(None)),
           "mig_mode": (dict, type(None)), "ecc_uncorrected": (dict, type(None)), "compute_mode": _OPT_STR,
           "cuda_capability": _OPT_STR}
_NVML_DATA = {"nvml_version": _OPT_STR, "driver_version": _OPT_STR, "cuda_driver_version": _OPT_NUM,
              "device_count": (int,), "devices": ("list", _DEVICE), "p2p": ("map", ("map", _OPT_STR)),
              "errors": ("map", (str,))}
_SHAPES: Dict[str, Tuple[Any, Tuple[str, ...]]] = {
    "bundle.json": ({"format": (int,), "hostname": _OPT_STR, "captured_at": _OPT_STR}, ("format",)),
    "index.json": ({"absent": ("list", (str,)), "unreadable": ("map", (str,)), "dirs": ("map", ("list", (str,))),
                    "links": ("map", (str,))}, ("absent", "unreadable", "dirs", "links")),
    "commands.json": (("map", {"returncode": (int,), "stdout": (str,), "stderr": (str,), "unavailable": (str,),
                               "hung": (bool,)}), ()),
    "nvml.json": ({"data": (dict, type(None)), "unavailable": _OPT_STR, "hung": (bool,)}, ()),
    "stack.json": ({"data": (dict, type(None)), "unavailable": _OPT_STR}, ()),
}


def _type_names(types: Tuple[type, ...]) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "true/false", dict: "an object",
             list: "a list", type(None): "null"}
    return " or ".join(names.get(t, t.__name__) for t in types)


def _check(value: Any, spec: Any, where: str) -> Optional[str]:
    """None if `value` fits `spec`, else what is wrong and where (a JSON path)."""
    if isinstance(spec, tuple) and spec and spec[0] in ("list", "map"):
        kind, inner = spec
        if kind == "list":
            if not isinstance(value, list):
                return f"{where} must be a list, not {type(value).__name__}"
            for i, v in enumerate(value):
                err = _check(v, inner, f"{where}[{i}]")
                if err:
                    return err
            return None
        if not isinstance(value, dict):
            return f"{where} must be an object, not {type(value).__name__}"
        for k, v in value.items():
            err = _check(v, inner, f"{where}.{k}")
            if err:
                return err
        return None
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            return f"{where or 'the top level'} must be an object, not {type(value).__name__}"
        for k, inner in spec.items():
            if k in value:
                err = _check(value[k], inner, f"{where}.{k}" if where else k)
                if err:
                    return err
        return None
    if isinstance(value, bool) and bool not in spec:  # JSON true is not a number here
        return f"{where} must be {_type_names(spec)}, not a boolean"
    if not isinstance(value, spec):
        return f"{where} must be {_type_names(spec)}, not {type(value).__name__}"
    return None


def load_meta(root: Path, name: str) -> Any:
    """`.envbuild/<name>` parsed and checked against the shape a capture writes; BundleError names file and key."""
    path = f".envbuild/{name}"
    shown = f"--root {root}: {path}"
    try:
        text = read_bytes(root, path).decode("utf-8")
    except FileNotFoundError as exc:
        raise BundleError(f"{shown}: missing; the bundle is damaged (capture it again)") from exc
    except UnicodeDecodeError as exc:
        raise BundleError(f"{shown}: not UTF-8 text (byte {exc.start})") from exc
    except OSError as exc:
        raise BundleError(f"{shown}: cannot read: {exc.strerror or exc}") from exc
    try:
        data = json.loads(text)
    except RecursionError as exc:
        raise BundleError(f"{shown}: nested too deeply") from exc
    except ValueError as exc:
        line = getattr(exc, "lineno", None)
        raise BundleError(f"{shown}{':' + str(line) if line else ''}: not valid JSON: {getattr(exc, 'msg', exc)}") from exc
    spec, required = _SHAPES[name]
    err = _check(data, spec, "")
    if err is None:
        missing = [k for k in required if k not in data]
        err = f"missing key {missing[0]!r}" if missing else None
    if err is None and name == "commands.json":
        for cmd, rec in data.items():
            if "unavailable" not in rec and not {"returncode", "stdout", "stderr"} <= set(rec):
                err = f"{cmd} needs returncode, stdout and stderr (or unavailable)"
                break
    if err is None and name == "nvml.json" and isinstance(data.get("data"), dict):
        err = _check(data["data"], _NVML_DATA, "data")
    if err:
        raise BundleError(f"{shown}: {err}; not the shape `envbuild capture --node` writes")
    return data


def crash_note(facts: Any, mark: int) -> str:
    """For a check that crashed while replaying a bundle: ' (bundle files it read: ...)', else ''."""
    touched: Optional[List[str]] = getattr(facts, "touched", None)
    if not touched:
        return ""
    files = list(dict.fromkeys(touched[mark:]))[-4:]
    return f" (replaying {facts.root}; bundle files it read: {', '.join(files)})" if files else ""
