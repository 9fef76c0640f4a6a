"""The git/ part of a bundle: one bare repository per recipe git source and per submodule it lists, holding
the pinned commit and its history under `refs/envbuild/<full commit>`, written byte-reproducibly.

Where each repository comes from is decided as for `create` (envbuild.install.git_mirror.locate: the
site's mirror from --git-mirror / $ENVBUILD_GIT_MIRROR, else the recipe's URL), and every problem (an
unreachable host, a repository or commit the mirror lacks) is reported before anything is fetched.

A `git clone --mirror` keeps whatever pack files the server sent plus every branch and tag of the upstream,
so two packs of the same recipe would differ as soon as a branch moved. Here the upstream is first mirrored
into a scratch folder (git_sources.mirror_source: it resolves a short commit and checks it is there), then
only the pinned ref is fetched into a fresh bare repository made without hooks or a description
(`git init --template=`), with single-threaded delta search on the serving side (the one source of
run-to-run differences in a local fetch) and FETCH_HEAD dropped. The same scratch mirror gives the same
pack, byte for byte; its name is the pack's checksum. Where `create --bundle` looks for each repository is
git_mirror.bundle_repo: git/<source>.git and git/<source>--<submodule path with / as -->.git.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import List, Optional, Sequence

from envbuild.errors import EnvbuildError


def _run(args: List[str], cwd: Path) -> str:
    """git `args` in `cwd`; EnvbuildError with git's last words when it fails."""
    import subprocess

    from envbuild.install.git_mirror import git_env

    proc = subprocess.run(["git", *args], cwd=str(cwd), env=git_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        raise EnvbuildError(f"git {args[0]} failed in {cwd}: {proc.stderr.strip()[-400:]}")
    return proc.stdout.strip()


def _pinned_copy(scratch_mirror: Path, full: str, dest: Path) -> None:
    """A fresh bare repository `dest` holding `full` and its history from `scratch_mirror`, reproducibly."""
    _run(["config", "pack.threads", "1"], scratch_mirror)  # read by the upload-pack that serves our fetch
    dest.parent.mkdir(parents=True, exist_ok=True)
    _run(["init", "--quiet", "--bare", "--template=", "--initial-branch=main", str(dest)], dest.parent)
    ref = f"refs/envbuild/{full}"
    _run(["-c", "fetch.unpackLimit=1", "fetch", "--quiet", "--no-tags", str(scratch_mirror), f"{ref}:{ref}"], dest)
    (dest / "FETCH_HEAD").unlink(missing_ok=True)


def _scratch(name: str, url: str, commit: str, tmp: Path) -> Path:
    """A full mirror of `url` in `tmp` holding `commit` (pinned by mirror_source under refs/envbuild/)."""
    from envbuild.install.git_sources import mirror_source

    try:
        return mirror_source(SimpleNamespace(name=name.replace("/", "--"), url=url, commit=commit), tmp)
    except EnvbuildError as exc:
        raise EnvbuildError(f"git source {name}: cannot mirror {url} at {commit}: {exc}") from exc


def pack_git_sources(sources: Sequence[object], git_dir: Path, mirror: Optional[object] = None,
                     phase_for=None) -> List[str]:
    """Write the bundle's git/ for the recipe GitSources `sources`, from where git_mirror.locate finds them
    (`mirror`: a git_mirror.GitMirror, or None for each source's URL); return the repositories written.

    `phase_for(source)` (optional) is a context manager around each source's work (a progress phase)."""
    import contextlib

    from envbuild.install import git_mirror

    origins = git_mirror.locate(sources, mirror)
    problems = [p for o in origins for p in o.all_problems()]
    if problems:
        where = (f"; set {git_mirror.OPTION} DIR|URL or ${git_mirror.ENV_VAR} to the site's git mirror"
                 if mirror is None else "")
        raise EnvbuildError("cannot mirror the git sources: " + "; ".join(problems) + where)
    written: List[str] = []
    git_dir.mkdir(parents=True, exist_ok=True)
    for src, origin in zip(sources, origins):
        with (phase_for(src) if phase_for else contextlib.nullcontext()), \
                tempfile.TemporaryDirectory(prefix=".envbuild-pack-git-", dir=git_dir.parent) as tmp:
            scratch = _scratch(origin.name, origin.url, origin.commit, Path(tmp))
            full = _run(["rev-parse", f"{origin.commit}^{{commit}}"], scratch)
            _pinned_copy(scratch, full, git_mirror.bundle_repo(git_dir, origin.name))
            written.append(origin.name)
            subs = origin.submodules
            if getattr(src, "submodules", None) and not subs:  # a remote origin: .gitmodules is known only now
                subs = git_mirror.locate_submodules_of_checkout(scratch, origin, src.submodules, mirror)
            for sub in subs:
                path = sub.name.split("/", 1)[1]
                sub_scratch = _scratch(sub.name, sub.url, sub.commit, Path(tmp) / "submodules")
                _pinned_copy(sub_scratch, sub.commit, git_mirror.bundle_repo(git_dir, origin.name, path))
                written.append(sub.name)
    return written
