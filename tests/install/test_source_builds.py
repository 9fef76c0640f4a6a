"""Source builds into the wheel cache: a real C extension compiled by gcc through pip, reused, verified."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from envbuild.errors import EnvbuildError
from envbuild.install.source_builds import build_key, build_or_reuse, cached_entry
from envbuild.profile.recipe import SourceBuild
from fixturegen.gitrepos import make_c_extension_repo

FACTS = {"python": "3.11", "torch": "2.11.0", "cuda": "13.0", "gpu_arch": "9.0"}
BUILD = SourceBuild(name="fastext", git="fastext", env={"FASTEXT_ARCH": "${GPU_ARCH}"})


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("srcbuild")
    repo = make_c_extension_repo(root, functions=60).path
    cache = root / "cache"
    wheel = build_or_reuse(BUILD, sys.executable, repo, cache, FACTS, extra_env={"GPU_ARCH": "sm90"})
    return {"root": root, "repo": repo, "cache": cache, "wheel": wheel}


def test_built_wheel_is_a_working_extension(built, tmp_path):
    wheel = built["wheel"]
    assert wheel.name.startswith("fastext-0.1.0-") and wheel.suffix == ".whl"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target",
                    str(tmp_path / "t"), str(wheel)], check=True)
    out = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(tmp_path / 't')!r}); "
                          "import fastext; print(fastext.total(1.0) > 0, fastext.__file__.endswith('.so'))"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"]
    meta = json.loads((wheel.parent / "entry.json").read_text())
    assert meta["key"]["torch"] == "2.11.0" and meta["key"]["gpu_arch"] == "9.0"
    assert meta["key"]["env"] == {"FASTEXT_ARCH": "${GPU_ARCH}"}


def test_second_call_reuses_the_entry(built):
    stat = built["wheel"].stat()
    again = build_or_reuse(BUILD, sys.executable, built["repo"], built["cache"], FACTS)
    assert again == built["wheel"]
    assert again.stat().st_mtime_ns == stat.st_mtime_ns and again.stat().st_ino == stat.st_ino


def test_key_changes_with_torch_arch_flags_and_patches(built):
    base = build_key(BUILD, built["repo"], FACTS)
    assert build_key(BUILD, built["repo"], {**FACTS, "torch": "2.12.0"}) != base
    assert build_key(BUILD, built["repo"], {**FACTS, "gpu_arch": "10.0"}) != base
    assert build_key(SourceBuild("fastext", "fastext", pip_args=["-v"]), built["repo"], FACTS) != base
    setup = built["repo"] / "setup.py"
    original = setup.read_text()
    setup.write_text(original + "# a local patch\n")
    try:
        assert build_key(BUILD, built["repo"], FACTS) != base
        assert cached_entry(BUILD, built["repo"], built["cache"], FACTS) is None
    finally:
        setup.write_text(original)
    assert cached_entry(BUILD, built["repo"], built["cache"], FACTS).wheel == built["wheel"]


def test_corrupt_cache_entry_is_rebuilt_not_installed(built):
    wheel = built["wheel"]
    with open(wheel, "ab") as fh:
        fh.write(b"garbage")
    assert cached_entry(BUILD, built["repo"], built["cache"], FACTS) is None
    rebuilt = build_or_reuse(BUILD, sys.executable, built["repo"], built["cache"], FACTS)
    entry = cached_entry(BUILD, built["repo"], built["cache"], FACTS)
    assert entry is not None and entry.wheel == rebuilt
    assert not rebuilt.read_bytes().endswith(b"garbage")
    assert entry.sha256 == json.loads((rebuilt.parent / "entry.json").read_text())["sha256"]


def test_failed_build_names_the_build_and_its_log_and_leaves_no_entry(tmp_path):
    repo = make_c_extension_repo(tmp_path, functions=2).path
    (repo / "fastext.c").write_text("this is not C\n")
    with pytest.raises(EnvbuildError) as err:
        build_or_reuse(BUILD, sys.executable, repo, tmp_path / "cache", FACTS)
    msg = str(err.value)
    assert "'fastext' failed" in msg and "build-failed-" in msg
    logs = list((tmp_path / "cache" / "fastext").glob("build-failed-*.log"))
    assert len(logs) == 1 and "error" in logs[0].read_text().lower()
    assert not [p for p in (tmp_path / "cache" / "fastext").iterdir() if p.is_dir()]
