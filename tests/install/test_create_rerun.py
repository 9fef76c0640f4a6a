"""A rerun of `envbuild create` with the same inputs reuses what it kept (envbuild.install.rerun_cache): the
doctor gate's passing verdict and the map of files the locked wheels unpacked as they were. The env it
builds is the same (same files, same manifest); any changed input, and any failing verdict, is judged afresh."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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


def envbuild(*args, env):
    return subprocess.run([sys.executable, "-m", "envbuild", *args], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, COLUMNS="300", **env))


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


def test_a_rerun_keeps_the_gate_verdict_and_builds_the_same_env(world, tmp_path):
    target = tmp_path / "env"
    first = create(world, target)
    assert KEPT not in first.stderr, first.stderr
    before = files_of(target)
    subprocess.run(["rm", "-rf", str(target)], check=True)

    second = create(world, target)
    line = gate_line(second.stderr)
    assert KEPT in line and gate_line(first.stderr).split(":", 1)[1].strip() in line, second.stderr
    after = files_of(target)
    assert after == before
    assert [f["path"] for f in after] == sorted(f["path"] for f in after)
    for f in after:  # the kept map of the wheels' files still gives each file's real sha256 and size
        if "sha256" in f:
            data = (target / f["path"]).read_bytes()
            assert (f["sha256"], f["size"]) == (hashlib.sha256(data).hexdigest(), len(data)), f["path"]
    tool = subprocess.run([str(target / "bin" / "alpha-tool")], capture_output=True, text=True)
    assert tool.stdout.strip() == "alpha-tool 1.0", tool.stderr


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
