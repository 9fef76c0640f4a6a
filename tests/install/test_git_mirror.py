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


def test_submodules_come_from_the_mirror_and_are_registered(site, tmp_path):
    """A source with a submodule whose .gitmodules URL is unreachable: create checks the submodule out of the
    mirror at the gitlink's commit, registered, so `git submodule status` shows it initialised (' ')."""
    sub = tmp_path / "sub"
    git("init", "--quiet", str(sub))
    (sub / "kernel.h").write_text("#define KERNEL 1\n")
    git("add", "kernel.h", cwd=sub)
    git("commit", "--quiet", "-m", "sub", cwd=sub)
    parent = tmp_path / "parent"
    git("init", "--quiet", str(parent))
    (parent / "setup.txt").write_text("parent\n")
    git("add", "setup.txt", cwd=parent)
    git("-c", "protocol.file.allow=always", "submodule", "add", "--quiet", str(sub), "vendor/sub", cwd=parent)
    git("config", "-f", ".gitmodules", "submodule.vendor/sub.url", "https://git.invalid/acme/sub", cwd=parent)
    git("add", ".gitmodules", cwd=parent)
    git("commit", "--quiet", "-m", "parent with a submodule", cwd=parent)
    commit = git("rev-parse", "HEAD", cwd=parent).strip()
    mirror = tmp_path / "m"
    for repo, name in ((parent, "parent"), (sub, "sub")):
        git("clone", "--quiet", "--mirror", str(repo), str(mirror / "acme" / f"{name}.git"))
    for repo in (site["mirror"] / "acme").iterdir():
        os.symlink(repo, mirror / "acme" / repo.name)
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
""")
    env = {**site["env"], "ENVBUILD_LOCKFILES": str(lockfiles)}
    target = tmp_path / "env"
    r = run(["create", "--prefix", str(target), "--git-mirror", str(mirror), "--without", "fastext"], env)
    assert r.returncode == 0, r.stderr
    assert (target / "src" / "parent" / "vendor" / "sub" / "kernel.h").read_text() == "#define KERNEL 1\n"
    status = git("submodule", "status", cwd=target / "src" / "parent")
    assert status.startswith(" ") and "vendor/sub" in status, status
    manifest = json.loads((target / "envbuild" / "manifest.json").read_text())
    parent_rec = next(g for g in manifest["layers"]["git"] if g["name"] == "parent")
    assert parent_rec["submodules"] == {"vendor/sub": git("rev-parse", "HEAD", cwd=sub).strip()}
    missing = tmp_path / "m2"
    git("clone", "--quiet", "--mirror", str(parent), str(missing / "acme" / "parent.git"))
    for repo in (site["mirror"] / "acme").iterdir():
        os.symlink(repo, missing / "acme" / repo.name)
    r2 = run(["create", "--prefix", str(tmp_path / "env2"), "--dry-run", "--git-mirror", str(missing)], env)
    assert r2.returncode == 2 and "PROBLEM parent/vendor/sub: not in the git mirror" in r2.stderr, r2.stderr
