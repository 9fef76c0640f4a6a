"""Resolve the pip layer of a recipe with uv to `name==version` pins with the sha256 of every file the
target accepts.

uv does the resolving (`uv pip compile --python-version --python-platform --generate-hashes
--only-binary :all: --exclude-newer`), for the target's Python and manylinux level whatever Python runs
envbuild, reading metadata through PEP 658 where the index offers it (locking torch downloads no torch).
Its pylock.toml output (PEP 751) lists, per pin, every file the target platform accepts with its hash.

Index priority is uv's: the recipe's indexes become `[[tool.uv.index]]` entries of a throw-away project,
an index with `packages` is `explicit` and those packages are pinned to it in `[tool.uv.sources]` (they
come only from it, a 404 there is "not found"); the other indexes are searched in order, first index
that has a project wins (`--index-strategy first-index`), so a higher torch on PyPI never beats the cu129
index's. uv applies sources to direct dependencies only (astral-sh/uv#8253), so a pinned package that
turns up as a transitive dependency is added as a direct one and the resolution is run again; that adds
no package, since it was in the resolution already.

`exclude_newer` (the profile's [recipe.pip] exclude_newer, an RFC 3339 time) hides every file uploaded
after it, so a re-lock months later picks the same versions: same input, byte-identical lock.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from envbuild.errors import EnvbuildError
from envbuild.lock.pip_lockfile import LockedWheel, WheelFile, render_pip_lock
from envbuild.lock.uv_cli import one_line, progress_lines, redact, run_uv, user_mirror

_ARCH_OF_CONDA = {"linux-64": "x86_64", "linux-aarch64": "aarch64", "linux-ppc64le": "ppc64le"}
# manylinux levels uv's --python-platform knows (uv 0.13): the highest one <= the node's glibc is used.
_UV_MANYLINUX = (17, 28, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40)
PYPI_HOSTS = ("pypi.org", "pypi.python.org")


def platform_tags_for(conda_platform: str, glibc: str = "2.28") -> List[str]:
    """Wheel platform tags a conda platform with this glibc accepts, most specific first
    (manylinux_2_<glibc> .. manylinux_2_17, the legacy aliases, linux_<arch>)."""
    arch = _ARCH_OF_CONDA.get(conda_platform)
    if arch is None:
        raise EnvbuildError(f"pip locking supports {', '.join(sorted(_ARCH_OF_CONDA))}, not {conda_platform!r}")
    major, minor = (int(x) for x in glibc.split(".")[:2])
    if major != 2 or minor < 17:
        raise EnvbuildError(f"glibc {glibc!r}: manylinux wheels need glibc 2.17 or newer")
    tags = [f"manylinux_2_{m}_{arch}" for m in range(minor, 16, -1)]
    tags.append(f"manylinux2014_{arch}")
    if arch == "x86_64":
        tags += ["manylinux2010_x86_64", "manylinux1_x86_64"]
    tags.append(f"linux_{arch}")
    return tags


def uv_python_platform(platform_tags: Sequence[str]) -> str:
    """uv's --python-platform for the most specific tag: manylinux_2_35_x86_64 -> x86_64-manylinux_2_35."""
    first = platform_tags[0]
    m = re.match(r"^manylinux_2_(\d+)_(x86_64|aarch64)$", first)
    if m:
        level = max(v for v in _UV_MANYLINUX if v <= int(m.group(1)))
        return f"{m.group(2)}-manylinux_2_{level}"
    m = re.match(r"^(?:manylinux2014|linux)_(x86_64|aarch64)$", first)
    if m:
        return f"{m.group(1)}-manylinux_2_17" if first.startswith("many") else f"{m.group(1)}-unknown-linux-gnu"
    raise EnvbuildError(f"uv cannot resolve for platform tag {first!r} (linux x86_64/aarch64 only)")


def target_tags(python_version: str, platform_tags: Sequence[str]) -> List[Tag]:
    """Every wheel tag a CPython `python_version` on `platform_tags` accepts, most preferred first."""
    major, minor = (int(x) for x in python_version.split(".")[:2])
    out = list(cpython_tags((major, minor), platforms=list(platform_tags)))
    out += [t for t in compatible_tags((major, minor), f"cp{major}{minor}", list(platform_tags)) if t not in out]
    return out


def _rank(filename: str, ranks: Dict[Tag, int]) -> int:
    try:
        tags = parse_wheel_filename(filename)[3]
    except InvalidWheelFilename:
        return len(ranks) + 1
    return min((ranks[t] for t in tags if t in ranks), default=len(ranks) + 1)


def isolated_pip_env() -> Dict[str, str]:
    """pip's environment without the user's pip config (for the source builds, which still run pip)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    no_proxy = ",".join(x for x in (env.get("NO_PROXY", ""), "127.0.0.1,localhost") if x)
    env["NO_PROXY"] = env["no_proxy"] = no_proxy
    return env


@dataclass(frozen=True)
class _Index:
    name: str
    url: str  # what uv is given (a user mirror may replace PyPI's url)
    packages: Tuple[str, ...]  # canonical names; empty = searched in order for everything else


def _indexes(indexes: Sequence[object]) -> List[_Index]:
    mirror = user_mirror()
    out = []
    for idx in indexes:
        url = str(getattr(idx, "url"))
        if mirror and urllib.parse.urlsplit(url).hostname in PYPI_HOSTS:
            url = mirror  # the user's PyPI mirror (UV_DEFAULT_INDEX / UV_INDEX_URL / PIP_INDEX_URL)
        name = re.sub(r"[^A-Za-z0-9_.-]", "-", str(getattr(idx, "name")))
        pkgs = tuple(sorted(str(canonicalize_name(p)) for p in getattr(idx, "packages", []) or []))
        out.append(_Index(name, url, pkgs))
    return out


def _toml_str(s: str) -> str:
    return json.dumps(s)  # a JSON string is a valid TOML basic string


def _project(reqs: Sequence[str], extra: Sequence[str], table: Sequence[_Index], python_version: str) -> str:
    """A pyproject.toml whose dependencies are the pip layer and whose uv indexes are the recipe's."""
    deps = list(reqs) + [n for n in extra]
    lines = ["[project]", 'name = "envbuild-pip-layer"', 'version = "0"',
             f"requires-python = {_toml_str('>=' + python_version)}",
             "dependencies = [" + ", ".join(_toml_str(d) for d in deps) + "]", "", "[tool.uv.sources]"]
    for idx in table:
        for pkg in idx.packages:
            lines.append(f"{_toml_str(pkg)} = {{ index = {_toml_str(idx.name)} }}")
    for idx in table:  # explicit ones only: the searched indexes go on the command line (_index_args)
        if idx.packages:
            lines += ["", "[[tool.uv.index]]", f"name = {_toml_str(idx.name)}", f"url = {_toml_str(idx.url)}",
                      "explicit = true"]
    return "\n".join(lines) + "\n"


def _index_args(table: Sequence[_Index]) -> List[str]:
    """The searched (fallback) indexes in priority order: `--index` for all but the last, which is
    `--default-index` (uv searches --index entries first, the default last). No fallback: --no-index."""
    fallbacks = [i for i in table if not i.packages]
    if not fallbacks:
        return ["--no-index"] if not table else []
    args: List[str] = []
    for idx in fallbacks[:-1]:
        args += ["--index", f"{idx.name}={idx.url}"]
    return args + ["--default-index", fallbacks[-1].url]


def _direct_names(reqs: Sequence[str]) -> Tuple[Set[str], Set[str]]:
    """(canonical names required, names required by direct URL)."""
    names, urls = set(), set()
    for r in reqs:
        try:
            req = Requirement(r)
        except InvalidRequirement as exc:
            raise EnvbuildError(f"pip requirement {r!r} is not a PEP 508 requirement: {exc}") from exc
        names.add(str(canonicalize_name(req.name)))
        if req.url:
            urls.add(str(canonicalize_name(req.name)))
    return names, urls


def _compile(project: str, args: List[str], cache_dir: Optional[Path], phase=None,
             preferences: Optional[Path] = None) -> Tuple[int, str, dict]:
    """One `uv pip compile`. `preferences`, an existing pylock.toml, is put where uv writes its output: uv then
    keeps the versions it pins wherever they still satisfy the requirements (as pip-tools and `uv lock` do)."""
    from envbuild.tomlcompat import toml

    with tempfile.TemporaryDirectory(prefix="envbuild-uvlock-") as tmp:
        (Path(tmp) / "pyproject.toml").write_text(project, encoding="utf-8")
        out = Path(tmp) / "out" / "pylock.toml"
        out.parent.mkdir()
        if preferences is not None and preferences.is_file():
            shutil.copyfile(preferences, out)
        proc = run_uv(["pip", "compile", "pyproject.toml", "--no-header", "-o", str(out), *args],
                      cwd=Path(tmp), cache_dir=cache_dir, on_line=progress_lines(phase))
        data = toml.loads(out.read_text(encoding="utf-8")) if proc.returncode == 0 and out.is_file() else {}
        return proc.returncode, proc.stderr, data


def _mentioned(stderr: str, names: Iterable[str]) -> List[str]:
    return [n for n in names if re.search(rf"(?<![A-Za-z0-9_.-]){re.escape(n)}(?![A-Za-z0-9_-])", stderr.lower())]


def resolve_pip_entries(
    requirements: Sequence[str],
    indexes: Sequence[object],
    python_version: str,
    platform_tags: Sequence[str],
    find_links: Iterable[str] = (),
    exclude_newer: Optional[str] = None,
    cache_dir: Optional[Path] = None,
    phase=None,
    preferences: Optional[Path] = None,
) -> Tuple[List[LockedWheel], List[str]]:
    """Lock `requirements` for CPython `python_version` on `platform_tags`: (entries, header lines).

    `phase` (an envbuild.progress.Phase) shows uv's progress lines while it resolves. `preferences` is the
    pylock.toml of the existing lock: its versions are kept where they still fit (None: newest before the cutoff).

    `indexes` are recipe PipIndex objects (name, url, packages) in priority order (module docstring);
    `find_links` are local wheel folders (source-built wheels) offered too. Raises EnvbuildError with
    one line naming the package or index when uv cannot resolve.
    """
    reqs = [r.strip() for r in requirements if r.strip()]
    if not reqs:
        raise EnvbuildError("the pip layer has no requirements to lock")
    if not platform_tags:
        raise EnvbuildError("resolve_pip_lock needs at least one platform tag (see platform_tags_for)")
    table = _indexes(indexes)
    links = [str(f) for f in find_links]
    direct, by_url = _direct_names(reqs)
    pinned = {p: idx for idx in reversed(table) for p in idx.packages}  # the first index naming it wins
    args = ["--python-version", python_version, "--python-platform", uv_python_platform(platform_tags),
            "--generate-hashes", "--only-binary", ":all:", "--index-strategy", "first-index"]
    if exclude_newer:
        args += ["--exclude-newer", exclude_newer]
    if table and not any(not i.packages for i in table):
        raise EnvbuildError("the pip layer needs one index without `packages` (where everything else comes "
                            "from); every index of the recipe names packages")
    args += _index_args(table)
    for link in links:
        args += ["--find-links", link]
    extra: List[str] = []
    for _attempt in range(len(pinned) + 2):
        code, stderr, data = _compile(_project(reqs, extra, table, python_version), args, cache_dir, phase,
                                       preferences)
        if code != 0:
            missing = [n for n in _mentioned(stderr, pinned) if n not in direct and n not in extra]
            if missing:  # a pinned package needed transitively was looked up on the wrong index
                extra += sorted(missing)
                continue
            raise EnvbuildError(f"uv could not resolve the pip layer: {one_line(stderr)}{_routing(stderr, pinned)}")
        resolved = {str(canonicalize_name(p["name"])) for p in data.get("packages", [])}
        missing = sorted(n for n in resolved & set(pinned) if n not in direct and n not in extra)
        if not missing:
            break
        extra += missing
    else:  # pragma: no cover - each pass adds a name, so this ends within len(pinned) + 1 passes
        raise EnvbuildError("uv: index pinning did not converge")
    ranks = {t: i for i, t in enumerate(target_tags(python_version, platform_tags))}
    entries = [_entry(p, table, pinned, by_url, ranks) for p in data.get("packages", [])]
    header = [
        "envbuild pip lock: written by `envbuild lock` (uv pip compile); install with --require-hashes --no-deps. Do not edit.",
        f"python: {python_version}",
        f"platforms: {' '.join(platform_tags)}",
        f"exclude-newer: {exclude_newer or '(none: a re-lock may pick newer uploads)'}",
    ]
    for idx in table:
        scope = ", ".join(idx.packages) if idx.packages else "(fallback)"
        header.append(f"index {idx.name}: {redact(idx.url)} -> {scope}")
    header += [f"find-links: {link}" for link in links]
    header += [f"requirement: {r}" for r in reqs]
    return entries, header


def _routing(stderr: str, pinned: Dict[str, _Index]) -> str:
    named = _mentioned(stderr, pinned)
    if not named:
        return ""
    return " [" + "; ".join(f"{n} comes only from index {pinned[n].name!r} ({redact(pinned[n].url)})"
                            for n in named) + "]"


def _entry(pkg: dict, table: Sequence[_Index], pinned: Dict[str, _Index], by_url: Set[str],
           ranks: Dict[Tag, int]) -> LockedWheel:
    name, version = str(canonicalize_name(pkg["name"])), str(pkg["version"])
    raw = list(pkg.get("wheels") or [])
    if not raw and pkg.get("archive"):
        raw = [pkg["archive"]]
    if not raw:
        raise EnvbuildError(f"{name}=={version}: uv locked no wheel for it (a source distribution only?)")
    files = []
    for w in raw:
        url = redact(str(w.get("url") or ""))
        if not url and w.get("path"):
            url = Path(w["path"]).resolve().as_uri()
        filename = str(w.get("name") or urllib.parse.unquote(url.split("#", 1)[0].rsplit("/", 1)[-1]))
        sha = str((w.get("hashes") or {}).get("sha256", ""))
        if not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise EnvbuildError(f"{name}=={version}: {filename} has no sha256 in uv's resolution")
        files.append(WheelFile(filename, url, sha))
    files.sort(key=lambda f: (_rank(f.filename, ranks), f.filename))
    best = files[0]
    if name in pinned:
        index = pinned[name].name
    elif name in by_url:
        index = "url"
    elif best.url.startswith("file:"):
        index = "find-links"
    else:
        fallbacks = [i for i in table if not i.packages]
        host = urllib.parse.urlsplit(best.url).hostname
        same = [i for i in fallbacks if urllib.parse.urlsplit(i.url).hostname == host]
        index = (same or fallbacks or [_Index("url", "", ())])[0].name
    return LockedWheel(name=name, version=version, hashes=tuple(sorted({f.sha256 for f in files})),
                       filename=best.filename, url=best.url, index=index,
                       files=tuple(sorted(files, key=lambda f: f.filename)))


def resolve_pip_lock(
    requirements: Sequence[str],
    indexes: Sequence[object],
    python_version: str,
    platform_tags: Sequence[str],
    find_links: Iterable[str] = (),
    exclude_newer: Optional[str] = None,
    cache_dir: Optional[Path] = None,
    phase=None,
) -> str:
    """The requirements.lock.txt text of resolve_pip_entries (identical input -> identical text)."""
    entries, header = resolve_pip_entries(requirements, indexes, python_version, platform_tags, find_links,
                                          exclude_newer, cache_dir, phase)
    return render_pip_lock(entries, header)
