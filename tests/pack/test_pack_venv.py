"""`envbuild pack` of a profile with only a pip lock (the venv path) -> `create --bundle --backend venv` offline.

The profile has no conda lock (none can be made: its channel does not exist) and every other part: a pip
layer locked from a loopback index (alpha needs beta, plus real pip and setuptools wheels rebuilt from the
test interpreter's own, which the env's pip needs for source builds), a git source with two patches, a git
source with a submodule, and a C extension built from source. The recipe's git URLs are on a host that does
not exist (git.invalid); the repositories are served by a site mirror folder of bare repositories
(ENVBUILD_GIT_MIRROR), as at an air-gapped site. An online venv create fills the wheel cache; the bundle
then carries the wheels, the prebuilt wheel, bare mirrors of the sources and the submodule, and the locks.
The index server is stopped, every upstream and the mirror deleted, pip and uv pointed at a dead index and
the proxies at a dead port before `create --bundle` runs in a fresh cache.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from diskfull import file_size_cap
from envbuild.install.bundle import MANIFEST, PARTS
from fixturegen.conda_channel import FIXTURE_PROFILE
from fixturegen.gitrepos import commit, git, init_repo, make_c_extension_repo, make_patched_repo
from fixturegen.installed_wheels import wheel_of_installed
from fixturegen.wheels import make_wheel, serve, write_simple_index

DEAD = "http://127.0.0.1:9"
OFFLINE = {**{k: DEAD for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")},
           "PIP_NO_INDEX": "1", "PIP_INDEX_URL": f"{DEAD}/simple", "UV_INDEX_URL": f"{DEAD}/simple",
           "UV_OFFLINE": "1"}

RECIPE = """
[recipe.pip]
indexes = [{{ name = "fixture", url = "{index}" }}]
requirements = ["alpha", "pip", "setuptools"]
exclude_newer = "2026-06-01T00:00:00Z"

[[recipe.git]]
name = "lib"
url = "https://git.invalid/fixture/lib"
commit = "{lib_commit}"
patches = ["patches/0001-answer.patch", "patches/0002-extra.patch"]
install = "none"

[[recipe.git]]
name = "outer"
url = "https://git.invalid/fixture/outer.git"
commit = "{outer_commit}"
install = "none"
submodules = ["vendor/inner"]

[[recipe.git]]
name = "damaged"
url = "https://git.invalid/fixture/damaged"
commit = "{damaged_commit}"
install = "none"

[[recipe.git]]
name = "fastext"
url = "https://git.invalid/fixture/fastext"
commit = "{fast_commit}"
install = "build"

[[recipe.build]]
name = "fastext"
git = "fastext"

[components.fastext]
commit = "{fast_commit_short}"
pip_name = "fastext"
source = "the fixture's pin"
verified = false
severity = "warn"
"""


def envbuild(*args, env, offline=False, max_file_bytes=None):
    """`max_file_bytes`: no file the command writes may grow past it (tests/diskfull.py)."""
    full = dict(os.environ, COLUMNS="300", **env, **(OFFLINE if offline else {}))
    return subprocess.run([sys.executable, "-m", "envbuild", *args], capture_output=True, text=True, env=full,
                          timeout=600, preexec_fn=file_size_cap(max_file_bytes) if max_file_bytes else None)


def make_outer_repo(root: Path):
    """`outer` whose commit pins submodule `inner` (.gitmodules: https://git.invalid/fixture/inner.git) at
    inner's first commit; inner has a second commit on main afterwards, so the gitlink, not the branch tip,
    is what must be checked out."""
    inner = init_repo(root / "inner")
    commit(inner, {"inner_data.py": "VALUE = 'pinned'\n"}, "inner v1")
    outer = init_repo(root / "outer")
    commit(outer, {"README": "outer\n"}, "outer v0")
    git(outer, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(inner), "vendor/inner")
    git(outer, "config", "-f", ".gitmodules", "submodule.vendor/inner.url", "https://git.invalid/fixture/inner.git")
    head = commit(outer, {"outer.py": "X = 1\n"}, "outer with inner")
    commit(inner, {"inner_data.py": "VALUE = 'moved on'\n"}, "inner v2")
    return outer, head, inner


def make_damaged_repo(root: Path):
    """`damaged`: the pinned commit removed `old.txt`, which its parent added; `drop` is that blob, which the
    site mirror's copy then lacks (a partial or damaged mirror: its history cannot be served, the tree can)."""
    repo = init_repo(root / "damaged")
    commit(repo, {"old.txt": "only in the history\n"}, "old")
    drop = git(repo, "rev-parse", "HEAD:old.txt")
    (repo / "old.txt").unlink()
    head = commit(repo, {"new.txt": "the pinned tree\n"}, "new")
    return repo, head, drop


def make_site_mirror(mirror: Path, repos) -> Path:
    """A folder of bare repositories laid out as --git-mirror reads it: <mirror>/fixture/<name>.git."""
    for name, repo in repos.items():
        git(mirror.parent, "clone", "-q", "--bare", str(repo), str(mirror / "fixture" / f"{name}.git"))
    return mirror


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("packvenv")
    wheels = [make_wheel(root / "w", "alpha", "1.0", requires=["beta"]), make_wheel(root / "w", "beta", "2.0"),
              wheel_of_installed(root / "w", "pip"), wheel_of_installed(root / "w", "setuptools")]
    write_simple_index(root / "index", wheels)
    lib = make_patched_repo(root / "git")
    fast = make_c_extension_repo(root / "git", functions=2)
    outer, outer_commit, inner = make_outer_repo(root / "git")
    damaged, damaged_commit, drop = make_damaged_repo(root / "git")
    mirror = make_site_mirror(root / "site-mirror", {"lib": lib.path, "fastext": fast.path, "outer": outer,
                                                     "inner": inner, "damaged": damaged})
    folder = root / "lockfiles" / "pyonly"
    shutil.copytree(lib.patch_dir, folder)
    env = {"ENVBUILD_LOCKFILES": str(root / "lockfiles"), "ENVBUILD_CACHE_DIR": str(root / "cache"),
           "ENVBUILD_GIT_MIRROR": str(mirror)}
    with serve(root / "index") as base:
        (folder / "profile.toml").write_text(
            FIXTURE_PROFILE.format(name="pyonly", channel=(root / "nochannel").as_uri(), mark="v")
            + RECIPE.format(index=base, lib_commit=lib.commits[0], outer_commit=outer_commit,
                            damaged_commit=damaged_commit, fast_commit=fast.commits[0],
                            fast_commit_short=fast.commits[0][:8]))
        r = envbuild("lock", "--only", "pip", env=env)
        assert r.returncode == 0, r.stderr
        online = envbuild("create", "--backend", "venv", "--python", sys.executable, "--prefix",
                          str(root / "envs" / "online"), env=env)
        assert online.returncode == 0, online.stderr
        # now the mirror loses a blob of damaged's history (a loose object of the bare clone)
        (mirror / "fixture" / "damaged.git" / "objects" / drop[:2] / drop[2:]).unlink()
        packs = [envbuild("pack", "--profile", "pyonly", "-o", str(root / f"b{i}.tar"), env=env) for i in (1, 2)]
        cold = envbuild("pack", "--profile", "pyonly", "-o", str(root / "cold.tar"), "--wheel-cache",
                        str(root / "empty-wheel-cache"), env=env)
        (root / "full-disk").mkdir()
        (root / "full-disk" / "b.tar").write_bytes(b"the bundle written before")
        full_disk = [envbuild("pack", "--profile", "pyonly", "-o", str(root / "full-disk" / "b.tar"), env=env,
                              max_file_bytes=cap) for cap in (64 << 10, 6 << 20)]
        bad_epoch = envbuild("pack", "--profile", "pyonly", "-o", str(root / "full-disk" / "b.tar"),
                             env=dict(env, SOURCE_DATE_EPOCH="yesterday"))
    for r in packs + [cold]:
        assert r.returncode == 0, r.stderr
    for upstream in (root / "index", root / "w", lib.path, fast.path, outer, inner, damaged, mirror):
        shutil.rmtree(upstream)
    return {"root": root, "env": env, "bundle": root / "b1.tar", "again": root / "b2.tar", "pack": packs[0],
            "cold": cold, "cold_bundle": root / "cold.tar",
            "full_disk": full_disk, "bad_epoch": bad_epoch, "damaged_commit": damaged_commit,
            "fast_commit": fast.commits[0]}


def test_two_packs_are_byte_identical_with_fixed_metadata(world):
    assert world["bundle"].read_bytes() == world["again"].read_bytes()
    with tarfile.open(world["bundle"]) as tar:
        infos = tar.getmembers()
    assert {(i.uid, i.gid, i.uname, i.gname, i.mtime, i.pax_headers.get("mtime")) for i in infos} == {(0, 0, "", "", 0, None)}
    assert {i.mode for i in infos} <= {0o644, 0o755}
    files = [i.name for i in infos if i.isfile()]
    part = [PARTS.index(n.split("/")[0]) for n in files[1:]]
    assert files[0] == MANIFEST and files[1:] == [n for _, n in sorted(zip(part, files[1:]))]  # by part, then name
    git_files = [i.name for i in infos if i.name.startswith("git/")]
    assert not any(n.endswith(("FETCH_HEAD", ".sample", "description")) or "/logs/" in n for n in git_files)


def test_venv_bundle_layout_and_what_pack_says(world):
    with tarfile.open(world["bundle"]) as tar:
        names = set(tar.getnames())
        manifest = json.load(tar.extractfile("envbuild-bundle.json"))
    assert manifest["layers"] == ["pip"] and manifest["skipped_builds"] == []
    assert not {"pixi-pack.json", "environment.yml"} & names and not any(n.startswith("channel/") for n in names)
    assert {"pypi/alpha-1.0-py3-none-any.whl", "pypi/beta-2.0-py3-none-any.whl", "locks/pyonly/profile.toml",
            "locks/pyonly/requirements.lock.txt"} <= names
    assert any(n.startswith("pypi/pip-") for n in names) and any(n.startswith("pypi/setuptools-") for n in names)
    assert "locks/pyonly/conda-lock.yml" not in names
    for mirror in ("git/lib.git", "git/outer.git"):
        assert any(n.startswith(f"{mirror}/objects/pack/pack-") for n in names), mirror
    assert "git/outer--vendor--inner.git/HEAD" in names  # where create --bundle looks (git_mirror.bundle_repo)
    assert any(n.startswith("builds/fastext/") and n.endswith(".whl") for n in names)
    out = world["pack"].stdout
    assert "venv bundle (no conda layer)" in out and "3 wheels" not in out and "1 prebuilt source builds" in out
    assert "5 git mirrors" in out  # lib, outer, its submodule, damaged, fastext
    assert "--backend venv --python PATH" in world["pack"].stderr
    assert {f"{m}/shallow" for m in ("git/lib.git", "git/damaged.git", "git/outer--vendor--inner.git")} <= names


def test_pack_names_the_builds_left_to_compile_on_the_target(world):
    cold = world["cold"]
    assert "0 prebuilt source builds" in cold.stdout
    note = " ".join(cold.stderr.split())
    assert "no cached wheel for fastext; left to compile on the target" in note
    with tarfile.open(world["cold_bundle"]) as tar:
        manifest = json.load(tar.extractfile("envbuild-bundle.json"))
    assert manifest["skipped_builds"] == ["fastext"]


def _check_env(target: Path, damaged_commit: str) -> None:
    probe = subprocess.run([str(target / "bin" / "python"), "-c",
                            "import alpha, beta, fastext, sys; print(alpha.__version__, beta.__version__, "
                            "fastext.total(2.0) > 0, sys.prefix)"], capture_output=True, text=True)
    assert probe.stdout.split() == ["1.0", "2.0", "True", str(target)], probe.stderr
    assert (target / "src" / "lib" / "pkg" / "core.py").read_text().endswith("return 42\n")  # patches applied
    assert (target / "src" / "outer" / "vendor" / "inner" / "inner_data.py").read_text() == "VALUE = 'pinned'\n"
    assert (target / "src" / "damaged" / "new.txt").read_text() == "the pinned tree\n"  # from the history-less copy
    log = subprocess.run(["git", "-C", str(target / "src" / "damaged"), "log", "--format=%H"], capture_output=True,
                         text=True)
    assert log.stdout.split() == [damaged_commit], log.stderr  # a proper shallow checkout, not a broken one


@pytest.mark.parametrize("bundle, built_from", [("bundle", "bundle"), ("cold_bundle", "built")],
                         ids=["prebuilt-wheel", "compiled-on-target"])
def test_create_from_the_venv_bundle_offline(world, bundle, built_from):
    """A bundle with the prebuilt wheel installs it; one without it compiles the build offline from its mirror."""
    root = world["root"]
    cache = root / f"cache-{bundle}"
    env = {"ENVBUILD_CACHE_DIR": str(cache), "ENVBUILD_LOCKFILES": str(root / "nowhere"), "ENVBUILD_GIT_MIRROR": ""}
    target = root / "envs" / f"offline-{bundle}"
    r = envbuild("create", "--bundle", str(world[bundle]), "--backend", "venv", "--python", sys.executable,
                 "--prefix", str(target), env=env, offline=True)
    assert r.returncode == 0, r.stderr
    _check_env(target, world["damaged_commit"])
    manifest = json.loads((target / "envbuild" / "manifest.json").read_text())
    assert f'"from": "{built_from}"' in json.dumps(manifest)
    if built_from == "bundle":  # the prebuilt wheel, not a rebuild
        assert not (cache / "source-wheels").exists()
    # the source-built wheel says which commit it was built from, as `pip install git+URL@COMMIT` records it...
    dist_info = next((target / "lib").glob("python3*/site-packages/fastext-*.dist-info"))
    body = (dist_info / "direct_url.json").read_bytes()
    assert json.loads(body) == {"url": "https://git.invalid/fixture/fastext",
                                "vcs_info": {"vcs": "git", "commit_id": world["fast_commit"]}}
    digest = base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=").decode()
    assert f"{dist_info.name}/direct_url.json,sha256={digest},{len(body)}" in (dist_info / "RECORD").read_text()
    # ...so the doctor's side-by-side table matches it against the profile's commit (it said "unknown commit")
    report = root / f"doctor-{bundle}.json"
    doc = envbuild("doctor", "--prefix", str(target), "--profile", str(root / "lockfiles" / "pyonly" / "profile.toml"),
                   "--check", "stack.profile_match", "--json", str(report), env=env)
    rows = {r["component"]: r for r in json.loads(report.read_text())["results"][0]["evidence"]["rows"]}
    assert rows["fastext"]["verdict"] == "match", (rows["fastext"], doc.stderr[-500:])


def test_a_venv_bundle_with_a_conda_backend_says_which_backend(world, tmp_path):
    env = {"ENVBUILD_CACHE_DIR": str(tmp_path / "cache"), "ENVBUILD_LOCKFILES": str(tmp_path / "nowhere")}
    r = envbuild("create", "--bundle", str(world["bundle"]), "--backend", "rattler", "--prefix", str(tmp_path / "env"),
                 env=env, offline=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "is a venv bundle" in r.stderr and "--backend venv --python PATH, not --backend rattler" in r.stderr
    assert not (tmp_path / "env").exists()


def test_unlocked_pip_profile_is_told_the_lock_that_works_without_conda(tmp_path):
    folder = tmp_path / "lockfiles" / "pyonly"
    folder.mkdir(parents=True)
    (folder / "profile.toml").write_text(
        FIXTURE_PROFILE.format(name="pyonly", channel=(tmp_path / "nochannel").as_uri(), mark="v")
        + '\n[recipe.pip]\nindexes = [{ name = "fixture", url = "http://127.0.0.1:9/simple" }]\nrequirements = ["alpha"]\n')
    env = {"ENVBUILD_LOCKFILES": str(tmp_path / "lockfiles"), "ENVBUILD_CACHE_DIR": str(tmp_path / "cache")}
    for args in (["pack", "-o", str(tmp_path / "x.tar")], ["create", "--backend", "venv", "--python", sys.executable,
                                                            "--prefix", str(tmp_path / "env")]):
        r = envbuild(*args, env=env)
        assert r.returncode == 2, r.stderr
        assert "requirements.lock.txt does not exist" in r.stderr
        assert "run `envbuild lock --profile pyonly --only pip`" in r.stderr, r.stderr
    assert not (tmp_path / "x.tar").exists() and not (tmp_path / "env").exists()


def test_a_write_the_disk_refuses_is_one_line_and_leaves_the_old_bundle(world):
    """A file that cannot grow (a full disk or quota; here RLIMIT_FSIZE), early (64 KiB: the wheels) or late
    (6 MiB: the tar itself): exit 1, one line saying what the system said of which file, no traceback; the
    bundle written before is still there and no half bundle or scratch folder is left beside it."""
    folder = world["root"] / "full-disk"
    for r in world["full_disk"]:
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        errors = [ln for ln in r.stderr.splitlines() if ln.startswith("envbuild: error:")]
        assert len(errors) == 1 and f"cannot write {folder}/" in errors[0] and "File too large" in errors[0], r.stderr
    assert "write " + str(folder / "b.tar") in world["full_disk"][1].stderr  # the late cap failed in the tar
    assert sorted(p.name for p in folder.iterdir()) == ["b.tar"]
    assert (folder / "b.tar").read_bytes() == b"the bundle written before"


def test_a_source_date_epoch_that_is_no_number_is_named(world):
    r = world["bad_epoch"]
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "envbuild: error: SOURCE_DATE_EPOCH='yesterday' is not a whole number of seconds" in r.stderr
    assert (world["root"] / "full-disk" / "b.tar").read_bytes() == b"the bundle written before"


def test_a_git_host_that_cannot_be_reached_is_named_with_the_mirror_option_and_no_bundle(world, tmp_path):
    """Without the site mirror the recipe's host (git.invalid) does not answer: one line per source naming
    the setting to use, exit 2, before any wheel is fetched, and no bundle or scratch folder left."""
    env = dict(world["env"], ENVBUILD_GIT_MIRROR="")
    r = envbuild("pack", "--profile", "pyonly", "-o", str(tmp_path / "x.tar"), env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("envbuild: error:")]
    assert len(errors) == 1, r.stderr
    for name in ("lib", "outer", "fastext"):
        assert f"{name}: https://git.invalid/fixture/{name}" in errors[0], errors[0]
    assert "--git-mirror DIR|URL" in errors[0] and "pip: fetch" not in r.stderr
    assert not list(tmp_path.glob("x.tar*")) and not list(tmp_path.glob(".envbuild-pack-*"))
