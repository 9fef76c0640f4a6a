"""The git/ part of a bundle: one bare repository per recipe git source (and per submodule it declares),
holding the pinned commit and its history under `refs/envbuild/<full commit>`, written byte-reproducibly.

A `git clone --mirror` keeps whatever pack files the server sent plus every branch and tag of the upstream,
so two packs of the same recipe differ as soon as a branch moves or the host repacks. Here the upstream is
first mirrored into a scratch folder (git_sources.mirror_source: it resolves a short commit and checks it is
there), then only the pinned ref is fetched into a fresh bare repository made without hooks or a
description (`git init --template=`), with single-threaded delta search on the serving side (the one
source of run-to-run differences in a local fetch) and FETCH_HEAD dropped. The same scratch mirror gives
the same pack, byte for byte; its name is the pack's checksum. `create --bundle` fetches
`refs/envbuild/*` from it (git_sources.fetch_source with `mirror_root`).

Submodules (`submodules = true`): the gitlinks of the pinned commit (git_submodules.submodules_at) are
mirrored the same way, recursively, into git/submodules/<URL path>, where git_submodules.update_submodules
finds them offline.
"""
from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import List

from envbuild.errors import EnvbuildError
from envbuild.install.git_submodules import mirror_path, run_git, submodules_at


def _pinned_copy(scratch_mirror: Path, full: str, dest: Path) -> None:
    """A fresh bare repository `dest` holding `full` and its history from `scratch_mirror`, reproducibly."""
    run_git(["config", "pack.threads", "1"], scratch_mirror)  # read by the upload-pack that serves our fetch
    dest.parent.mkdir(parents=True, exist_ok=True)
    run_git(["init", "--quiet", "--bare", "--template=", "--initial-branch=main", str(dest)], dest.parent)
    ref = f"refs/envbuild/{full}"
    run_git(["-c", "fetch.unpackLimit=1", "fetch", "--quiet", "--no-tags", str(scratch_mirror), f"{ref}:{ref}"], dest)
    (dest / "FETCH_HEAD").unlink(missing_ok=True)
    if run_git(["cat-file", "-e", f"{full}^{{commit}}"], dest, check=False).returncode != 0:
        raise EnvbuildError(f"{dest}: commit {full} is missing after fetching {ref} from {scratch_mirror}")


def pack_git_source(src: object, git_dir: Path) -> List[str]:
    """Write git/<name>.git for recipe GitSource `src` (and its submodules' mirrors when it declares them);
    return the names of the mirrors written, the source's first."""
    from envbuild.install.git_sources import mirror_source

    name = getattr(src, "name")
    git_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".envbuild-pack-git-", dir=git_dir.parent) as tmp:
        try:
            scratch = mirror_source(src, Path(tmp))
        except EnvbuildError as exc:
            raise EnvbuildError(f"git source {name!r}: cannot mirror {getattr(src, 'url')} at "
                                f"{getattr(src, 'commit')}: {exc}") from exc
        full = run_git(["rev-parse", f"{getattr(src, 'commit')}^{{commit}}"], scratch).stdout.strip()
        _pinned_copy(scratch, full, git_dir / f"{name}.git")
        written = [name]
        if getattr(src, "submodules", False):
            try:
                written += _pack_submodules(scratch, full, getattr(src, "url"), git_dir, Path(tmp))
            except EnvbuildError as exc:
                raise EnvbuildError(f"git source {name!r} at {full[:12]}: {exc}") from exc
    return written


def _pack_submodules(repo: Path, commit: str, url: str, git_dir: Path, tmp: Path) -> List[str]:
    written: List[str] = []
    for sub in submodules_at(repo, commit, url):
        dest = mirror_path(git_dir, sub.url)
        if dest.is_dir():  # the same repository at another path, or shared by two sources
            if run_git(["cat-file", "-e", f"{sub.commit}^{{commit}}"], dest, check=False).returncode != 0:
                run_git(["-c", "fetch.unpackLimit=1", "fetch", "--quiet", "--no-tags", str(_scratch(sub, tmp)),
                      f"refs/envbuild/{sub.commit}:refs/envbuild/{sub.commit}"], dest)
                (dest / "FETCH_HEAD").unlink(missing_ok=True)
            continue
        scratch = _scratch(sub, tmp)
        _pinned_copy(scratch, sub.commit, dest)
        written.append(dest.relative_to(git_dir).as_posix())
        written += _pack_submodules(scratch, sub.commit, sub.url, git_dir, tmp)
    return written


def _scratch(sub, tmp: Path) -> Path:
    """The scratch mirror of a submodule's repository (cloned once per URL), holding its gitlink commit."""
    from envbuild.install.git_sources import mirror_source

    key = hashlib.sha256(sub.url.encode()).hexdigest()[:16]
    try:
        return mirror_source(SimpleNamespace(name=key, url=sub.url, commit=sub.commit), tmp / "submodules")
    except EnvbuildError as exc:
        raise EnvbuildError(f"submodule {sub.path}: cannot mirror {sub.url} at {sub.commit}: {exc}") from exc
