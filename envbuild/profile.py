"""Profiles of reference images: what the image holds (components), how it is launched, and the recipe.

A profile lives in lockfiles/<name>/profile.toml. Every fact carries its source and whether it was read
from the image itself (`verified`). Loading validates the file and names the file, line and field of
the first problem, because a profile is hand-edited and a wrong pin silently builds the wrong env.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from envbuild.errors import EnvbuildError, InputFileError, parse_input_toml, read_input_text
from envbuild.paths import lockfiles_dir

SCHEMA_VERSION = 1
_SEVERITIES = ("fail", "warn", "info")
_SCOPES = ("all", "train", "rollout")
# Every key a table may hold: a typo ("verifed") is an error naming its line, not a silently missing fact.
_TOP_KEYS = ("schema", "profile", "components", "launch_env", "docker_run", "patches", "recipe")
_PROFILE_KEYS = ("name", "description", "image", "framework", "cuda", "cuda_major", "python")
_COMPONENT_KEYS = ("version", "commit", "source", "verified", "pip_name", "severity", "why", "notes")
_LAUNCH_KEYS = ("value", "scope", "source", "verified", "why")
_DOCKER_KEYS = ("shm_size_bytes", "memlock", "stack_bytes", "ipc", "source")
_PATCH_KEYS = ("target", "file", "source", "verified", "notes")


@dataclass(frozen=True)
class Component:
    """One piece of the image's stack (torch, nccl, sglang, ...), pinned by version or by git commit."""

    name: str
    version: Optional[str]
    commit: Optional[str]
    source: str
    verified: bool
    pip_name: Optional[str] = None  # distribution name to look for in an env
    severity: str = "warn"  # how bad a mismatch is
    why: str = ""  # why a mismatch matters, shown next to the verdict
    notes: str = ""


@dataclass(frozen=True)
class LaunchVar:
    """An environment variable the image's launch sets (slime's actors, sglang, the example scripts)."""

    name: str
    value: str
    scope: str
    source: str
    verified: bool = False
    why: str = ""


@dataclass(frozen=True)
class DockerRun:
    """The `docker run` limits the image is documented with; a bare-metal node is compared with these."""

    shm_size_bytes: Optional[int]
    memlock: Optional[str]  # "unlimited" or bytes as a string
    stack_bytes: Optional[int]
    ipc: Optional[str]
    source: str


@dataclass
class Profile:
    name: str
    path: Path
    description: str
    image: str
    framework: str
    cuda: str
    cuda_major: int
    python: str
    components: Dict[str, Component]
    launch_env: Dict[str, LaunchVar]
    docker_run: Optional[DockerRun]
    patches: List[Dict[str, Any]] = field(default_factory=list)
    recipe: Dict[str, Any] = field(default_factory=dict)  # validated by envbuild.lock.recipe
    raw: Dict[str, Any] = field(default_factory=dict)

    @property
    def directory(self) -> Path:
        return self.path.parent


def _line_of(text: str, table: Optional[str], key: Optional[str]) -> Optional[int]:
    """Best-effort line number of `key` inside `[table]` (TOML parsers do not report key positions)."""
    lines = text.splitlines()
    start = 0
    if table:
        header = re.compile(r"^\s*\[+\s*" + re.escape(table) + r"\s*\]+\s*(#.*)?$")
        for i, line in enumerate(lines):
            if header.match(line):
                start = i
                break
        else:
            start = 0
    if key is None:
        return start + 1 if table else None
    key_re = re.compile(r"^\s*" + re.escape(key) + r"\s*=")
    for i in range(start, len(lines)):
        if i > start and table and re.match(r"^\s*\[", lines[i]):
            break
        if key_re.match(lines[i]):
            return i + 1
    return start + 1 if table else None


def _line_of_array_item(text: str, table: str, index: int, key: Optional[str]) -> Optional[int]:
    """Line of `key` in the index-th [[table]] (or of that header when key is None)."""
    header = re.compile(r"^\s*\[\[\s*" + re.escape(table) + r"\s*\]\]")
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if header.match(line)]
    if index >= len(starts):
        return None
    start = starts[index]
    if key is not None:
        key_re = re.compile(r"^\s*" + re.escape(key) + r"\s*=")
        for i in range(start + 1, len(lines)):
            if re.match(r"^\s*\[", lines[i]):
                break
            if key_re.match(lines[i]):
                return i + 1
    return start + 1


class _Reader:
    """Typed access to the parsed TOML that turns every problem into file:line: message."""

    def __init__(self, path: Path, text: str):
        self.path = path
        self.text = text

    def only(self, data: Dict[str, Any], table: Optional[str], allowed: Tuple[str, ...]) -> None:
        """Reject keys the schema does not know, naming the first one and its line."""
        for key in data:
            if key not in allowed:
                where = f"[{table}]" if table else "top level"
                message = f"unknown field in {where}; known: {', '.join(allowed)}"
                if table is None and isinstance(data[key], (dict, list)):  # an unknown [table] or [[table]]
                    header = re.compile(r"^\s*\[+\s*" + re.escape(key) + r"\s*[\].]")
                    line = next((i + 1 for i, text in enumerate(self.text.splitlines()) if header.match(text)), None)
                    raise InputFileError(self.path, f"[{key}]: {message}", line)
                raise self.fail(table, key, message)

    def fail(self, table: Optional[str], key: Optional[str], message: str) -> InputFileError:
        where = f"[{table}] {key}" if table and key else (f"[{table}]" if table else key or "")
        return InputFileError(self.path, f"{where}: {message}" if where else message, _line_of(self.text, table, key))

    def get(self, data: Dict[str, Any], table: str, key: str, typ: Any, required: bool = True, default: Any = None) -> Any:
        if key not in data:
            if required:
                raise self.fail(table, None, f"missing required field {key!r}")
            return default
        value = data[key]
        if typ is int and isinstance(value, bool):
            raise self.fail(table, key, "expected an integer, got a boolean")
        if not isinstance(value, typ):
            names = typ.__name__ if isinstance(typ, type) else "/".join(t.__name__ for t in typ)
            raise self.fail(table, key, f"expected {names}, got {type(value).__name__} {value!r}")
        return value


def load_profile_file(path: Path) -> Profile:
    """Parse and validate one profile.toml. Raises InputFileError naming file, line and field."""
    path = Path(path)
    text = read_input_text(path, "profile")
    data = parse_input_toml(path, text)
    r = _Reader(path, text)

    r.only(data, None, _TOP_KEYS)
    schema = data.get("schema", SCHEMA_VERSION)
    if schema != SCHEMA_VERSION:
        raise r.fail(None, "schema", f"unsupported schema {schema!r} (this envbuild reads {SCHEMA_VERSION})")
    head = r.get(data, "profile", "profile", dict) if "profile" in data else None
    if head is None:
        raise InputFileError(path, "missing the [profile] table", 1)
    r.only(head, "profile", _PROFILE_KEYS)
    name = r.get(head, "profile", "name", str)
    if name != path.parent.name:
        raise r.fail("profile", "name", f"name {name!r} differs from its folder {path.parent.name!r}")
    cuda = r.get(head, "profile", "cuda", str)
    cuda_major = r.get(head, "profile", "cuda_major", int)
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?", cuda):
        raise r.fail("profile", "cuda", f"{cuda!r} is not a CUDA version like 12.9 or 12.9.1")
    if not cuda.startswith(f"{cuda_major}."):
        raise r.fail("profile", "cuda_major", f"{cuda_major} does not match cuda = {cuda!r}")
    python = r.get(head, "profile", "python", str)
    if not re.fullmatch(r"3\.\d+(\.\d+)?", python):
        raise r.fail("profile", "python", f"{python!r} is not a Python version like 3.12")

    components: Dict[str, Component] = {}
    for cname, cdata in r.get(data, "components", "components", dict).items():
        table = f"components.{cname}"
        if not isinstance(cdata, dict):
            raise r.fail("components", cname, "expected a table")
        r.only(cdata, table, _COMPONENT_KEYS)
        version = r.get(cdata, table, "version", str, required=False)
        commit = r.get(cdata, table, "commit", str, required=False)
        if version is None and commit is None:
            raise r.fail(table, None, "needs a version or a commit")
        if commit is not None and not re.fullmatch(r"[0-9a-f]{7,40}", commit):
            raise r.fail(table, "commit", f"{commit!r} is not a hex git commit")
        severity = r.get(cdata, table, "severity", str, required=False, default="warn")
        if severity not in _SEVERITIES:
            raise r.fail(table, "severity", f"{severity!r} is not one of {', '.join(_SEVERITIES)}")
        components[cname] = Component(
            name=cname,
            version=version,
            commit=commit,
            source=r.get(cdata, table, "source", str),
            verified=r.get(cdata, table, "verified", bool),
            pip_name=r.get(cdata, table, "pip_name", str, required=False),
            severity=severity,
            why=r.get(cdata, table, "why", str, required=False, default=""),
            notes=r.get(cdata, table, "notes", str, required=False, default=""),
        )

    launch_env: Dict[str, LaunchVar] = {}
    for vname, vdata in r.get(data, "launch_env", "launch_env", dict, required=False, default={}).items():
        table = f"launch_env.{vname}"
        if not isinstance(vdata, dict):
            raise r.fail("launch_env", vname, "expected a table with value, scope, source")
        r.only(vdata, table, _LAUNCH_KEYS)
        scope = r.get(vdata, table, "scope", str, required=False, default="all")
        if scope not in _SCOPES:
            raise r.fail(table, "scope", f"{scope!r} is not one of {', '.join(_SCOPES)}")
        launch_env[vname] = LaunchVar(
            name=vname,
            value=r.get(vdata, table, "value", str),
            scope=scope,
            source=r.get(vdata, table, "source", str),
            verified=r.get(vdata, table, "verified", bool, required=False, default=False),
            why=r.get(vdata, table, "why", str, required=False, default=""),
        )

    docker_run = None
    if "docker_run" in data:
        d = r.get(data, "docker_run", "docker_run", dict)
        r.only(d, "docker_run", _DOCKER_KEYS)
        docker_run = DockerRun(
            shm_size_bytes=r.get(d, "docker_run", "shm_size_bytes", int, required=False),
            memlock=r.get(d, "docker_run", "memlock", str, required=False),
            stack_bytes=r.get(d, "docker_run", "stack_bytes", int, required=False),
            ipc=r.get(d, "docker_run", "ipc", str, required=False),
            source=r.get(d, "docker_run", "source", str),
        )

    return Profile(
        name=name,
        path=path,
        description=r.get(head, "profile", "description", str),
        image=r.get(head, "profile", "image", str),
        framework=r.get(head, "profile", "framework", str),
        cuda=cuda,
        cuda_major=cuda_major,
        python=python,
        components=components,
        launch_env=launch_env,
        docker_run=docker_run,
        patches=_patches(r, data, components),
        recipe=r.get(data, "recipe", "recipe", dict, required=False, default={}),
        raw=data,
    )


def _patches(r: _Reader, data: Dict[str, Any], components: Dict[str, Component]) -> List[Dict[str, Any]]:
    """[[patches]]: slime's patches for a checkout (target names a component with a commit)."""
    items = r.get(data, "patches", "patches", list, required=False, default=[])
    out = []
    for i, item in enumerate(items):
        def fail(key: Optional[str], message: str) -> InputFileError:
            where = f"[[patches]] #{i + 1}" + (f" {key}" if key else "")
            return InputFileError(r.path, f"{where}: {message}", _line_of_array_item(r.text, "patches", i, key))

        if not isinstance(item, dict):
            raise fail(None, "expected a table")
        for key in item:
            if key not in _PATCH_KEYS:
                raise fail(key, f"unknown field; known: {', '.join(_PATCH_KEYS)}")
        for key, typ in (("target", str), ("file", str), ("source", str), ("verified", bool)):
            if key not in item:
                raise fail(None, f"missing required field {key!r}")
            if not isinstance(item[key], typ):
                raise fail(key, f"expected {typ.__name__}, got {type(item[key]).__name__} {item[key]!r}")
        if item["target"] not in components or not components[item["target"]].commit:
            raise fail("target", f"{item['target']!r} is not a component pinned by commit in this profile")
        out.append(dict(item))
    return out


def profile_names(base: Optional[Path] = None) -> List[str]:
    base = base or lockfiles_dir()
    return sorted(p.parent.name for p in base.glob("*/profile.toml"))


def load_profile(name_or_path: str, base: Optional[Path] = None) -> Profile:
    """Load a profile by name (lockfiles/<name>/profile.toml) or by a path to a profile.toml."""
    candidate = Path(name_or_path)
    if candidate.suffix == ".toml" or candidate.is_file():
        return load_profile_file(candidate)
    base = base or lockfiles_dir()
    path = base / name_or_path / "profile.toml"
    if not path.is_file():
        known = ", ".join(profile_names(base)) or "(none)"
        raise EnvbuildError(f"unknown profile {name_or_path!r}; known profiles: {known}")
    return load_profile_file(path)
