"""The git/ part of a bundle: one bare repository per recipe git source and per submodule it lists, holding
the pinned commit (without its history, as `create` fetches it) under `refs/envbuild/<full commit>`,
written byte-reproducibly.

Where each repository comes from is decided as for `create` (envbuild.install.git_mirror.locate: the
site's mirror from --git-mirror / $ENVBUILD_GIT_MIRROR, else the recipe's URL), and every problem (an
unreachable host, a repository or commit the mirror lacks) is reported before anything is fetched.

A `git clone --mirror` keeps whatever pack files the server sent plus every branch and tag of the upstream,
so two packs of the same recipe would differ as soon as a branch moved. Here the upstream is first mirrored
into a scratch folder (git_sources.mirror_source: it resolves a short commit and checks it is there), then
only the pinned ref, depth 1, is fetched into a fresh bare repository made without hooks or a description
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


def _git(args: List[str], cwd: Path, check: bool = True, stdin: Optional[str] = None):
    """git `args` in `cwd` (`stdin` fed to it); EnvbuildError with the subcommand and git's last words when
    `check` and it fails."""
    import subprocess

    from envbuild.install.git_mirror import git_env

    proc = subprocess.run(["git", *args], cwd=str(cwd), env=git_env(), capture_output=True, text=True, input=stdin)
    if check and proc.returncode != 0:
        raise _failed(args, cwd, proc.stderr)
    return proc


def _failed(args: List[str], cwd: Path, stderr: str) -> EnvbuildError:
    command = next(a for i, a in enumerate(args) if a != "-c" and (i == 0 or args[i - 1] != "-c"))
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    return EnvbuildError(f"git {command} failed in {cwd}: {' | '.join(lines[-3:])[-400:]}")


def _run(args: List[str], cwd: Path) -> str:
    return _git(args, cwd).stdout.strip()


def _pinned_copy(scratch_mirror: Path, full: str, dest: Path, folders: Sequence[str] = ()) -> None:
    """A fresh bare repository `dest` holding commit `full` alone (`--depth 1`, its `shallow` file naming it),
    from `scratch_mirror`, reproducibly.

    The commit alone is what `create` checks out (git_sources._fetch fetches `--depth 1` first), so a bundle
    carries no history nobody reads: Megatron-LM's is most of its size. It also packs from a mirror whose
    history lacks objects (a partial or damaged copy) as long as the commit's own tree is complete. With
    `folders` (a sparse submodule) the commit and its trees come without blobs, then only the blobs that
    create's sparse checkout of `folders` reads (git_mirror.checkout_blobs)."""
    _run(["config", "pack.threads", "1"], scratch_mirror)  # read by the upload-pack that serves our fetch
    if folders:
        _run(["config", "uploadpack.allowFilter", "true"], scratch_mirror)
    dest.parent.mkdir(parents=True, exist_ok=True)
    _run(["init", "--quiet", "--bare", "--template=", "--initial-branch=main", str(dest)], dest.parent)
    ref = f"refs/envbuild/{full}"
    source = str(scratch_mirror)
    if folders:  # a blob-less fetch needs a named remote: `dest` is a partial repository for the while
        source = "scratch"
        _run(["config", "remote.scratch.url", str(scratch_mirror)], dest)
    args = ["-c", "fetch.unpackLimit=1", "fetch", "--quiet", "--no-tags", "--depth=1",
            *(["--filter=blob:none"] if folders else []), source, f"{ref}:{ref}"]
    proc = _git(args, dest, check=False)
    if proc.returncode != 0:
        unreadable = [ln.split("unable to read", 1)[1].split() for ln in proc.stderr.splitlines() if "unable to read" in ln]
        if unreadable and unreadable[0]:
            raise EnvbuildError(f"its repository lacks object {unreadable[0][0]} of the commit's own tree (a partial "
                                "or damaged mirror): re-fetch or repair it")
        raise _failed(args, dest, proc.stderr)
    if folders:
        _fetch_checkout_blobs(full, dest, folders)
        # the scratch mirror is gone after packing: the bundle names no remote (its config stays reproducible)
        _run(["config", "--remove-section", "remote.scratch"], dest)
        _git(["config", "--unset", "extensions.partialclone"], dest, check=False)
    (dest / "FETCH_HEAD").unlink(missing_ok=True)


def _fetch_checkout_blobs(full: str, dest: Path, folders: Sequence[str]) -> None:
    """Fetch into `dest` (its trees are there already) the blobs that a sparse checkout of `folders` at commit
    `full` reads, by id from its `scratch` remote, as git's own lazy fetch of a partial clone asks for them."""
    from envbuild.install.git_mirror import checkout_blobs

    blobs, error = checkout_blobs(str(dest), full, folders)
    if error:
        raise EnvbuildError(error)
    if not blobs:
        return
    args = ["-c", "fetch.unpackLimit=1", "-c", "fetch.negotiationAlgorithm=noop", "fetch", "--quiet", "--no-tags",
            "--no-write-fetch-head", "--filter=blob:none", "--stdin", "scratch"]
    _git(args, dest, stdin="\n".join(sorted(blobs)) + "\n")


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
            _copy(scratch, full, git_mirror.bundle_repo(git_dir, origin.name), origin.name)
            written.append(origin.name)
            subs = origin.submodules
            if getattr(src, "submodules", None) and not subs:  # a remote origin: .gitmodules is known only now
                subs = git_mirror.locate_submodules_of_checkout(scratch, origin, src.submodules, mirror,
                                                                getattr(src, "sparse", {}))
            for sub in subs:
                path = sub.name.split("/", 1)[1]
                sub_scratch = _scratch(sub.name, sub.url, sub.commit, Path(tmp) / "submodules")
                _copy(sub_scratch, sub.commit, git_mirror.bundle_repo(git_dir, origin.name, path), sub.name,
                      getattr(src, "sparse", {}).get(path, []))
                written.append(sub.name)
    return written


def _copy(scratch: Path, full: str, dest: Path, name: str, folders: Sequence[str] = ()) -> None:
    """_pinned_copy naming the repository in its errors."""
    try:
        _pinned_copy(scratch, full, dest, folders)
    except EnvbuildError as exc:
        raise EnvbuildError(f"git source {name}: cannot bundle commit {full[:12]}: {exc}") from exc
