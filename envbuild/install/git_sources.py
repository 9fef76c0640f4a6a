"""Check out a recipe's git source at its exact commit and apply its patches, idempotently.

The slime images run sglang and Megatron from git checkouts with slime's `docker/patch/<ver>/*.patch`
applied (slime's docker/Dockerfile applies docker/patch/*), so the environment is only equal to the image when the checkout is
at that commit AND every patch applied cleanly, in order.

How the patches are checked: all of them are first applied, in order, to a scratch index built from the
commit (`git apply --cached` with a private GIT_INDEX_FILE). That is `git apply --check` that also sees
what the earlier patches changed, and it never touches the working tree: the first patch that does not
apply is named with the file it fails on, and the checkout is left as it was. The scratch index also
gives the tree after each patch, which makes a rerun exact: when the working tree already matches the
last one, nothing is done; when it matches the commit or the commit plus the first k patches (a run
interrupted between two patches), the remaining patches are applied; anything else is someone's local
change, which is reported and never overwritten.
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

from envbuild.errors import EnvbuildError, InputFileError
from envbuild.leftovers import tmp_prefix

_GIT_ERROR_FILE = re.compile(r"^error: (?:patch failed: )?(.+?):(?:\d+|\s)")


class PatchDoesNotApply(EnvbuildError):
    """A recipe patch does not apply at the recipe's commit (names the patch and the file)."""

    def __init__(self, source: str, patch: str, file: str, commit: str, detail: str):
        self.source, self.patch, self.file, self.commit = source, patch, file, commit
        super().__init__(f"git source {source!r}: patch {patch} does not apply to {file} at commit {commit[:12]} "
                         f"({detail})")


def _git(args: Sequence[str], cwd: Union[str, Path], env: Optional[Dict[str, str]] = None,
         check: bool = True) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    if env:
        full_env.update(env)
    proc = subprocess.run(["git", *args], cwd=str(cwd), env=full_env, capture_output=True, text=True)
    if check and proc.returncode != 0:
        shown = [a for i, a in enumerate(args) if a != "-c" and not (i and args[i - 1] == "-c")][:3]
        raise EnvbuildError(f"git {' '.join(shown)} failed in {cwd}: {proc.stderr.strip()[-400:]}")
    return proc


def _has_commit(repo: Path, commit: str) -> bool:
    return _git(["cat-file", "-e", f"{commit}^{{commit}}"], repo, check=False).returncode == 0


# a transfer slower than 1 KB/s for a minute is a dead link: git gives up instead of hanging a create forever
_SLOW_LINK = ("-c", "http.lowSpeedLimit=1000", "-c", "http.lowSpeedTime=60")


def _fetch(repo: Path, origin: str, commit: str) -> None:
    """Fetch the pinned commit alone (`--depth 1`: seconds instead of minutes for Megatron-LM's history, and
    it works from a mirror that lacks old objects); where the server refuses a fetch by id, or the recipe
    gives an abbreviated commit, fetch branches and tags and find the commit among them."""
    if re.fullmatch(r"[0-9a-f]{40}", commit):
        _git([*_SLOW_LINK, "fetch", "--quiet", "--depth", "1", origin, commit], repo, check=False)
        if _has_commit(repo, commit):
            return
    # --update-shallow: a bundle's mirror holds the commit without its history (envbuild.pack.git_part)
    _git([*_SLOW_LINK, "fetch", "--quiet", "--tags", "--update-shallow", origin, "+refs/heads/*:refs/remotes/origin/*",
          "+refs/envbuild/*:refs/envbuild/*"], repo)
    if not _has_commit(repo, commit) and re.fullmatch(r"[0-9a-f]{40}", commit):
        _git([*_SLOW_LINK, "fetch", "--quiet", origin, commit], repo, check=False)
    if not _has_commit(repo, commit):
        raise EnvbuildError(f"commit {commit} is not in {origin} (a typo in the recipe, or a force-pushed branch?)")


def _patched_trees(repo: Path, name: str, commit: str, patches: Sequence[Path], labels: Sequence[str]) -> List[str]:
    """Apply `patches` in order to a scratch index of `commit`; return the tree before and after each one."""
    with tempfile.TemporaryDirectory(prefix=tmp_prefix("envbuild-git")) as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        _git(["read-tree", commit], repo, env)
        trees = [_git(["write-tree"], repo, env).stdout.strip()]
        for patch, label in zip(patches, labels):
            proc = _git(["apply", "--cached", "--whitespace=nowarn", str(patch)], repo, env, check=False)
            if proc.returncode != 0:
                lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
                m = next((_GIT_ERROR_FILE.match(ln) for ln in lines if _GIT_ERROR_FILE.match(ln)), None)
                raise PatchDoesNotApply(name, label, m.group(1) if m else "(unknown file)", commit,
                                        (lines[-1] if lines else proc.stderr.strip())[:300])
            trees.append(_git(["write-tree"], repo, env).stdout.strip())
        return trees


def _worktree_tree(repo: Path, commit: str, paths: List[str]) -> str:
    """Tree of `commit` with the working tree's version of `paths` (missing files removed)."""
    with tempfile.TemporaryDirectory(prefix=tmp_prefix("envbuild-git")) as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        _git(["read-tree", commit], repo, env)
        if paths:
            _git(["update-index", "--add", "--remove", "--", *paths], repo, env)
        return _git(["write-tree"], repo, env).stdout.strip()


def fetch_source(src: object, dest: Union[str, Path], profile_dir: Union[str, Path],
                 mirror_root: Optional[Union[str, Path]] = None, origin: Optional[str] = None) -> Path:
    """Make `dest` a checkout of `src.url` at `src.commit` with `src.patches` applied; return `dest`.

    `src` is a recipe GitSource (name, url, commit, patches). Patches are paths relative to `profile_dir`.
    `origin` is where to fetch from when not the source's URL (the site's git mirror, as
    envbuild.install.git_mirror located it). With `mirror_root` (a bundle's git/ folder) the commit comes
    from `<mirror_root>/<name>.git`, with no network. Rerunning on a finished checkout is a no-op; on an
    interrupted one it finishes the job.
    """
    name, commit = getattr(src, "name"), getattr(src, "commit")
    dest, profile_dir = Path(dest).absolute(), Path(profile_dir).absolute()
    labels = list(getattr(src, "patches", []) or [])
    patches = [profile_dir / p for p in labels]
    for path, label in zip(patches, labels):
        if not path.is_file():
            raise InputFileError(path, f"git source {name!r}: patch {label} listed in the recipe does not exist")
    if mirror_root is not None:
        bundled = Path(mirror_root) / f"{name}.git"
        if not bundled.is_dir():
            raise EnvbuildError(f"git source {name!r}: the bundle has no mirror {bundled}")
        origin_url = str(bundled)
    else:
        origin_url = origin or getattr(src, "url")

    if dest.exists() and any(dest.iterdir()) and not (dest / ".git").exists():
        raise EnvbuildError(f"git source {name!r}: {dest} exists and is not a git checkout; move it away")
    if not (dest / ".git").exists():
        dest.mkdir(parents=True, exist_ok=True)
        _git(["init", "--quiet"], dest)
    if not _has_commit(dest, commit):
        _fetch(dest, origin_url, commit)
    full = _git(["rev-parse", "--verify", f"{commit}^{{commit}}"], dest).stdout.strip()
    trees = _patched_trees(dest, name, full, patches, labels)  # raises before the working tree is touched
    changed: List[str] = sorted({p for t in trees[1:] for p in
                                 _git(["diff", "--name-only", "-z", trees[0], t], dest).stdout.split("\0") if p})

    done = 0  # how many patches the working tree already has
    head = _git(["rev-parse", "--verify", "-q", "HEAD"], dest, check=False).stdout.strip()
    if head == full:
        now = _worktree_tree(dest, full, changed)
        if now not in trees:
            raise EnvbuildError(f"git source {name!r}: {dest} has local changes to {', '.join(changed[:5])} that are "
                                f"neither commit {full[:12]} nor it with its patches; refusing to overwrite them")
        done = max(i for i, t in enumerate(trees) if t == now)
        if done == len(patches):
            return dest  # already at the commit with every patch applied
    else:
        dirty = _git(["status", "--porcelain", "--untracked-files=no"], dest).stdout.strip() if head else ""
        if dirty:
            raise EnvbuildError(f"git source {name!r}: {dest} is at another commit with local changes "
                                f"({dirty.splitlines()[0].strip()}, ...); refusing to switch it")
        _git(["-c", "advice.detachedHead=false", "checkout", "--quiet", "--detach", full], dest)
    for path, label in list(zip(patches, labels))[done:]:
        proc = _git(["apply", "--whitespace=nowarn", str(path)], dest, check=False)
        if proc.returncode != 0:
            m = _GIT_ERROR_FILE.match(proc.stderr.strip().splitlines()[0]) if proc.stderr.strip() else None
            raise PatchDoesNotApply(name, label, m.group(1) if m else "(unknown file)", full, proc.stderr.strip()[:300])
    return dest


def mirror_source(src: object, mirror_root: Union[str, Path], checkout: Optional[Union[str, Path]] = None) -> Path:
    """A bare mirror `<mirror_root>/<name>.git` holding `src.commit` (for bundles).

    Cloned from `checkout` (a local clone made by fetch_source) when given, so packing does not fetch the
    repository twice; otherwise from `src.url`. The commit is checked to be in the mirror.
    """
    name, commit = getattr(src, "name"), getattr(src, "commit")
    mirror = Path(mirror_root) / f"{name}.git"
    origin = str(checkout) if checkout is not None else getattr(src, "url")
    if not mirror.is_dir():
        mirror.parent.mkdir(parents=True, exist_ok=True)
        _git(["clone", "--quiet", "--mirror", origin, str(mirror)], mirror.parent)
    if not _has_commit(mirror, commit):
        if checkout is not None:  # a detached commit is on no branch: fetch it by id from the checkout
            _git(["fetch", "--quiet", origin, _git(["rev-parse", f"{commit}^{{commit}}"], checkout).stdout.strip()], mirror)
        if not _has_commit(mirror, commit):
            raise EnvbuildError(f"git source {name!r}: commit {commit} is not in {origin}")
    # pin the commit with a ref so a later `git gc` or fetch never drops it
    full = _git(["rev-parse", f"{commit}^{{commit}}"], mirror).stdout.strip()
    _git(["update-ref", f"refs/envbuild/{full}", full], mirror)
    return mirror


def _allow_filtered_fetch(repo: Path, origin: str) -> None:
    """Make a blob-less fetch from `origin` into `repo` work: a repository on this machine is served by a local
    upload-pack, which refuses filters unless told (`uploadpack.allowFilter`) and, from a shallow copy such as a
    bundle's, the blobs the checkout then asks for by id (`uploadpack.allowAnySHA1InWant`); a server decides for
    itself (and sends every blob where it ignores the filter, which only costs time)."""
    from envbuild.install.git_mirror import is_local

    if is_local(origin):
        _git(["config", "remote.origin.uploadpack",
              "git -c uploadpack.allowFilter=true -c uploadpack.allowAnySHA1InWant=true upload-pack"], repo)


def _sparse_submodule(checkout: Path, path: str, origin: str, commit: str, folders: Sequence[str]) -> None:
    """Check out submodule `path` at `commit` with only `folders` (cone mode): fetch the commit without blobs,
    set the sparse cone, check out (git fetches the cone's blobs from `origin` as it goes), then move the
    repository under the parent's .git/modules, as `git submodule update` would have put it."""
    dest = checkout / path
    dest.mkdir(parents=True, exist_ok=True)
    if not (dest / ".git").exists():
        _git(["init", "--quiet"], dest)
    _git(["config", "remote.origin.url", origin], dest)
    _allow_filtered_fetch(dest, origin)
    if not _has_commit(dest, commit):
        _git([*_SLOW_LINK, "fetch", "--quiet", "--depth", "1", "--filter=blob:none", "origin", commit], dest)
    _git(["sparse-checkout", "set", "--cone", "--", *folders], dest)
    _git(["-c", "advice.detachedHead=false", *_SLOW_LINK, "checkout", "--quiet", "--force", "--detach", commit], dest)
    _git(["submodule", "absorbgitdirs", "--", path], checkout)


def checkout_submodule(checkout: Union[str, Path], path: str, origin: str, commit: str,
                       folders: Sequence[str] = ()) -> Path:
    """Check out the submodule at `path` of `checkout` at `commit` (its gitlink), cloned from `origin`.

    A registered submodule, as `git submodule update --init` makes it, but from `origin` (the site's mirror
    when one is set) instead of the URL in .gitmodules: build scripts that run `git submodule status` or
    `update` (Transformer Engine's setup.py does) then find it initialised at the right commit and fetch
    nothing. With `folders` (the recipe's `sparse`), only those folders are checked out. Idempotent: a
    submodule already at `commit` is left as it is."""
    checkout = Path(checkout).absolute()
    dest = checkout / path
    listed = _git(["config", "-f", ".gitmodules", "--get-regexp", r"^submodule\..*\.path$"], checkout, check=False)
    names = [ln.split(" ", 1)[0][len("submodule."):-len(".path")] for ln in listed.stdout.splitlines()
             if ln.split(" ", 1)[-1].strip() == path]
    if not names:
        raise EnvbuildError(f"{checkout.name}: {path} is not a submodule in .gitmodules")
    name = names[0]
    head = _git(["rev-parse", "--verify", "-q", "HEAD"], dest, check=False).stdout.strip() if (dest / ".git").exists() else ""
    if head == commit:
        return dest
    _git(["submodule", "init", "--", path], checkout)
    _git(["config", f"submodule.{name}.url", origin], checkout)
    if folders:
        _sparse_submodule(checkout, path, origin, commit, folders)
        return dest
    _git(["-c", "protocol.file.allow=always", *_SLOW_LINK, "submodule", "update", "--checkout", "--force",
          "--depth", "1", "--", path], checkout)
    return dest
