"""Read and validate one profile.toml, `[recipe]` included, in one pass with file:line errors.

A profile is hand-edited and a wrong pin silently builds the wrong env, so every problem names the file,
the line and the field, and every key the schema does not know is refused with the closest known one.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, List

from envbuild.errors import InputFileError, parse_input_toml, read_input_text
from envbuild.profile.model import Component, DockerRun, LaunchVar, Profile
from envbuild.profile.reader import Reader, did_you_mean
from envbuild.profile.recipe import parse_recipe

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
_HEX_COMMIT = re.compile(r"[0-9a-f]{7,40}")
PROFILE_MAX_BYTES = 4 * 1024 * 1024  # shipped profiles are a few KiB; a 200 MB one took 51 s to read


def load_profile_file(path: Path) -> Profile:
    """Parse and validate one profile.toml. Raises InputFileError naming file, line and field."""
    path = Path(path)
    text = read_input_text(path, "profile", max_bytes=PROFILE_MAX_BYTES)
    data = parse_input_toml(path, text)
    r = Reader(path, text)

    r.only(data, (), _TOP_KEYS)
    schema = data.get("schema", SCHEMA_VERSION)
    if schema != SCHEMA_VERSION:
        raise r.fail((), "schema", f"unsupported schema {schema!r} (this envbuild reads {SCHEMA_VERSION})")
    if "profile" not in data:
        raise InputFileError(path, "missing the [profile] table", 1)
    top = ("profile",)
    head = r.get(data, (), "profile", dict)
    r.only(head, top, _PROFILE_KEYS)
    name = r.get(head, top, "name", str)
    if name != path.parent.name:
        raise r.fail(top, "name", f"name {name!r} differs from its folder {path.parent.name!r}")
    cuda = r.get(head, top, "cuda", str)
    cuda_major = r.get(head, top, "cuda_major", int)
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?", cuda):
        raise r.fail(top, "cuda", f"{cuda!r} is not a CUDA version like 12.9 or 12.9.1")
    if not cuda.startswith(f"{cuda_major}."):
        raise r.fail(top, "cuda_major", f"{cuda_major} does not match cuda = {cuda!r}")
    python = r.get(head, top, "python", str)
    if not re.fullmatch(r"3\.\d+(\.\d+)?", python):
        raise r.fail(top, "python", f"{python!r} is not a Python version like 3.12")
    components = _components(r, data)
    return Profile(
        name=name,
        path=path,
        description=r.get(head, top, "description", str),
        image=r.get(head, top, "image", str),
        framework=r.get(head, top, "framework", str),
        cuda=cuda,
        cuda_major=cuda_major,
        python=python,
        components=components,
        launch_env=_launch_env(r, data),
        docker_run=_docker_run(r, data),
        patches=_patches(r, data, components),
        recipe=parse_recipe(r, data["recipe"]) if "recipe" in data else None,
        raw=data,
    )


def _components(r: Reader, data: Dict[str, Any]) -> Dict[str, Component]:
    components: Dict[str, Component] = {}
    for cname, cdata in r.get(data, ("components",), "components", dict).items():
        table = ("components", cname)
        if not isinstance(cdata, dict):
            raise r.fail(("components",), cname, "expected a table")
        r.only(cdata, table, _COMPONENT_KEYS)
        version = r.get(cdata, table, "version", str, required=False)
        commit = r.get(cdata, table, "commit", str, required=False)
        if version is None and commit is None:
            raise r.fail(table, None, "needs a version or a commit")
        if commit is not None and not _HEX_COMMIT.fullmatch(commit):
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
    return components


def _launch_env(r: Reader, data: Dict[str, Any]) -> Dict[str, LaunchVar]:
    launch_env: Dict[str, LaunchVar] = {}
    for vname, vdata in r.get(data, (), "launch_env", dict, required=False, default={}).items():
        table = ("launch_env", vname)
        if not isinstance(vdata, dict):
            raise r.fail(("launch_env",), vname, "expected a table with value, scope, source")
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
    return launch_env


def _docker_run(r: Reader, data: Dict[str, Any]) -> "DockerRun | None":
    if "docker_run" not in data:
        return None
    table = ("docker_run",)
    d = r.get(data, (), "docker_run", dict)
    r.only(d, table, _DOCKER_KEYS)
    return DockerRun(
        shm_size_bytes=r.get(d, table, "shm_size_bytes", int, required=False),
        memlock=r.get(d, table, "memlock", str, required=False),
        stack_bytes=r.get(d, table, "stack_bytes", int, required=False),
        ipc=r.get(d, table, "ipc", str, required=False),
        source=r.get(d, table, "source", str),
    )


def _patches(r: Reader, data: Dict[str, Any], components: Dict[str, Component]) -> List[Dict[str, Any]]:
    """[[patches]]: slime's patches for a checkout (target names a component with a commit)."""
    items = r.get(data, (), "patches", list, required=False, default=[])
    out = []
    for i, item in enumerate(items):
        def fail(key: "str | None", message: str) -> InputFileError:
            where = f"[[patches]] #{i + 1}" + (f" {key}" if key else "")
            return r.error(where, message, ("patches", i) + ((key,) if key else ()))

        if not isinstance(item, dict):
            raise fail(None, "expected a table")
        for key in item:
            if key not in _PATCH_KEYS:
                raise fail(key, f"unknown field; {did_you_mean(key, _PATCH_KEYS)}known: {', '.join(_PATCH_KEYS)}")
        for key, typ in (("target", str), ("file", str), ("source", str), ("verified", bool)):
            if key not in item:
                raise fail(None, f"missing required field {key!r}")
            if not isinstance(item[key], typ):
                raise fail(key, f"expected {typ.__name__}, got {type(item[key]).__name__} {item[key]!r}")
        if item["target"] not in components or not components[item["target"]].commit:
            raise fail("target", f"{item['target']!r} is not a component pinned by commit in this profile")
        out.append(dict(item))
    return out
