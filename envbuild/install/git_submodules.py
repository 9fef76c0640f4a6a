"""The submodules of a git source (`submodules = true` in its [[recipe.git]]), read from the commit itself.

Which submodules a checkout needs, and at which commit, is in the superproject's commit: `.gitmodules`
names each one's path and URL, and the tree holds a gitlink (mode 160000) with the submodule's commit
at that path (gitsubmodules(7)). Reading both from the commit, not from a working tree, lets `pack`
mirror exactly those commits and lets an offline `create --bundle` point each submodule at its mirror
before `git submodule update` runs, so no URL of the superproject is ever reached.

A relative URL (`../other.git`) is resolved against the superproject's URL, as git does. In a bundle a
submodule's mirror is `git/submodules/<path of its URL>` (`https://github.com/NVIDIA/cutlass.git` ->
`git/submodules/NVIDIA/cutlass.git`): one mirror per repository, shared by every source that uses it.
"""
from __future__ import annotations

import os
import posixpath
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Union
from urllib.parse import urlsplit

from envbuild.errors import EnvbuildError

SUBMODULES_DIR = "submodules"  # under a bundle's git/
_SCP_LIKE = re.compile(r"^[\w.-]+@[\w.-]+:(?!//)(.*)$")  # git@github.com:owner/repo.git


@dataclass(frozen=True)
class Submodule:
    name: str  # its name in .gitmodules (submodule.<name>.*)
    path: str  # where it sits in the superproject
    url: str  # absolute (a relative URL resolved against the superproject's)
    commit: str  # the gitlink: the full commit the superproject's commit pins


def run_git(args: List[str], cwd: Union[str, Path], check: bool = True) -> subprocess.CompletedProcess:
    """git `args` in `cwd`, never prompting; EnvbuildError with git's last words when `check` and it fails."""
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    proc = subprocess.run(["git", *args], cwd=str(cwd), env=env, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise EnvbuildError(f"git {' '.join(args[:3])} failed in {cwd}: {proc.stderr.strip()[-400:]}")
    return proc


def resolve_url(url: str, parent_url: str) -> str:
    """`url` of a submodule as git resolves it: a ./ or ../ URL is relative to the superproject's URL."""
    if not url.startswith(("./", "../")):
        return url
    base = parent_url.rstrip("/")
    scheme = urlsplit(base)
    if scheme.scheme and scheme.netloc:
        return scheme._replace(path=posixpath.normpath(posixpath.join(scheme.path, url))).geturl()
    return posixpath.normpath(posixpath.join(base, url))


def mirror_path(git_dir: Union[str, Path], url: str) -> Path:
    """Where a bundle keeps the mirror of the repository at `url`: git/submodules/<URL path>(.git)."""
    scp = _SCP_LIKE.match(url)
    path = scp.group(1) if scp else (urlsplit(url).path if "://" in url else url)
    parts = [p for p in path.split("/") if p not in ("", ".", "..")]
    if not parts:
        raise EnvbuildError(f"submodule URL {url!r} has no repository path")
    if not parts[-1].endswith(".git"):
        parts[-1] += ".git"
    return Path(git_dir) / SUBMODULES_DIR / Path(*parts)


def submodules_at(repo: Union[str, Path], commit: str, parent_url: str) -> List[Submodule]:
    """The submodules `commit` of `repo` pins, in .gitmodules order; [] when it has no .gitmodules."""
    if run_git(["cat-file", "-e", f"{commit}:.gitmodules"], repo, check=False).returncode != 0:
        return []
    listing = run_git(["config", "--blob", f"{commit}:.gitmodules", "--get-regexp", r"^submodule\..*\.(path|url)$"],
                   repo, check=False).stdout
    fields: dict = {}
    for line in listing.splitlines():
        key, _, value = line.partition(" ")
        name, _, field = key[len("submodule."):].rpartition(".")
        fields.setdefault(name, {})[field] = value
    out = []
    for name, f in fields.items():
        if "path" not in f or "url" not in f:
            raise EnvbuildError(f"{repo} at {commit[:12]}: .gitmodules entry {name!r} lacks a path or url")
        tree = run_git(["ls-tree", commit, "--", f["path"]], repo).stdout.split()
        if len(tree) < 3 or tree[0] != "160000":
            raise EnvbuildError(f"{repo} at {commit[:12]}: .gitmodules names {f['path']!r}, which is not a "
                                "submodule (gitlink) in that commit")
        out.append(Submodule(name=name, path=f["path"], url=resolve_url(f["url"], parent_url), commit=tree[2]))
    return out


def update_submodules(checkout: Union[str, Path], parent_url: str, git_dir: Optional[Union[str, Path]] = None) -> None:
    """Check out every submodule of `checkout`'s HEAD at its gitlink, recursively.

    With `git_dir` (a bundle's git/) each submodule is fetched from its mirror there, never from its URL.
    Idempotent: a submodule already at its commit is left as it is.
    """
    checkout = Path(checkout)
    subs = submodules_at(checkout, "HEAD", parent_url)
    if not subs:
        return
    run_git(["submodule", "init"], checkout)
    for sub in subs:
        url = str(mirror_path(git_dir, sub.url)) if git_dir is not None else sub.url
        if git_dir is not None and not Path(url).is_dir():
            raise EnvbuildError(f"submodule {sub.path} of {checkout}: the bundle has no mirror {url}")
        run_git(["config", f"submodule.{sub.name}.url", url], checkout)
    # file:// submodules are refused by default since git 2.38.1 (CVE-2022-39253); these are our own mirrors
    proc = run_git(["-c", "protocol.file.allow=always", "submodule", "update", "--no-recommend-shallow"], checkout,
                check=False)
    if proc.returncode != 0:
        raise EnvbuildError(f"git submodule update in {checkout} failed: {proc.stderr.strip()[-400:]}")
    for sub in subs:
        update_submodules(checkout / sub.path, sub.url, git_dir)
