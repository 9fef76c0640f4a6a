"""A rerun of `envbuild create` with the same inputs reuses what it kept (envbuild.install.rerun_cache): the
doctor gate's passing verdict, the map of files the locked wheels unpacked as they were, and the tree
relocation and the manifest found (envbuild.install.tree_cache). The env it builds is the same (same files,
same manifest); any changed input, and any failing verdict, is judged afresh."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from diskfull import file_size_cap
from fixturegen.conda_channel import FIXTURE_PROFILE
from fixturegen.wheels import make_wheel, serve, write_simple_index

from envbuild.install import doctor_gate
from envbuild.report.json_report import report_to_json
from envbuild.report.model import Report, Result, Status

PIP_ONLY = """
[recipe.pip]
indexes = [{{ name = "fixture", url = "{index}" }}]
requirements = ["alpha"]
exclude_newer = "2026-06-01T00:00:00Z"
"""
KEPT = "kept from an earlier create with the same inputs"
ROWS_KEPT = "rows kept from an earlier create with the same inputs"


def envbuild(*args, env, max_file_bytes=None):
    """`max_file_bytes`: no file the command writes may grow past it (tests/diskfull.py)."""
    return subprocess.run([sys.executable, "-m", "envbuild", *args], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, COLUMNS="300", **env),
                          preexec_fn=file_size_cap(max_file_bytes) if max_file_bytes else None)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("rerun")
    alpha = make_wheel(root / "w", "alpha", "1.0", requires=["beta"], console_scripts=["alpha-tool = alpha:main"],
                       module_text='__version__ = "1.0"\n\n\ndef main():\n    print("alpha-tool", __version__)\n')
    write_simple_index(root / "index", [alpha, make_wheel(root / "w", "beta", "2.0")])
    env = {"ENVBUILD_LOCKFILES": str(root / "lockfiles"), "ENVBUILD_CACHE_DIR": str(root / "cache")}
    with serve(root / "index") as base:
        folder = root / "lockfiles" / "pyonly"
        folder.mkdir(parents=True)
        (folder / "profile.toml").write_text(
            FIXTURE_PROFILE.format(name="pyonly", channel=(root / "nochannel").as_uri(), mark="v")
            + PIP_ONLY.format(index=base))
        r = envbuild("lock", "--only", "pip", env=env)
        assert r.returncode == 0, r.stderr
        yield {"root": root, "env": env}


def create(world, target: Path, **extra: str) -> subprocess.CompletedProcess:
    r = envbuild("create", "--backend", "venv", "--python", sys.executable, "--prefix", str(target),
                 env={**world["env"], **extra})
    assert r.returncode == 0, r.stderr
    return r


def files_of(target: Path) -> list:
    return json.loads((target / "envbuild" / "manifest.json").read_text())["files"]


def gate_line(stderr: str) -> str:
    return next(ln for ln in stderr.splitlines() if "doctor stack checks:" in ln and "done" not in ln)


def manifest_line(stderr: str) -> str:
    return next(ln for ln in stderr.splitlines() if "manifest:" in ln and "done in" in ln)


def assert_true_hashes(target: Path, files: list) -> None:
    """Every file the manifest lists is there with the sha256 and size it says, and nothing is left out."""
    for f in files:
        if "sha256" in f:
            data = (target / f["path"]).read_bytes()
            assert (f["sha256"], f["size"]) == (hashlib.sha256(data).hexdigest(), len(data)), f["path"]
    on_disk = {p.relative_to(target).as_posix() for p in target.rglob("*")
               if (p.is_file() or p.is_symlink()) and not (p.is_symlink() and p.is_dir())}  # lib64 -> lib: not listed
    listed = {f["path"] for f in files}
    assert on_disk - listed <= {"envbuild/manifest.json"}, sorted(on_disk - listed)[:5]


def test_a_rerun_keeps_the_gate_verdict_and_builds_the_same_env(world, tmp_path):
    target = tmp_path / "env"
    first = create(world, target)
    assert KEPT not in first.stderr, first.stderr
    before = files_of(target)
    subprocess.run(["rm", "-rf", str(target)], check=True)

    second = create(world, target)
    line = gate_line(second.stderr)
    assert KEPT in line and gate_line(first.stderr).split(":", 1)[1].strip() in line, second.stderr
    assert ROWS_KEPT not in manifest_line(first.stderr)
    assert ROWS_KEPT in manifest_line(second.stderr), second.stderr
    after = files_of(target)
    assert after == before
    assert [f["path"] for f in after] == sorted(f["path"] for f in after)
    assert_true_hashes(target, after)  # the kept rows still give each file's real sha256 and size
    tool = subprocess.run([str(target / "bin" / "alpha-tool")], capture_output=True, text=True)
    assert tool.stdout.strip() == "alpha-tool 1.0", tool.stderr


def test_the_kept_tree_serves_only_the_same_prefix(world, tmp_path):
    create(world, tmp_path / "one")
    other = create(world, tmp_path / "two")  # the same locks, another prefix: its own walk and manifest
    assert ROWS_KEPT not in manifest_line(other.stderr), other.stderr
    files = files_of(tmp_path / "two")
    assert json.loads((tmp_path / "two" / "envbuild" / "manifest.json").read_text())["prefix"] == str(tmp_path / "two")
    assert_true_hashes(tmp_path / "two", files)


def test_a_kept_tree_is_not_trusted_when_envbuilds_own_files_hash_otherwise(world, tmp_path):
    """The kept rows are written only when the activation files hash as they did when they were kept; an entry
    whose rows of them differ (here: edited) gives way to the long walk, and is replaced by a true one."""
    target = tmp_path / "env"
    create(world, target)
    before = files_of(target)
    entries = list((Path(world["env"]["ENVBUILD_CACHE_DIR"]) / "create-rerun" / "tree").glob("*.json"))
    assert entries
    for entry in entries:
        rewritten, own, rows = entry.read_text().split("\0")
        assert "envbuild/activate" in own
        entry.write_text("\0".join([rewritten, own.replace('"sha256": "', '"sha256": "0'), rows]))
    subprocess.run(["rm", "-rf", str(target)], check=True)
    again = create(world, target)
    assert ROWS_KEPT not in manifest_line(again.stderr), again.stderr
    assert files_of(target) == before
    subprocess.run(["rm", "-rf", str(target)], check=True)
    assert ROWS_KEPT in manifest_line(create(world, target).stderr)  # the true entry written in its place


def test_a_changed_loader_environment_is_judged_afresh(world, tmp_path):
    target = tmp_path / "env"
    create(world, target)
    subprocess.run(["rm", "-rf", str(target)], check=True)
    assert KEPT in gate_line(create(world, target).stderr)  # the same inputs: kept
    subprocess.run(["rm", "-rf", str(target)], check=True)
    other = create(world, target, LD_LIBRARY_PATH=str(tmp_path / "other-libs"))
    assert KEPT not in gate_line(other.stderr), other.stderr


def _report(status: Status) -> str:
    result = Result(check_id="stack.torch", category="stack", status=status, summary="a stand-in verdict")
    return report_to_json(Report(host={}, gpus=[], results=[result]))


@pytest.mark.parametrize("status, runs", [(Status.PASS, 1), (Status.FAIL, 2)])
def test_only_a_passing_verdict_is_kept(monkeypatch, tmp_path, status, runs):
    monkeypatch.setenv("ENVBUILD_CACHE_DIR", str(tmp_path / "cache"))
    calls = []
    monkeypatch.setattr(doctor_gate, "_run_doctor", lambda prefix, profile: calls.append(prefix) or _report(status))
    inputs = {"lock_key": "k", "prefix": str(tmp_path / "staged")}
    first = doctor_gate.run_stack_checks(tmp_path / "staged", None, inputs)
    second = doctor_gate.run_stack_checks(tmp_path / "staged", None, inputs)
    assert len(calls) == runs
    assert first.ok == second.ok == (status == Status.PASS)
    assert (second.cached, first.cached) == (status == Status.PASS, False)
    assert [r.check_id for r in second.results] == ["stack.torch"]


def test_large_kinds_keep_only_the_most_recent_entries(monkeypatch, tmp_path):
    from envbuild.install import rerun_cache

    monkeypatch.setenv("ENVBUILD_CACHE_DIR", str(tmp_path / "cache"))
    for i in range(5):
        rerun_cache.put("tree", f"k{i}", str(i))
        os.utime(tmp_path / "cache" / "create-rerun" / "tree" / f"k{i}.json", ns=(i * 10**9, i * 10**9))
    rerun_cache.prune("tree", 2)
    assert sorted(p.name for p in (tmp_path / "cache" / "create-rerun" / "tree").iterdir()) == ["k3.json", "k4.json"]
    assert rerun_cache.get("tree", "k4") == "4" and rerun_cache.get("tree", "k0") is None


def test_a_create_the_disk_refuses_leaves_the_env_it_had(world, tmp_path):
    """A rebuild into a prefix that holds an env, on a disk that fills up (no file may grow past 16 KiB:
    RLIMIT_FSIZE): one line naming what failed, no traceback, and the env that was there is there as it was.
    envbuild ignores SIGXFSZ, so its own writes fail with EFBIG; Python restores the signal's default in the
    processes it starts, so uv, writing its cache first, is killed by it, and the line must say so."""
    target = tmp_path / "env"
    create(world, target)
    before = files_of(target)
    r = envbuild("create", "--backend", "venv", "--python", sys.executable, "--prefix", str(target), "--force",
                 env={**world["env"], "ENVBUILD_CACHE_DIR": str(tmp_path / "cold")}, max_file_bytes=16 << 10)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("envbuild: error:")]
    assert len(errors) == 1 and "uv was killed by SIGXFSZ (File size limit exceeded)" in errors[0], r.stderr
    assert files_of(target) == before
    assert_true_hashes(target, before)
    # no lock file or swapped-out env left; the staging prefix stays for a rerun to resume (envbuild/install/staging.py)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".env.envbuild-staging", "cold", "env"]
