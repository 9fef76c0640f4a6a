"""The build recipe of a profile: the `[recipe]` section of lockfiles/<profile>/profile.toml, as typed values.

Validated with the rest of the profile, by the same reader, so `envbuild lock`, `create` and `pack` all see
one checked model and every problem names the file, the line and the field: a typo in a channel, a spec or a
key otherwise surfaces minutes later as an unrelated solver error, or (an activation variable that is not a
shell name) only after every build phase ran.

TOML shape (all under [recipe]):

    platforms = ["linux-64"]
    virtual_packages = ["__cuda=12.9", "__glibc=2.35"]
    [recipe.conda]      channels = [...] (priority order), specs = [...], optional = {compat = [...]}
    [recipe.pip]        indexes = [{name, url, packages}], requirements = [...]
    [[recipe.git]]      name, url, commit, patches = [...], install = "editable"|"build"|"none", subdir,
                        submodules = [paths], sparse = {"<submodule path>" = [paths the build reads]}
    [[recipe.build]]    name, git, env = {...}, pip_args = [...]
    [recipe.toolchain]  pip = [...] (locked with the pip layer), cxx = "g++" (the host compiler, from PATH)
    [recipe.activation] env = {...}
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from packaging.requirements import InvalidRequirement, Requirement

from envbuild.profile.reader import Reader, did_you_mean, table_name

GIT_INSTALL_MODES = ("editable", "build", "none")
KNOWN_PLATFORMS = ("linux-64", "linux-aarch64", "linux-ppc64le", "osx-64", "osx-arm64", "win-64")
# Every key each table may hold; a typo is an error with a 'did you mean', never a silently dropped setting.
RECIPE_KEYS = ("platforms", "virtual_packages", "conda", "pip", "git", "build", "toolchain", "activation")
CONDA_KEYS = ("channels", "specs", "optional")
PIP_KEYS = ("indexes", "requirements", "exclude_newer")
PIP_INDEX_KEYS = ("name", "url", "packages")
GIT_KEYS = ("name", "url", "commit", "patches", "install", "subdir", "submodules", "sparse")
TOOLCHAIN_KEYS = ("pip", "cxx")
BUILD_KEYS = ("name", "git", "env", "pip_args")
ACTIVATION_KEYS = ("env",)
_VPKG_RE = re.compile(r"^__[a-z0-9_]+(=[^=\s]+(=[^=\s]+)?)?$")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
SHELL_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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
    exclude_newer: str = ""  # RFC 3339 upload cutoff for uv (--exclude-newer): a re-lock picks the same files


@dataclass(frozen=True)
class GitSource:
    name: str
    url: str
    commit: str
    patches: List[str] = field(default_factory=list)  # relative to the profile folder, applied in order
    install: str = "editable"  # "editable" | "build" | "none"
    subdir: str = ""
    submodules: List[str] = field(default_factory=list)  # paths checked out at the commit's gitlinks
    # {submodule path: the folders of it the build reads}: only those are checked out (git's cone-mode sparse
    # checkout over a blob-less fetch), so a submodule whose history carries large media or data the build never
    # opens costs a fraction of its size, and builds from a mirror that left such files out
    sparse: Dict[str, List[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class SourceBuild:
    name: str
    git: str  # the name of a GitSource
    env: Dict[str, str] = field(default_factory=dict)
    pip_args: List[str] = field(default_factory=list)


@dataclass(frozen=True)
class Toolchain:
    """What source builds compile with where no conda channel serves the CUDA toolkit: NVIDIA's PyPI wheels
    (nvcc, CCCL, runtime headers; `cuda-toolkit[...]` pins one CUDA release's components), cmake and ninja
    wheels, all in `pip` and locked with the pip layer; and the host C++ compiler `cxx`, a command on PATH."""

    pip: List[str] = field(default_factory=list)
    cxx: str = ""


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
    toolchain: Toolchain = field(default_factory=Toolchain)

    @property
    def pip_requirements(self) -> List[str]:
        """Everything the pip lock resolves: the layer's requirements, then the build toolchain's."""
        return list(self.pip.requirements) + [r for r in self.toolchain.pip if r not in self.pip.requirements]

    def git_source(self, name: str) -> GitSource:
        for g in self.git:
            if g.name == name:
                return g
        raise KeyError(name)


def parse_recipe(r: Reader, raw: Dict[str, Any]) -> Recipe:
    """The [recipe] table `raw` of the file `r` reads, validated; raises InputFileError(file, line, field)."""
    top = ("recipe",)
    if not isinstance(raw, dict):
        raise r.fail((), "recipe", f"expected a table, got {type(raw).__name__}")
    r.only(raw, top, RECIPE_KEYS)
    platforms = r.strings(raw, top, "platforms") or ["linux-64"]
    for p in platforms:
        if p not in KNOWN_PLATFORMS:
            raise r.fail(top, "platforms", f"unknown platform {p!r} (one of {', '.join(KNOWN_PLATFORMS)})")
    vpkgs = r.strings(raw, top, "virtual_packages")
    for v in vpkgs:
        if not _VPKG_RE.match(v):
            raise r.fail(top, "virtual_packages", f"{v!r} is not name[=version[=build]] with a __ name")
    conda = _conda(r, raw)
    git = _git(r, raw)
    return Recipe(platforms=platforms, virtual_packages=vpkgs, conda=conda, pip=_pip(r, raw), git=git,
                  builds=_builds(r, raw, git), activation=_activation(r, raw), profile_dir=r.path.parent,
                  toolchain=_toolchain(r, raw))


def _conda(r: Reader, raw: Dict[str, Any]) -> CondaLayer:
    table = ("recipe", "conda")
    data = r.table(raw, ("recipe",), "conda", CONDA_KEYS)
    channels = r.strings(data, table, "channels", required=True)
    specs = r.strings(data, table, "specs", required=True)
    optional_raw = data.get("optional", {})
    if not isinstance(optional_raw, dict):
        raise r.fail(table, "optional", f"expected a table of spec lists, got {type(optional_raw).__name__}")
    optional = {group: r.strings(optional_raw, table + ("optional",), group) for group in optional_raw}
    _check_specs(r, table, "specs", specs)
    for group, group_specs in optional.items():
        _check_specs(r, table + ("optional",), group, group_specs)
    return CondaLayer(channels=channels, specs=specs, optional=optional)


def _check_specs(r: Reader, table: tuple, key: str, specs: List[str]) -> None:
    """Parse each spec with rattler's MatchSpec so a typo is reported here, with its line."""
    from rattler import MatchSpec

    for i, s in enumerate(specs):
        try:
            MatchSpec(s)
        except Exception as exc:  # rattler raises its own InvalidMatchSpecError
            where = f"[{table_name(table)}] {key}"
            raise r.error(where, f"bad conda spec {s!r}: {exc}", table + (key, i)) from exc


def _pip(r: Reader, raw: Dict[str, Any]) -> PipLayer:
    table = ("recipe", "pip")
    data = r.table(raw, ("recipe",), "pip", PIP_KEYS)
    indexes: List[PipIndex] = []
    items = data.get("indexes", [])
    if not isinstance(items, list) or not all(isinstance(v, dict) for v in items):
        raise r.fail(table, "indexes", "expected a list of tables {name, url, packages}")
    for i, idx in enumerate(items):
        at = table + ("indexes", i)

        def fail(message: str) -> Exception:
            return r.error("[recipe.pip] indexes", message, at)

        name = idx.get("name")
        if not isinstance(name, str) or not name.strip():
            raise fail(f"index #{i + 1} has no name")
        for key in idx:
            if key not in PIP_INDEX_KEYS:
                raise r.error("[recipe.pip] indexes", f"index {name!r}: unknown field {key!r}; "
                              f"{did_you_mean(key, PIP_INDEX_KEYS)}known: "
                              f"{', '.join(PIP_INDEX_KEYS)}", at + (key,))
        if "url" not in idx:
            raise fail(f"index {name!r} has no url")
        url = idx["url"]
        if not isinstance(url, str) or not re.match(r"^(https?|file)://", url):
            raise fail(f"index {name!r}: url {url!r} is not http(s):// or file://")
        pkgs = idx.get("packages", [])
        if not isinstance(pkgs, list) or not all(isinstance(p, str) for p in pkgs):
            raise fail(f"index {name!r}: packages must be a list of names")
        indexes.append(PipIndex(name=name, url=url, packages=list(pkgs)))
    if len({i.name for i in indexes}) != len(indexes):
        raise r.fail(table, "indexes", "index names must be unique")
    cutoff = data.get("exclude_newer", "")
    if hasattr(cutoff, "isoformat"):  # an unquoted TOML date/time
        cutoff = cutoff.isoformat().replace("+00:00", "Z")
    if not isinstance(cutoff, str) or (cutoff and not re.match(r"^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2}))?$", cutoff)):
        raise r.fail(table, "exclude_newer", f"{cutoff!r} is not an RFC 3339 time (2026-11-30T00:00:00Z) or a date")
    pip = PipLayer(indexes=indexes, requirements=r.strings(data, table, "requirements"), exclude_newer=cutoff)
    if pip.requirements and not indexes:
        raise r.fail(table, "indexes", "requirements given but no index to resolve them from")
    return pip


def _git(r: Reader, raw: Dict[str, Any]) -> List[GitSource]:
    out: List[GitSource] = []
    for i, g in enumerate(r.array_of_tables(raw, ("recipe",), "git")):
        table = ("recipe", "git", i)
        r.only(g, table, GIT_KEYS)
        name = r.string(g, table, "name")
        if not _NAME_RE.match(name):
            raise r.fail(table, "name", f"{name!r} is not a plain name")
        commit = r.string(g, table, "commit")
        if not re.fullmatch(r"[0-9a-f]{7,40}", commit):
            raise r.fail(table, "commit", f"git source {name!r}: {commit!r} is not a hex commit")
        install = r.string(g, table, "install", required=False, default="editable")
        if install not in GIT_INSTALL_MODES:
            raise r.fail(table, "install",
                         f"git source {name!r}: {install!r} is not one of {', '.join(GIT_INSTALL_MODES)}")
        patches = r.strings(g, table, "patches")
        for p in patches:
            if Path(p).is_absolute() or ".." in Path(p).parts:
                raise r.fail(table, "patches", f"git source {name!r}: patch {p!r} must be relative to the profile folder")
        submodules = r.strings(g, table, "submodules")
        for p in submodules:
            if Path(p).is_absolute() or ".." in Path(p).parts or not p.strip("/"):
                raise r.fail(table, "submodules", f"git source {name!r}: submodule path {p!r} must be relative "
                                                  "to the checkout")
        submodules = [p.strip("/") for p in submodules]
        out.append(GitSource(name=name, url=r.string(g, table, "url"), commit=commit, patches=patches,
                             install=install, subdir=r.string(g, table, "subdir", required=False),
                             submodules=submodules, sparse=_sparse(r, g, table, name, submodules)))
    if len({g.name for g in out}) != len(out):
        raise r.fail(("recipe", "git"), "name", "git source names must be unique")
    return out


def _sparse(r: Reader, g: Dict[str, Any], table: tuple, name: str, submodules: List[str]) -> Dict[str, List[str]]:
    """`sparse = {"<submodule path>" = ["include", ...]}`: each key a listed submodule, each value a non-empty
    list of folders relative to that submodule (git's cone mode takes folders; the files at its top come too)."""
    raw = r.get(g, table, "sparse", dict, required=False, default={})
    out: Dict[str, List[str]] = {}
    for path, folders in raw.items():
        where = table + ("sparse",)
        if path.strip("/") not in submodules:
            raise r.fail(where, path, f"git source {name!r}: {path!r} is not one of its submodules "
                                      f"({', '.join(submodules) or 'it lists none'})")
        if not isinstance(folders, list) or not folders or not all(isinstance(f, str) and f.strip("/") for f in folders):
            raise r.fail(where, path, f"git source {name!r}: expected a non-empty list of folders, got {folders!r}")
        for f in folders:
            if Path(f).is_absolute() or ".." in Path(f).parts:
                raise r.fail(where, path, f"git source {name!r}: folder {f!r} must be relative to the submodule")
        out[path.strip("/")] = [f.strip("/") for f in folders]
    return out


def _builds(r: Reader, raw: Dict[str, Any], git: List[GitSource]) -> List[SourceBuild]:
    out: List[SourceBuild] = []
    git_names = {g.name for g in git}
    for i, b in enumerate(r.array_of_tables(raw, ("recipe",), "build")):
        table = ("recipe", "build", i)
        r.only(b, table, BUILD_KEYS)
        name = r.string(b, table, "name")
        src = r.string(b, table, "git")
        if src not in git_names:
            raise r.fail(table, "git", f"build {name!r}: no [[recipe.git]] named {src!r}")
        env = r.str_map(b, table, "env")
        _check_shell_names(r, table + ("env",), env, f"build {name!r}: ")
        out.append(SourceBuild(name=name, git=src, env=env, pip_args=r.strings(b, table, "pip_args")))
    return out


def _toolchain(r: Reader, raw: Dict[str, Any]) -> Toolchain:
    table = ("recipe", "toolchain")
    data = r.table(raw, ("recipe",), "toolchain", TOOLCHAIN_KEYS)
    pip = r.strings(data, table, "pip")
    for i, req in enumerate(pip):
        try:
            Requirement(req)
        except InvalidRequirement as exc:
            raise r.error("[recipe.toolchain] pip", f"bad requirement {req!r}: {exc}", table + ("pip", i)) from exc
    cxx = r.string(data, table, "cxx", required=False)
    if cxx and not re.fullmatch(r"[A-Za-z0-9_.+/-]+", cxx):
        raise r.fail(table, "cxx", f"{cxx!r} is not a command name or path")
    return Toolchain(pip=pip, cxx=cxx)


def _activation(r: Reader, raw: Dict[str, Any]) -> Activation:
    table = ("recipe", "activation")
    data = r.table(raw, ("recipe",), "activation", ACTIVATION_KEYS)
    env = r.str_map(data, table, "env")
    _check_shell_names(r, table + ("env",), env, "")
    return Activation(env=env)


def _check_shell_names(r: Reader, table: tuple, env: Dict[str, str], what: str) -> None:
    """An environment variable the scripts export must be a shell name, or `export` fails after every phase, and
    its value one the kernel can hold (envbuild.envvalues)."""
    from envbuild.envvalues import value_problem

    for key, value in env.items():
        if not SHELL_NAME_RE.match(key):
            raise r.error(f"[{table_name(table[:-1])}] env", f"{what}{key!r} is not a shell variable name "
                          "(letters, digits and _, not starting with a digit)", table + (key,))
        problem = value_problem(key, value)
        if problem:
            raise r.error(f"[{table_name(table[:-1])}] env", f"{what}{problem}", table + (key,))
