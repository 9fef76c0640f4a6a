"""Git sources through the site's mirror (`create --git-mirror DIR|URL`, $ENVBUILD_GIT_MIRROR), submodules from
the same mirror, `--without NAME`: and every source that cannot be fetched named in the plan, before any work.

The recipe's URLs point at a host that does not exist (git.invalid), as on an air-gapped site: only the mirror
(a folder of bare repositories built here from the fixture repositories) can serve them."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import pytest

from fixturegen.e2e import make_world
from fixturegen.wheels import closed_port, serve


def run(args, env, **kw):
    return subprocess.run([sys.executable, "-m", "envbuild", *args], capture_output=True, text=True,
                          env=dict(os.environ, COLUMNS="300", **env), timeout=600, **kw)


def git(*args, cwd=None):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env=dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
                                   GIT_COMMITTER_EMAIL="t@t")).stdout


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The fixture world, its recipe's git URLs moved to git.invalid, a mirror folder serving them, and the
    locks made (the loopback index serves the pip layer for the whole module)."""
    root = tmp_path_factory.mktemp("gitmirror")
    world = make_world(root, c_functions=2)
    env = {"ENVBUILD_CACHE_DIR": str(root / "cache"), "ENVBUILD_LOCKFILES": str(world.lockfiles)}
    mirror = root / "mirror"
    for repo, name in ((world.lib.path, "lib"), (world.fast.path, "fastext")):
        git("clone", "--quiet", "--mirror", str(repo), str(mirror / "acme" / f"{name}.git"))
    with serve(world.index_dir) as base:
        folder = world.write_profile(base)
        profile = folder / "profile.toml"
        text = profile.read_text().replace(f'url = "{world.lib.path}"', 'url = "https://git.invalid/acme/lib"')
        profile.write_text(text.replace(f'url = "{world.fast.path}"', 'url = "https://git.invalid/acme/fastext"'))
        assert run(["lock"], env).returncode == 0
        yield {"root": root, "world": world, "env": env, "mirror": mirror}


def test_a_directory_mirror_builds_every_source_with_no_git_host(site, tmp_path):
    target = tmp_path / "env"
    r = run(["create", "--prefix", str(target), "--git-mirror", str(site["mirror"])], site["env"])
    assert r.returncode == 0, r.stderr
    assert f"git lib: https://git.invalid/acme/lib @ {site['world'].lib.commits[0][:12]}" in r.stderr
    assert f"from mirror {site['mirror'] / 'acme' / 'lib.git'}" in r.stderr
    probe = subprocess.run([str(target / "bin" / "python"), "-c", "import fastext; print('ok')"],
                           capture_output=True, text=True)
    assert probe.stdout.strip() == "ok", probe.stderr
    assert (target / "src" / "lib" / "pkg" / "extra.py").read_text() == "EXTRA = 2\n"  # patches applied
    manifest = json.loads((target / "envbuild" / "manifest.json").read_text())
    fetched = {g["name"]: g["fetched_from"] for g in manifest["layers"]["git"]}
    assert fetched == {"lib": str(site["mirror"] / "acme" / "lib.git"),
                       "fastext": str(site["mirror"] / "acme" / "fastext.git")}


def test_the_environment_variable_names_the_mirror_too(site, tmp_path):
    r = run(["create", "--prefix", str(tmp_path / "env"), "--dry-run"],
            {**site["env"], "ENVBUILD_GIT_MIRROR": str(site["mirror"])})
    assert r.returncode == 0, r.stderr
    assert f"from mirror {site['mirror'] / 'acme' / 'fastext.git'}" in r.stderr and "PROBLEM" not in r.stderr


def test_without_a_mirror_an_unreachable_host_is_a_plan_line_naming_the_option(site, tmp_path):
    r = run(["create", "--prefix", str(tmp_path / "env"), "--dry-run"], site["env"])
    assert r.returncode == 2
    problems = [ln.strip() for ln in r.stderr.splitlines() if "PROBLEM" in ln]
    assert len(problems) == 2, r.stderr
    assert problems[0].startswith("PROBLEM lib: https://git.invalid/acme/lib cannot be reached")
    assert "set --git-mirror DIR|URL or ENVBUILD_GIT_MIRROR" in problems[0]
    assert "pins no pip" not in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "env").exists()


def test_a_repository_missing_from_the_mirror_and_a_commit_it_lacks_are_named(site, tmp_path):
    mirror = tmp_path / "partial"
    git("init", "--quiet", "--bare", str(mirror / "acme" / "lib.git"))  # a repository without the pinned commit
    scratch = tmp_path / "scratch"
    git("init", "--quiet", str(scratch))
    (scratch / "x").write_text("x\n")
    git("add", "x", cwd=scratch)
    git("commit", "--quiet", "-m", "other history", cwd=scratch)
    git("push", "--quiet", str(mirror / "acme" / "lib.git"), "HEAD:refs/heads/main", cwd=scratch)
    target = tmp_path / "env"
    r = run(["create", "--prefix", str(target), "--git-mirror", str(mirror)], site["env"])
    assert r.returncode == 2
    commit = site["world"].lib.commits[0][:12]
    assert f"PROBLEM lib: commit {commit} is not in {mirror / 'acme' / 'lib.git'}" in r.stderr
    assert (f"PROBLEM fastext: not in the git mirror (--git-mirror {mirror}): looked for "
            f"{mirror / 'acme' / 'fastext.git'}") in r.stderr
    assert "2 problem(s) above; nothing was built (--git-mirror DIR|URL" in r.stderr
    assert not target.exists() and not list(tmp_path.glob(".env.envbuild-*"))


def test_an_unreachable_url_mirror_is_named(site, tmp_path):
    url = f"http://127.0.0.1:{closed_port()}/mirror/"
    r = run(["create", "--prefix", str(tmp_path / "env"), "--dry-run", "--git-mirror", url], site["env"])
    assert r.returncode == 2
    assert f"PROBLEM lib: the git mirror (--git-mirror {url}) does not answer for {url}acme/lib.git" in r.stderr


def test_a_missing_mirror_folder_and_a_bad_mirror_value_are_one_line(site, tmp_path):
    missing = run(["create", "--prefix", str(tmp_path / "env"), "--git-mirror", str(tmp_path / "nope")], site["env"])
    assert missing.returncode == 2 and f"--git-mirror {tmp_path / 'nope'}: no such directory" in missing.stderr
    bad = run(["create", "--prefix", str(tmp_path / "env"), "--dry-run"],
              {**site["env"], "ENVBUILD_GIT_MIRROR": "ftp://example.org/m"})
    assert bad.returncode == 2 and "ENVBUILD_GIT_MIRROR 'ftp://example.org/m': not a directory" in bad.stderr


def test_without_leaves_a_source_and_its_build_out(site, tmp_path):
    target = tmp_path / "env"
    mirror = tmp_path / "libonly"
    git("clone", "--quiet", "--mirror", str(site["mirror"] / "acme" / "lib.git"), str(mirror / "acme" / "lib.git"))
    r = run(["create", "--prefix", str(target), "--git-mirror", str(mirror), "--without", "fastext"], site["env"])
    assert r.returncode == 0, r.stderr
    assert "git fastext: https://git.invalid/acme/fastext" in r.stderr and "LEFT OUT (--without)" in r.stderr
    assert "source build fastext" not in r.stderr
    probe = subprocess.run([str(target / "bin" / "python"), "-c", "import fastext"], capture_output=True, text=True)
    assert probe.returncode != 0
    assert (target / "src" / "lib" / "pkg" / "extra.py").is_file() and not (target / "src" / "fastext").exists()
    typo = run(["create", "--prefix", str(tmp_path / "env2"), "--without", "fastxt"], site["env"])
    assert typo.returncode == 2 and "--without fastxt: the recipe has no git source 'fastxt'; did you mean 'fastext'?" \
        in typo.stderr


def _parent_with_submodule(tmp_path, sub_files):
    """A `sub` repository holding `sub_files` ({path: text}) and a `parent` whose vendor/sub is that submodule,
    its .gitmodules URL unreachable; returns (parent, sub, parent's commit)."""
    sub = tmp_path / "sub"
    git("init", "--quiet", str(sub))
    for rel, text in sub_files.items():
        (sub / rel).parent.mkdir(parents=True, exist_ok=True)
        (sub / rel).write_text(text)
    git("add", ".", cwd=sub)
    git("commit", "--quiet", "-m", "sub", cwd=sub)
    parent = tmp_path / "parent"
    git("init", "--quiet", str(parent))
    (parent / "setup.txt").write_text("parent\n")
    git("add", "setup.txt", cwd=parent)
    git("-c", "protocol.file.allow=always", "submodule", "add", "--quiet", str(sub), "vendor/sub", cwd=parent)
    git("config", "-f", ".gitmodules", "submodule.vendor/sub.url", "https://git.invalid/acme/sub", cwd=parent)
    git("add", ".gitmodules", cwd=parent)
    git("commit", "--quiet", "-m", "parent with a submodule", cwd=parent)
    return parent, sub, git("rev-parse", "HEAD", cwd=parent).strip()


def _with_parent_source(site, tmp_path, commit, extra=""):
    """The fixture profile plus a git source `parent` at `commit` (install none, vendor/sub listed); its env."""
    profile = site["world"].lockfiles / "fx" / "profile.toml"
    lockfiles = tmp_path / "lockfiles"
    shutil.copytree(profile.parent, lockfiles / "fx")
    (lockfiles / "fx" / "profile.toml").write_text(profile.read_text() + f"""
[[recipe.git]]
name = "parent"
url = "https://git.invalid/acme/parent"
commit = "{commit}"
install = "none"
submodules = ["vendor/sub"]
{extra}""")
    return {**site["env"], "ENVBUILD_LOCKFILES": str(lockfiles)}


def _mirror_of(tmp_path, name, repos, site):
    """A mirror folder `name` with bare copies of `repos` ({mirror name: repo}) plus the fixture's sources."""
    mirror = tmp_path / name
    for mname, repo in repos.items():
        git("clone", "--quiet", "--mirror", str(repo), str(mirror / "acme" / f"{mname}.git"))
    for repo in (site["mirror"] / "acme").iterdir():
        os.symlink(repo, mirror / "acme" / repo.name)
    return mirror


def test_submodules_come_from_the_mirror_and_are_registered(site, tmp_path):
    """A source with a submodule whose .gitmodules URL is unreachable: create checks the submodule out of the
    mirror at the gitlink's commit, registered, so `git submodule status` shows it initialised (' ')."""
    parent, sub, commit = _parent_with_submodule(tmp_path, {"kernel.h": "#define KERNEL 1\n"})
    mirror = _mirror_of(tmp_path, "m", {"parent": parent, "sub": sub}, site)
    env = _with_parent_source(site, tmp_path, commit)
    target = tmp_path / "env"
    r = run(["create", "--prefix", str(target), "--git-mirror", str(mirror), "--without", "fastext"], env)
    assert r.returncode == 0, r.stderr
    assert (target / "src" / "parent" / "vendor" / "sub" / "kernel.h").read_text() == "#define KERNEL 1\n"
    status = git("submodule", "status", cwd=target / "src" / "parent")
    assert status.startswith(" ") and "vendor/sub" in status, status
    manifest = json.loads((target / "envbuild" / "manifest.json").read_text())
    parent_rec = next(g for g in manifest["layers"]["git"] if g["name"] == "parent")
    assert parent_rec["submodules"] == {"vendor/sub": git("rev-parse", "HEAD", cwd=sub).strip()}
    missing = _mirror_of(tmp_path, "m2", {"parent": parent}, site)
    r2 = run(["create", "--prefix", str(tmp_path / "env2"), "--dry-run", "--git-mirror", str(missing)], env)
    assert r2.returncode == 2 and "PROBLEM parent/vendor/sub: not in the git mirror" in r2.stderr, r2.stderr


def _drop_blob(bare_repo, path_in_tree):
    """Delete the loose object of `path_in_tree` (on branch main) from `bare_repo`, as a mirror that left large
    files out would lack it; returns its id."""
    oid = git("rev-parse", f"refs/heads/main:{path_in_tree}", cwd=bare_repo).strip()
    (bare_repo / "objects" / oid[:2] / oid[2:]).unlink()
    return oid


def test_a_sparse_submodule_builds_from_a_mirror_that_lacks_files_outside_its_folders(site, tmp_path):
    """`sparse = {"vendor/sub" = ["include"]}`: only include/ (and the files at the submodule's top) are
    checked out, fetched without the other blobs, so a mirror lacking media/big.png (outside the folders)
    serves it; the same mirror without `sparse` is one PROBLEM line naming the missing file, before any work."""
    parent, sub, commit = _parent_with_submodule(tmp_path, {"include/k.h": "#define K 1\n", "CMakeLists.txt": "x\n",
                                                            "media/big.png": "not really a png\n"})
    mirror = tmp_path / "gappy"
    git("clone", "--quiet", "--mirror", str(parent), str(mirror / "acme" / "parent.git"))
    git("init", "--quiet", "--bare", str(mirror / "acme" / "sub.git"))
    git("push", "--quiet", str(mirror / "acme" / "sub.git"), "HEAD:refs/heads/main", cwd=sub)  # loose objects
    _drop_blob(mirror / "acme" / "sub.git", "media/big.png")
    for repo in (site["mirror"] / "acme").iterdir():
        os.symlink(repo, mirror / "acme" / repo.name)

    whole = run(["create", "--prefix", str(tmp_path / "whole"), "--dry-run", "--git-mirror", str(mirror)],
                _with_parent_source(site, tmp_path / "w", commit))
    assert whole.returncode == 2, whole.stderr
    line = next(ln.strip() for ln in whole.stderr.splitlines() if "PROBLEM parent/vendor/sub" in ln)
    assert "lacks 1 file(s) of its tree that the checkout needs (media/big.png)" in line, whole.stderr
    assert "Traceback" not in whole.stderr

    env = _with_parent_source(site, tmp_path / "s", commit, 'sparse = { "vendor/sub" = ["include"] }\n')
    target = tmp_path / "env"
    r = run(["create", "--prefix", str(target), "--git-mirror", str(mirror), "--without", "fastext"], env)
    assert r.returncode == 0, r.stderr
    assert "(vendor/sub sparse: include)" in r.stderr
    checked_out = target / "src" / "parent" / "vendor" / "sub"
    assert (checked_out / "include" / "k.h").read_text() == "#define K 1\n"
    assert (checked_out / "CMakeLists.txt").is_file() and not (checked_out / "media").exists()
    status = git("submodule", "status", cwd=target / "src" / "parent")
    assert status.startswith(" ") and "vendor/sub" in status, status  # registered, at the gitlink
    assert (checked_out / ".git").read_text().startswith("gitdir: ../../.git/modules/")  # survives the swap
    manifest = json.loads((target / "envbuild" / "manifest.json").read_text())
    parent_rec = next(g for g in manifest["layers"]["git"] if g["name"] == "parent")
    assert parent_rec["sparse"] == {"vendor/sub": ["include"]}


def test_a_sparse_key_that_is_not_a_listed_submodule_is_refused_with_its_line(site, tmp_path):
    env = _with_parent_source(site, tmp_path, "0" * 40, 'sparse = { "vendor/other" = ["include"] }\n')
    r = run(["create", "--prefix", str(tmp_path / "env"), "--dry-run"], env)
    assert r.returncode == 2
    assert "profile.toml:" in r.stderr and "'vendor/other' is not one of its submodules (vendor/sub)" in r.stderr
    assert "Traceback" not in r.stderr
