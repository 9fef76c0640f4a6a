"""The build recipe of a profile: the `[recipe]` section of lockfiles/<profile>/profile.toml.

The profile loader keeps `[recipe]` as a raw dict; this module turns it into typed dataclasses so that
`envbuild lock`, `create` and `pack` all read one validated model. Every problem names the file, the
line (best effort, through envbuild.profile._line_of) and the field, because a recipe is hand-edited
and a typo in a channel or a spec otherwise surfaces minutes later as an unrelated solver error.

TOML shape (all under [recipe]):

    platforms = ["linux-64"]
    virtual_packages = ["__cuda=12.9", "__glibc=2.35"]
    [recipe.conda]      channels = [...] (priority order), specs = [...], optional = {compat = [...]}
    [recipe.pip]        indexes = [{name, url, packages}], requirements = [...]
    [[recipe.git]]      name, url, commit, patches = [...], install = "editable"|"build"|"none", subdir
    [[recipe.build]]    name, git, env = {...}, pip_args = [...]
    [recipe.activation] env = {...}
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from envbuild.errors import InputFileError

GIT_INSTALL_MODES = ("editable", "build", "none")
_KNOWN_PLATFORMS = ("linux-64", "linux-aarch64", "linux-ppc64le", "osx-64", "osx-arm64", "win-64", "noarch")
_VPKG_RE = re.compile(r"^__[a-z0-9_]+(=[^=\s]+(=[^=\s]+)?)?$")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class CondaLayer:
    channels: List[str]  # priority order, first wins (strict channel priority)
    specs: List[str]
    optional: Dict[str, List[str]] = field(default_factory=dict)  # e.g. {"compat": ["cuda-compat 12.9.*"]}


@dataclass(frozen=True)
class PipIndex:
    name: str
    url: str
    packages: List[str] = field(default_factory=list)  # must come from this index; empty = a fallback index


@dataclass(frozen=True)
class PipLayer:
    indexes: List[PipIndex] = field(default_factory=list)
    requirements: List[str] = field(default_factory=list)


@dataclass(frozen=True)
class GitSource:
    name: str
    url: str
    commit: str
    patches: List[str] = field(default_factory=list)  # relative to the profile folder, applied in order
    install: str = "editable"  # "editable" | "build" | "none"
    subdir: str = ""


@dataclass(frozen=True)
class SourceBuild:
    name: str
    git: str  # the name of a GitSource
    env: Dict[str, str] = field(default_factory=dict)
    pip_args: List[str] = field(default_factory=list)


@dataclass(frozen=True)
class Activation:
    env: Dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Recipe:
    platforms: List[str]
    virtual_packages: List[str]
    conda: CondaLayer
    pip: PipLayer
    git: List[GitSource]
    builds: List[SourceBuild]
    activation: Activation
    profile_dir: Optional[Path] = None  # where relative paths (patches) are resolved

    def git_source(self, name: str) -> GitSource:
        for g in self.git:
            if g.name == name:
                return g
        raise KeyError(name)


class _Checker:
    """Typed field access that raises InputFileError(file, line, field) on the first problem."""

    def __init__(self, path: Path, text: str):
        self.path = path
        self.text = text

    def fail(self, table: str, key: Optional[str], message: str) -> InputFileError:
        from envbuild.profile import _line_of

        where = f"[{table}] {key}" if key else f"[{table}]"
        return InputFileError(self.path, f"{where}: {message}", _line_of(self.text, table, key))

    def table(self, data: Dict[str, Any], table: str, key: str) -> Dict[str, Any]:
        value = data.get(key, {})
        if not isinstance(value, dict):
            raise self.fail(table, key, f"expected a table, got {type(value).__name__}")
        return value

    def string(self, data: Dict[str, Any], table: str, key: str, required: bool = True, default: str = "") -> str:
        if key not in data:
            if required:
                raise self.fail(table, None, f"missing required field {key!r}")
            return default
        value = data[key]
        if not isinstance(value, str) or (required and not value.strip()):
            raise self.fail(table, key, f"expected a non-empty string, got {value!r}")
        return value

    def strings(self, data: Dict[str, Any], table: str, key: str, required: bool = False) -> List[str]:
        if key not in data:
            if required:
                raise self.fail(table, None, f"missing required field {key!r}")
            return []
        value = data[key]
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            raise self.fail(table, key, f"expected a list of non-empty strings, got {value!r}")
        return list(value)

    def str_map(self, data: Dict[str, Any], table: str, key: str) -> Dict[str, str]:
        value = data.get(key, {})
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise self.fail(table, key, f"expected a table of strings, got {value!r}")
        return dict(value)

    def array_of_tables(self, data: Dict[str, Any], table: str, key: str) -> List[Dict[str, Any]]:
        value = data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise self.fail(table, key, "expected an array of tables ([[recipe.%s]])" % key)
        return value


def parse_recipe(profile: Any) -> Recipe:
    """Validate `profile.recipe` (the raw [recipe] dict of an envbuild.profile.Profile) into a Recipe.

    Accepts anything with `.path` (the profile.toml) and `.recipe` (a dict). Raises InputFileError naming
    file, line and field.
    """
    path = Path(profile.path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        text = ""
    c = _Checker(path, text)
    raw = profile.recipe or {}
    if not raw:
        raise InputFileError(path, "[recipe]: the profile has no [recipe] section; nothing to lock or build", None)

    platforms = c.strings(raw, "recipe", "platforms") or ["linux-64"]
    for p in platforms:
        if p not in _KNOWN_PLATFORMS or p == "noarch":
            raise c.fail("recipe", "platforms", f"unknown platform {p!r} (one of {', '.join(_KNOWN_PLATFORMS[:-1])})")
    vpkgs = c.strings(raw, "recipe", "virtual_packages")
    for v in vpkgs:
        if not _VPKG_RE.match(v):
            raise c.fail("recipe", "virtual_packages", f"{v!r} is not name[=version[=build]] with a __ name")

    conda_raw = c.table(raw, "recipe", "conda")
    channels = c.strings(conda_raw, "recipe.conda", "channels", required=True)
    specs = c.strings(conda_raw, "recipe.conda", "specs", required=True)
    optional_raw = c.table(conda_raw, "recipe.conda", "optional")
    optional: Dict[str, List[str]] = {}
    for group in optional_raw:
        optional[group] = c.strings(optional_raw, "recipe.conda", group)
    _check_specs(c, "recipe.conda", "specs", specs)
    for group, group_specs in optional.items():
        _check_specs(c, "recipe.conda", group, group_specs)
    conda = CondaLayer(channels=channels, specs=specs, optional=optional)

    pip_raw = c.table(raw, "recipe", "pip")
    indexes: List[PipIndex] = []
    for i, idx in enumerate(c.array_of_tables(pip_raw, "recipe.pip", "indexes")):
        name = c.string(idx, "recipe.pip", "name") if "name" in idx else None
        if name is None:
            raise c.fail("recipe.pip", "indexes", f"index #{i + 1} has no name")
        if "url" not in idx:
            raise c.fail("recipe.pip", "indexes", f"index {name!r} has no url")
        url = idx["url"]
        if not isinstance(url, str) or not re.match(r"^(https?|file)://", url):
            raise c.fail("recipe.pip", "indexes", f"index {name!r}: url {url!r} is not http(s):// or file://")
        pkgs = idx.get("packages", [])
        if not isinstance(pkgs, list) or not all(isinstance(p, str) for p in pkgs):
            raise c.fail("recipe.pip", "indexes", f"index {name!r}: packages must be a list of names")
        indexes.append(PipIndex(name=name, url=url, packages=list(pkgs)))
    if len({i.name for i in indexes}) != len(indexes):
        raise c.fail("recipe.pip", "indexes", "index names must be unique")
    pip = PipLayer(indexes=indexes, requirements=c.strings(pip_raw, "recipe.pip", "requirements"))
    if pip.requirements and not indexes:
        raise c.fail("recipe.pip", "indexes", "requirements given but no index to resolve them from")

    git: List[GitSource] = []
    for g in c.array_of_tables(raw, "recipe", "git"):
        table = "recipe.git"
        name = c.string(g, table, "name")
        if not _NAME_RE.match(name):
            raise c.fail(table, "name", f"{name!r} is not a plain name")
        commit = c.string(g, table, "commit")
        if not re.fullmatch(r"[0-9a-f]{7,40}", commit):
            raise c.fail(table, "commit", f"git source {name!r}: {commit!r} is not a hex commit")
        install = c.string(g, table, "install", required=False, default="editable")
        if install not in GIT_INSTALL_MODES:
            raise c.fail(table, "install", f"git source {name!r}: {install!r} is not one of {', '.join(GIT_INSTALL_MODES)}")
        patches = c.strings(g, table, "patches")
        for p in patches:
            if Path(p).is_absolute() or ".." in Path(p).parts:
                raise c.fail(table, "patches", f"git source {name!r}: patch {p!r} must be relative to the profile folder")
        git.append(GitSource(name=name, url=c.string(g, table, "url"), commit=commit, patches=patches,
                             install=install, subdir=c.string(g, table, "subdir", required=False)))
    if len({g.name for g in git}) != len(git):
        raise c.fail("recipe.git", "name", "git source names must be unique")

    builds: List[SourceBuild] = []
    git_names = {g.name for g in git}
    for b in c.array_of_tables(raw, "recipe", "build"):
        table = "recipe.build"
        name = c.string(b, table, "name")
        src = c.string(b, table, "git")
        if src not in git_names:
            raise c.fail(table, "git", f"build {name!r}: no [[recipe.git]] named {src!r}")
        builds.append(SourceBuild(name=name, git=src, env=c.str_map(b, table, "env"),
                                  pip_args=c.strings(b, table, "pip_args")))

    act_raw = c.table(raw, "recipe", "activation")
    activation = Activation(env=c.str_map(act_raw, "recipe.activation", "env"))

    return Recipe(platforms=platforms, virtual_packages=vpkgs, conda=conda, pip=pip, git=git, builds=builds,
                  activation=activation, profile_dir=path.parent)


def _check_specs(c: _Checker, table: str, key: str, specs: List[str]) -> None:
    """Parse each spec with rattler's MatchSpec so a typo is reported here, with its line."""
    from rattler import MatchSpec

    for s in specs:
        try:
            MatchSpec(s)
        except Exception as exc:  # rattler raises its own InvalidMatchSpecError
            raise c.fail(table, key, f"bad conda spec {s!r}: {exc}") from exc
