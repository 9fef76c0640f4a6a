"""Where each git source of a recipe is fetched from: its own URL, or the site's mirror.

Air-gapped sites mirror the repositories they build from (an internal git server, or a folder of bare
repositories on a shared filesystem). The mirror is one setting for every source, in the spirit of git's
`url.<base>.insteadOf`: the source URL's host is dropped and its path (`NVIDIA/apex`) is looked up under the
mirror, so a profile never names a site's mirror. The setting is `create --git-mirror` or the environment
variable ENVBUILD_GIT_MIRROR, either a URL prefix (`https://git.example.org/mirror/`) or a directory.

Under a directory mirror the repository of `https://github.com/NVIDIA/apex` is the first of
`NVIDIA/apex.git`, `NVIDIA/apex`, `github.com/NVIDIA/apex.git`, `github.com/NVIDIA/apex` that is a git
repository; under a URL prefix, the first of `<prefix>NVIDIA/apex.git` and `<prefix>NVIDIA/apex` that
answers `git ls-remote`.

Everything is checked before a create starts (and shown by --dry-run): an unreachable mirror, a repository
missing from it, a pinned commit (or a submodule's commit) it does not hold, and, where the repository is on
this machine, an object of the commit's tree that the checkout needs and the repository lacks (a mirror that
left out large files, a damaged copy: `git checkout` would stop halfway with "unable to read"). Each problem is
one line that names the source, the place looked at and the setting to change, never a failure halfway through
a build.
"""
from __future__ import annotations

import os
import re
import subprocess
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from envbuild.errors import EnvbuildError

ENV_VAR = "ENVBUILD_GIT_MIRROR"
OPTION = "--git-mirror"
LS_REMOTE_SECONDS = 20  # a mirror or git host that does not answer `git ls-remote` in this time is unreachable
_SCP_LIKE = re.compile(r"^(?:[^@/]+@)?([^:/]+):(.+)$")  # git@github.com:NVIDIA/apex.git


def git_env() -> Dict[str, str]:
    """git's environment for unattended use: never prompt for credentials, plain C messages."""
    return dict(os.environ, GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="true", LC_ALL="C")


def url_parts(url: str) -> Tuple[str, str]:
    """(host, path without .git) of a git URL: https/ssh/git/file URLs, scp-like `git@host:path`, or a path."""
    if "://" in url:
        parts = urllib.parse.urlsplit(url)
        host, path = (parts.hostname or ""), parts.path
    elif _SCP_LIKE.match(url) and not url.startswith(("/", ".")):
        m = _SCP_LIKE.match(url)
        host, path = m.group(1), m.group(2)
    else:
        host, path = "", url
    path = path.strip("/")
    if path.endswith(".git"):
        path = path[:-4]
    return host, path


def is_local(url: str) -> bool:
    """True for a path or file:// URL (a repository on this machine), False for a network URL."""
    if url.startswith("file://"):
        return True
    if "://" in url:
        return False
    return url.startswith(("/", ".", "~")) or not _SCP_LIKE.match(url)


def local_path(url: str) -> Path:
    return Path(urllib.parse.urlsplit(url).path if url.startswith("file://") else url).expanduser()


@dataclass(frozen=True)
class GitMirror:
    """The site's mirror: a URL prefix or a directory (see the module docstring for the lookup)."""

    base: str
    setting: str  # where it came from, for messages: "--git-mirror" or "ENVBUILD_GIT_MIRROR"

    @property
    def is_dir(self) -> bool:
        return is_local(self.base)

    def candidates(self, url: str) -> List[str]:
        host, path = url_parts(url)
        if self.is_dir:
            root = local_path(self.base)
            names = [f"{path}.git", path] + ([f"{host}/{path}.git", f"{host}/{path}"] if host else [])
            return [str(root / n) for n in names]
        prefix = self.base if self.base.endswith("/") else self.base + "/"
        return [f"{prefix}{path}.git", f"{prefix}{path}"]


def mirror_from(option: Optional[str]) -> Optional[GitMirror]:
    """The mirror named by --git-mirror, else by $ENVBUILD_GIT_MIRROR, else None; a directory mirror must
    exist (EnvbuildError naming the setting: exit 2 before anything is built)."""
    value, setting = (option, OPTION) if option else (os.environ.get(ENV_VAR, ""), ENV_VAR)
    value = (value or "").strip()
    if not value:
        return None
    mirror = GitMirror(base=value, setting=setting)
    if mirror.is_dir:
        root = local_path(value)
        if not root.is_dir():
            raise EnvbuildError(f"{setting} {value}: no such directory (a git mirror is a folder of bare "
                                f"repositories or a URL prefix)")
    elif urllib.parse.urlsplit(value).scheme not in ("http", "https", "ssh", "git"):
        raise EnvbuildError(f"{setting} {value!r}: not a directory or an http(s)/ssh/git URL prefix")
    return mirror


@dataclass
class Origin:
    """Where one repository (a git source or one of its submodules) will be fetched from."""

    name: str  # the recipe's source name, or `<source>/<submodule path>`
    commit: str
    url: str  # what git fetches from ("" when nothing answered)
    via: str  # "mirror", "source" (the recipe's URL), "bundle"
    problem: str = ""  # one line: why this cannot be fetched (empty: it can)
    submodules: List["Origin"] = field(default_factory=list)

    def all_problems(self) -> List[str]:
        return ([self.problem] if self.problem else []) + [p for s in self.submodules for p in s.all_problems()]


def _run_git(args: Sequence[str], timeout: Optional[float] = None, stdin: Optional[str] = None
             ) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, env=git_env(), timeout=timeout,
                              input=stdin)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(["git", *args], 124, "", f"no answer in {timeout:.0f} s")
    except OSError as exc:
        return subprocess.CompletedProcess(["git", *args], 127, "", f"cannot run git: {exc.strerror or exc}")


def _git_dir(path: Path) -> bool:
    if not path.is_dir():
        return False
    proc = _run_git(["-C", str(path), "rev-parse", "--git-dir"])
    return proc.returncode == 0


def has_commit(repo: str, commit: str) -> bool:
    return _run_git(["-C", repo, "cat-file", "-e", f"{commit}^{{commit}}"]).returncode == 0


def checkout_blobs(repo: str, commit: str, folders: Sequence[str] = ()) -> Tuple[Dict[str, str], str]:
    """({blob id: path}, error) of what a checkout of `commit` reads: the whole tree, or with `folders` what
    git's cone-mode sparse checkout takes: everything under each folder, plus the files directly in each of
    their parent directories and at the top. `error` is set (and the map empty) where a tree is unreadable."""
    if folders:
        parents = {""} | {"/".join(Path(f).parts[:k]) for f in folders for k in range(1, len(Path(f).parts))}
        runs = [["ls-tree", "-r", "--full-tree", commit, "--", *folders]]
        runs += [["ls-tree", "--full-tree", commit, *(["--", d + "/"] if d else [])] for d in sorted(parents)]
    else:
        runs = [["ls-tree", "-r", "--full-tree", commit]]
    blobs: Dict[str, str] = {}
    for args in runs:
        listing = _run_git(["-C", repo, *args])
        if listing.returncode != 0:  # a tree object itself is missing
            return {}, f"(a tree of {_short(commit)}: {(listing.stderr.strip().splitlines() or ['unreadable'])[-1][:160]})"
        for line in listing.stdout.splitlines():
            meta, _, path = line.partition("\t")
            parts = meta.split()
            if len(parts) == 3 and parts[1] == "blob":
                blobs.setdefault(parts[2], path)
    return blobs, ""


def missing_objects(repo: str, commit: str, folders: Sequence[str] = ()) -> List[str]:
    """Paths of `commit`'s tree whose objects `repo` lacks, limited to what the checkout reads (checkout_blobs).
    One `cat-file --batch-check` after the listing: under a second for tens of thousands of files."""
    blobs, error = checkout_blobs(repo, commit, folders)
    if error:
        return [error]
    if not blobs:
        return []
    check = _run_git(["-C", repo, "cat-file", "--batch-check"], stdin="\n".join(blobs) + "\n")
    if check.returncode != 0:
        return [f"({(check.stderr.strip().splitlines() or ['git cat-file failed'])[-1][:160]})"]
    return sorted(blobs[ln.split()[0]] for ln in check.stdout.splitlines() if ln.endswith(" missing"))


def _gaps_problem(name: str, repo: str, commit: str, folders: Sequence[str], fix: str) -> str:
    """One plan line for a repository that lacks objects the checkout of `commit` needs ('' when none)."""
    gaps = missing_objects(repo, commit, folders)
    if not gaps:
        return ""
    shown = ", ".join(gaps[:3]) + (f" and {len(gaps) - 3} more" if len(gaps) > 3 else "")
    return (f"{name}: {repo} holds commit {_short(commit)} but lacks {len(gaps)} file(s) of its tree that the "
            f"checkout{' of ' + ', '.join(folders) if folders else ''} needs ({shown}); {fix}")


def _answers(url: str) -> Tuple[bool, str]:
    proc = _run_git(["ls-remote", "--exit-code", "-q", url, "HEAD"], timeout=LS_REMOTE_SECONDS)
    # --exit-code gives 2 for "no matching ref": the repository answered (a mirror with no HEAD)
    if proc.returncode in (0, 2):
        return True, ""
    lines = [ln for ln in (proc.stderr or "").strip().splitlines() if ln.strip()]
    return False, (lines[-1] if lines else f"git ls-remote exited {proc.returncode}")[:200]


def _short(commit: str) -> str:
    return commit[:12]


def _locate_one(name: str, url: str, commit: str, mirror: Optional[GitMirror], folders: Sequence[str] = ()) -> Origin:
    """The Origin of one repository at `commit`, through `mirror` when one is set; `folders`: the sparse
    checkout the recipe asks for (empty: the whole tree), which is what a local repository must hold."""
    if mirror is not None:
        cands = mirror.candidates(url)
        if mirror.is_dir:
            found = next((c for c in cands if _git_dir(Path(c))), None)
            if found is None:
                return Origin(name, commit, "", "mirror", f"{name}: not in the git mirror ({mirror.setting} "
                              f"{mirror.base}): looked for {', '.join(cands)}")
            if not has_commit(found, commit):
                return Origin(name, commit, found, "mirror", f"{name}: commit {_short(commit)} is not in {found} "
                              f"(the mirror lags behind {url}? update it, or point {mirror.setting} elsewhere)")
            return Origin(name, commit, found, "mirror", _gaps_problem(
                name, found, commit, folders, f"re-mirror {url} whole, or point {mirror.setting} elsewhere"))
        why = ""
        for c in cands:
            ok, why = _answers(c)
            if ok:
                return Origin(name, commit, c, "mirror")
        return Origin(name, commit, "", "mirror", f"{name}: the git mirror ({mirror.setting} {mirror.base}) does not "
                      f"answer for {cands[0]} ({why})")
    if is_local(url):
        path = local_path(url)
        if not _git_dir(path):
            return Origin(name, commit, "", "source", f"{name}: {url} is not a git repository")
        if not has_commit(str(path), commit):
            return Origin(name, commit, str(path), "source", f"{name}: commit {_short(commit)} is not in {url}")
        return Origin(name, commit, str(path), "source",
                      _gaps_problem(name, str(path), commit, folders, "repair or re-clone it"))
    ok, why = _answers(url)
    if not ok:
        return Origin(name, commit, "", "source", f"{name}: {url} cannot be reached ({why}); at a site without "
                      f"access to it, set {OPTION} DIR|URL or {ENV_VAR} to the site's git mirror")
    return Origin(name, commit, url, "source")


def submodule_pins(repo: str, commit: str, paths: Sequence[str]) -> Dict[str, Tuple[str, str]]:
    """{path: (url, commit)} of the submodules `paths` at `commit` of the local repository `repo`: the URL from
    the commit's .gitmodules, the commit from its tree's gitlink. EnvbuildError for a path that is neither."""
    proc = _run_git(["-C", repo, "config", "--blob", f"{commit}:.gitmodules", "--get-regexp", r"^submodule\..*\.(path|url)$"])
    by_name: Dict[str, Dict[str, str]] = {}
    for line in proc.stdout.splitlines():
        key, _, value = line.partition(" ")
        m = re.match(r"^submodule\.(.*)\.(path|url)$", key)
        if m:
            by_name.setdefault(m.group(1), {})[m.group(2)] = value.strip()
    urls = {v["path"]: v.get("url", "") for v in by_name.values() if "path" in v}
    out = {}
    for path in paths:
        tree = _run_git(["-C", repo, "ls-tree", commit, "--", path]).stdout.split()
        if len(tree) < 3 or tree[1] != "commit" or not urls.get(path):
            raise EnvbuildError(f"{path} is not a submodule at commit {_short(commit)} of {repo}")
        out[path] = (urls[path], tree[2])
    return out


def bundle_repo(bundle_git_dir: Path, source: str, submodule: str = "") -> Path:
    """The bare repository of git source `source` (or of its submodule at path `submodule`) in a bundle's
    git/ folder, as `envbuild pack` writes it (envbuild.pack.git_part): <source>.git, <source>--<a--b>.git."""
    return Path(bundle_git_dir) / (f"{source}--{submodule.replace('/', '--')}.git" if submodule else f"{source}.git")


def locate(sources: Sequence[object], mirror: Optional[GitMirror], bundle_git_dir: Optional[Path] = None,
           without: Sequence[str] = ()) -> List[Origin]:
    """The Origin of every recipe git source not in `without` (and of its submodules), each checked: the
    repository answers, and where it is local (a directory mirror, a bundle) it holds the pinned commits."""
    out = []
    for src in sources:
        name, url, commit = getattr(src, "name"), getattr(src, "url"), getattr(src, "commit")
        if name in without:
            continue
        if bundle_git_dir is not None:
            repo = bundle_repo(bundle_git_dir, name)
            origin = Origin(name, commit, str(repo), "bundle")
            if not _git_dir(repo):
                origin.problem = f"{name}: the bundle has no mirror {repo}"
            elif not has_commit(str(repo), commit):
                origin.problem = f"{name}: commit {_short(commit)} is not in the bundle's mirror {repo}"
            else:
                origin.problem = _gaps_problem(name, str(repo), commit, (), "pack it again")
        else:
            origin = _locate_one(name, url, commit, mirror)
        subs = list(getattr(src, "submodules", []) or [])
        if subs and not origin.problem:
            origin.submodules = _locate_submodules(origin, subs, mirror, bundle_git_dir, getattr(src, "sparse", {}))
        out.append(origin)
    return out


def _locate_submodules(origin: Origin, paths: Sequence[str], mirror: Optional[GitMirror],
                       bundle_git_dir: Optional[Path], sparse: Optional[Dict[str, List[str]]] = None) -> List[Origin]:
    if not is_local(origin.url):  # a remote repository: its .gitmodules is read after the fetch
        return []
    try:
        pins = submodule_pins(origin.url, origin.commit, paths)
    except EnvbuildError as exc:
        return [Origin(f"{origin.name}/{p}", "", "", origin.via, f"{origin.name}: {exc}") for p in paths[:1]]
    subs = []
    for path, (url, commit) in pins.items():
        name = f"{origin.name}/{path}"
        if bundle_git_dir is not None:
            repo = bundle_repo(bundle_git_dir, origin.name, path)
            sub = Origin(name, commit, str(repo), "bundle")
            if not _git_dir(repo) or not has_commit(str(repo), commit):
                sub.problem = f"{name}: commit {_short(commit)} is not in the bundle's mirror {repo}"
            else:
                sub.problem = _gaps_problem(name, str(repo), commit, (sparse or {}).get(path, []), "pack it again")
        else:
            sub = _locate_one(name, url, commit, mirror, (sparse or {}).get(path, []))
        subs.append(sub)
    return subs


def locate_submodules_of_checkout(checkout: Path, origin: Origin, paths: Sequence[str],
                                  mirror: Optional[GitMirror], sparse: Optional[Dict[str, List[str]]] = None) -> List[Origin]:
    """The submodule Origins of a source fetched from a remote: its .gitmodules read from the checkout made
    (EnvbuildError listing what cannot be fetched)."""
    local = Origin(origin.name, origin.commit, str(checkout), origin.via)
    subs = _locate_submodules(local, paths, mirror, None, sparse)
    problems = [p for s in subs for p in s.all_problems()]
    if problems:
        raise EnvbuildError("; ".join(problems))
    return subs
