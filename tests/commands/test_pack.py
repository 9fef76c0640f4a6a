"""`envbuild pack` -> `envbuild create --bundle` with the network blocked, and open_bundle's checks.

The end-to-end profile has every layer: a local conda channel (H3's fixture packages, with a python that
is a real venv interpreter so pip installs into the prefix), a pip layer locked from a loopback index, a git
source with a patch, and a C-extension source build. The first create runs online and fills the wheel
cache; the bundle then carries the channel, wheels, git mirrors, the prebuilt wheel and the locks. The
upstreams are deleted and the proxy points at a dead port before `create --bundle` runs in a fresh cache.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from envbuild.errors import InputFileError
from envbuild.install.bundle import MANIFEST, open_bundle
from fixturegen.conda_channel import FIXTURE_PROFILE
from fixturegen.e2e import make_world
from fixturegen.wheels import serve

OFFLINE = {k: "http://127.0.0.1:9" for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")}


def run(args, env, offline=False):
    full = dict(os.environ, **env, **(OFFLINE if offline else {}))
    return subprocess.run([sys.executable, "-m", "envbuild", *args], capture_output=True, text=True, env=full,
                          timeout=300)


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    world = make_world(tmp_path_factory.mktemp("pack"))
    tmp = world.root
    env = {"ENVBUILD_CACHE_DIR": str(tmp / "cache"), "ENVBUILD_LOCKFILES": str(world.lockfiles)}
    with serve(world.index_dir) as base:
        world.write_profile(base)
        r = run(["lock"], env)
        assert r.returncode == 0, r.stderr
        online = run(["create", "--prefix", str(tmp / "envs" / "online")], env)
        assert online.returncode == 0, online.stderr
        r = run(["pack", "--profile", "fx", "-o", str(tmp / "fx.tar")], env)
        assert r.returncode == 0, r.stderr
        again = run(["pack", "--profile", "fx", "-o", str(tmp / "fx-again.tar")], env)
        assert again.returncode == 0, again.stderr
    return {"tmp": tmp, "env": env, "bundle": tmp / "fx.tar", "pack_out": r.stdout, "upstreams": world.upstreams,
            "again": tmp / "fx-again.tar"}


def test_two_packs_of_the_same_input_are_byte_identical(packed):
    assert packed["bundle"].read_bytes() == packed["again"].read_bytes()
    with tarfile.open(packed["bundle"]) as tar:
        infos = tar.getmembers()
    assert {(i.uid, i.gid, i.uname, i.gname, i.mtime) for i in infos} == {(0, 0, "", "", 0)}


def test_bundle_is_a_pixi_pack(packed):
    """What pixi-unpack reads (Quantco/pixi-pack src/unpack.rs): pixi-pack.json version 1 for this platform,
    channel/<subdir>/repodata.json listing every archive there (it installs them all: main category only),
    pypi/ wheels; optional categories stay outside channel/."""
    with tarfile.open(packed["bundle"]) as tar:
        names = set(tar.getnames())
        meta = json.load(tar.extractfile("pixi-pack.json"))
        repodata = json.load(tar.extractfile("channel/linux-64/repodata.json"))
        env_yml = tar.extractfile("environment.yml").read().decode()
    assert meta == {"version": "1", "pixi-pack-version": None, "platform": "linux-64"}
    listed = set(repodata.get("packages", {})) | set(repodata.get("packages.conda", {}))
    in_channel = {n.split("/")[-1] for n in names if n.startswith("channel/linux-64/") and not n.endswith(".json")}
    assert listed == in_channel and not any("cuda-compat" in n for n in in_channel)
    assert any(n.startswith("optional-channel/linux-64/cuda-compat-") for n in names)
    assert {"pypi/alpha-1.0-py3-none-any.whl", "pypi/beta-2.0-py3-none-any.whl"} <= names
    assert "  - ./channel" in env_yml and "  - footool=2.0=cuda129_0" in env_yml


def test_pack_reports_what_went_in(packed):
    out = packed["pack_out"]
    assert "6 conda archives" in out and "2 wheels" in out and "1 prebuilt source builds" in out
    assert "2 git mirrors" in out
    with tarfile.open(packed["bundle"]) as tar:
        names = tar.getnames()
    assert names[0] == MANIFEST
    assert {"channel/noarch/repodata.json", "channel/linux-64/repodata.json", "locks/fx/profile.toml",
            "locks/fx/conda-lock.yml", "locks/fx/requirements.lock.txt", "pypi/alpha-1.0-py3-none-any.whl", "pixi-pack.json", "environment.yml",
            "locks/fx/patches/0001-answer.patch"} <= set(names)
    assert any(n.startswith("git/lib.git/") for n in names) and any(n.startswith("builds/fastext/") for n in names)


def test_create_from_bundle_with_network_blocked(packed):
    tmp = packed["tmp"]
    for upstream in packed["upstreams"]:
        shutil.rmtree(upstream)
    env = {"ENVBUILD_CACHE_DIR": str(tmp / "fresh-cache"), "ENVBUILD_LOCKFILES": str(tmp / "nowhere")}
    target = tmp / "envs" / "offline"
    r = run(["create", "--profile", "fx", "--bundle", str(packed["bundle"]), "--prefix", str(target)], env, offline=True)
    assert r.returncode == 0, r.stderr
    python = target / "bin" / "python"
    probe = subprocess.run([str(python), "-c", "import alpha, beta, fastext; print(alpha.__version__, fastext.total(2.0) > 0)"],
                           capture_output=True, text=True)
    assert probe.stdout.split() == ["1.0", "True"], probe.stderr
    assert (target / "src" / "lib" / "pkg" / "core.py").read_text().endswith("return 42\n")
    manifest = json.loads((target / "envbuild" / "manifest.json").read_text())
    text = json.dumps(manifest)
    assert '"from": "bundle"' in text  # the prebuilt wheel came from the bundle, not a rebuild
    assert not (tmp / "fresh-cache" / "source-wheels").exists()


def _stage_bundle(tmp_path, member: str = "pypi/a.whl", data: bytes = b"wheel bytes") -> Path:
    root = tmp_path / "stage"
    (root / "locks" / "p").mkdir(parents=True)
    (root / "locks" / "p" / "profile.toml").write_text("schema = 1\n")
    (root / Path(member)).parent.mkdir(parents=True, exist_ok=True)
    (root / member).write_bytes(data)
    from envbuild.install.bundle import write_manifest, write_tar

    write_manifest(root, "p")
    write_tar(root, tmp_path / "b.tar")
    return tmp_path / "b.tar"


def _rewrite(bundle: Path, change) -> None:
    """Copy the tar member by member, letting `change(name, data)` alter or drop members."""
    out = io.BytesIO()
    with tarfile.open(bundle) as src, tarfile.open(fileobj=out, mode="w") as dst:
        for info in src:
            data = src.extractfile(info).read() if info.isfile() else None
            data = change(info.name, data)
            if data is False:
                continue
            if data is not None:
                info.size = len(data)
            dst.addfile(info, io.BytesIO(data) if data is not None else None)
    bundle.write_bytes(out.getvalue())


def test_open_bundle_verifies_every_member(tmp_path):
    bundle = _stage_bundle(tmp_path)
    layout = open_bundle(bundle, tmp_path / "ok")
    assert (layout.wheel_dir / "a.whl").read_bytes() == b"wheel bytes" and layout.lock_dir == tmp_path / "ok" / "locks"
    _rewrite(bundle, lambda name, data: b"wheel bytez" if name == "pypi/a.whl" else data)
    with pytest.raises(InputFileError) as err:
        open_bundle(bundle, tmp_path / "bad")
    assert str(err.value).startswith(str(bundle)) and "member pypi/a.whl: sha256" in str(err.value)


def test_open_bundle_refuses_unlisted_missing_and_escaping_members(tmp_path):
    bundle = _stage_bundle(tmp_path)
    original = bundle.read_bytes()
    _rewrite(bundle, lambda name, data: False if name == "pypi/a.whl" else data)
    with pytest.raises(InputFileError, match="member pypi/a.whl is listed in the manifest but missing"):
        open_bundle(bundle, tmp_path / "w1")

    bundle.write_bytes(original)
    with tarfile.open(bundle, "a") as tar:
        info = tarfile.TarInfo("pypi/evil.whl")
        info.size = 4
        tar.addfile(info, io.BytesIO(b"evil"))
    with pytest.raises(InputFileError, match="pypi/evil.whl is not in the bundle manifest"):
        open_bundle(bundle, tmp_path / "w2")

    bundle.write_bytes(original)
    with tarfile.open(bundle, "a") as tar:
        info = tarfile.TarInfo("../outside.txt")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(InputFileError, match="points outside the bundle"):
        open_bundle(bundle, tmp_path / "w3")
    assert not (tmp_path / "outside.txt").exists()


def test_pack_of_unlocked_profile_names_the_missing_lock(tmp_path):
    folder = tmp_path / "lockfiles" / "fx"
    folder.mkdir(parents=True)
    (folder / "profile.toml").write_text(FIXTURE_PROFILE.format(name="fx", channel=(tmp_path / "ch").as_uri(), mark="a"))
    r = run(["pack", "-o", str(tmp_path / "x.tar")], {"ENVBUILD_LOCKFILES": str(tmp_path / "lockfiles"),
                                                        "ENVBUILD_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 2 and "conda-lock.yml does not exist" in r.stderr and "envbuild lock" in r.stderr
    assert not (tmp_path / "x.tar").exists()


def test_build_conda_sh_creates_from_bundle_and_is_idempotent(packed, tmp_path):
    """The README's main command, offline: venv reuse, create --bundle, doctor with a JSON report."""
    repo = Path(__file__).resolve().parents[2]  # tests/commands/ -> the repository
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    for tool, line in (("python", f'exec {sys.executable} "$@"'), ("envbuild", f'exec {sys.executable} -m envbuild "$@"')):
        (venv / "bin" / tool).write_text(f"#!/bin/sh\n{line}\n")
        (venv / "bin" / tool).chmod(0o755)
    import hashlib

    (venv / ".envbuild-installed").write_text(hashlib.sha256((repo / "pyproject.toml").read_bytes()).hexdigest() + "\n")
    target = tmp_path / "env"
    env = dict(os.environ, **OFFLINE, ENVBUILD_VENV=str(venv), ENVBUILD_CACHE_DIR=str(tmp_path / "cache"),
               ENVBUILD_LOCKFILES=str(tmp_path / "none"))
    cmd = ["bash", str(repo / "build_conda.sh"), "--bundle", str(packed["bundle"]), "--prefix", str(target),
           "--json", str(tmp_path / "report.json")]
    first = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert first.returncode in (0, 1), first.stderr  # 1 = the doctor found a failure on this node; not a crash
    assert (target / "envbuild" / "manifest.json").is_file()
    report = json.loads((tmp_path / "report.json").read_text())
    assert "fx" in json.dumps(report)  # the doctor judged the env against the bundle's profile
    second = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert second.returncode == first.returncode, second.stderr
    assert "nothing to do" in second.stderr  # create found the env built from the same locks


def test_create_refuses_a_damaged_bundle_by_member(packed, tmp_path):
    bundle = tmp_path / "damaged.tar"
    shutil.copyfile(packed["bundle"], bundle)
    _rewrite(bundle, lambda name, data: data[:-1] + bytes([data[-1] ^ 1]) if name == "pypi/beta-2.0-py3-none-any.whl" else data)
    env = {"ENVBUILD_CACHE_DIR": str(tmp_path / "cache"), "ENVBUILD_LOCKFILES": str(tmp_path / "nowhere")}
    r = run(["create", "--profile", "fx", "--bundle", str(bundle), "--prefix", str(tmp_path / "env")], env, offline=True)
    assert r.returncode == 2
    assert f"{bundle}: member pypi/beta-2.0-py3-none-any.whl: sha256" in " ".join(r.stderr.split())
    assert not (tmp_path / "env").exists()


def test_pack_finds_cached_builds_of_a_short_recipe_commit(tmp_path):
    """A recipe may pin a 7-hex commit; cache entries are named by the full commit's first 12 hex."""
    from types import SimpleNamespace

    from envbuild.hashing import sha256_file
    from envbuild.pack.builder import PackSummary, _git_and_build_parts
    from envbuild.progress import Steps

    full = "0123456789abcdef0123456789abcdef01234567"
    entry = tmp_path / "cache" / "fastext" / f"{full[:12]}-{'a' * 16}"
    entry.mkdir(parents=True)
    wheel = entry / "fastext-1.0-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"wheel bytes")
    (entry / "entry.json").write_text(json.dumps({"key": {"name": "fastext", "commit": full}, "wheel": wheel.name,
                                                  "sha256": sha256_file(wheel), "build_seconds": 1.0}))
    src = SimpleNamespace(name="fast", commit=full[:7])
    recipe = SimpleNamespace(git=[], builds=[SimpleNamespace(name="fastext", git="fast")],
                             git_source=lambda name: src)
    summary = PackSummary(output=tmp_path / "out.tar")
    _git_and_build_parts(recipe, tmp_path / "stage", tmp_path / "cache", Steps("pack", quiet=True), summary)
    assert summary.builds == ["fastext"] and summary.skipped_builds == []
    assert (tmp_path / "stage" / "builds" / "fastext" / entry.name / wheel.name).read_bytes() == b"wheel bytes"
