"""`doctor --root BUNDLE` never reads through a link out of the bundle, caps what it reads, and names the bundle
file (and key) for metadata in the wrong shape — exit 2, never a crashed check or a traceback."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from clirun import assert_clean_error

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "bundles" / "h200x2"
SECRET = "root-only-secret-9f2c"


@pytest.fixture
def bundle(tmp_path):
    root = tmp_path / "bundle"
    shutil.copytree(FIXTURE, root)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "shadow").write_text(f"{SECRET}\n")
    (outside / "version").write_text(f"NVRM version: {SECRET}\n")
    return root


def _replay(cli, root, tmp_path):
    report = tmp_path / "r.json"
    res = cli(["doctor", "--root", str(root), "--json", str(report)])
    return res, (report.read_text() if report.exists() else "")


LINKS = {
    "absolute file link": lambda root, out: os.symlink(out / "version", root / "proc/driver/nvidia/version_x")
    or _swap(root / "proc/driver/nvidia/version", out / "version", absolute=True),
    "relative file link": lambda root, out: _swap(root / "proc/driver/nvidia/version", out / "version", absolute=False),
    "linked parent folder": lambda root, out: _swap_dir(root / "proc/driver", out),
    "link in the metadata": lambda root, out: _swap(root / ".envbuild/nvml.json", out / "shadow", absolute=True),
    "hard link": lambda root, out: _hard(root / "proc/driver/nvidia/version", out / "version"),
    "dangling link": lambda root, out: os.symlink("/nonexistent/x", root / "proc/dangling"),
}


def _swap(path: Path, target: Path, absolute: bool) -> None:
    path.unlink()
    os.symlink(target if absolute else os.path.relpath(target, path.parent), path)


def _swap_dir(path: Path, outside: Path) -> None:
    (outside / "nvidia").mkdir()
    (outside / "nvidia" / "version").write_text(f"NVRM version: {SECRET}\n")
    shutil.rmtree(path)
    os.symlink(os.path.relpath(outside, path.parent), path)


def _hard(path: Path, target: Path) -> None:
    path.unlink()
    os.link(target, path)


@pytest.mark.parametrize("how", sorted(LINKS))
def test_links_out_of_the_bundle_are_refused_by_name(cli, bundle, tmp_path, how):
    LINKS[how](bundle, tmp_path / "outside")
    res, report = _replay(cli, bundle, tmp_path)
    assert_clean_error(res, "--root", str(bundle))
    assert "link" in res.err
    assert SECRET not in res.out + res.err + report


def test_a_link_swapped_in_after_opening_is_not_followed(bundle, tmp_path):
    from envbuild.facts.source import BundleSource, FactUnavailable

    src = BundleSource(bundle)
    _swap(bundle / "proc/driver/nvidia/version", tmp_path / "outside" / "version", absolute=True)
    with pytest.raises(FactUnavailable, match="symbolic link"):
        src.read_text("/proc/driver/nvidia/version")
    _swap_dir(bundle / "proc/driver", tmp_path / "outside")
    with pytest.raises(FactUnavailable, match="symbolic link"):
        src.read_text("/proc/driver/nvidia/version")


def test_oversize_file_is_refused(cli, bundle, tmp_path, monkeypatch):
    from envbuild.facts import bundle_files

    monkeypatch.setattr(bundle_files, "MAX_FILE_BYTES", 150000)
    (bundle / "proc" / "big").write_bytes(b"x" * 200000)
    res, _ = _replay(cli, bundle, tmp_path)
    assert_clean_error(res, "proc/big", "200000 bytes")


META_DAMAGE = {
    "bundle.json is a list": (".envbuild/bundle.json", lambda d: [d]),
    "index.json is a list": (".envbuild/index.json", lambda d: [d]),
    "index.json misses absent": (".envbuild/index.json", lambda d: {k: v for k, v in d.items() if k != "absent"}),
    "index.json dirs holds a string": (".envbuild/index.json", lambda d: dict(d, dirs={"/proc": "x"})),
    "index.json unreadable is a list": (".envbuild/index.json", lambda d: dict(d, unreadable=["/x"])),
    "commands.json entry is a string": (".envbuild/commands.json", lambda d: dict(d, dmesg="boom")),
    "commands.json entry lacks stdout": (".envbuild/commands.json", lambda d: dict(d, dmesg={"returncode": 0})),
    "commands.json returncode is text": (".envbuild/commands.json",
                                         lambda d: dict(d, dmesg={"returncode": "0", "stdout": "", "stderr": ""})),
    "nvml.json is a list": (".envbuild/nvml.json", lambda d: [d]),
    "nvml devices is an object": (".envbuild/nvml.json", lambda d: {"data": dict(d["data"], devices={"0": {}})}),
    "nvml device is a string": (".envbuild/nvml.json", lambda d: {"data": dict(d["data"], devices=["gpu0"])}),
    "nvml device index is text": (".envbuild/nvml.json",
                                  lambda d: {"data": dict(d["data"], devices=[dict(d["data"]["devices"][0], index="0")])}),
    "nvml nvlink is a number": (".envbuild/nvml.json",
                                lambda d: {"data": dict(d["data"], devices=[dict(d["data"]["devices"][0], nvlink=4)])}),
    "nvml memory is a boolean": (".envbuild/nvml.json", lambda d: {"data": dict(
        d["data"], devices=[dict(d["data"]["devices"][0], memory_total_mib=True)])}),
    "nvml p2p is a list": (".envbuild/nvml.json", lambda d: {"data": dict(d["data"], p2p=[1])}),
    "stack.json data is a list": (".envbuild/stack.json", lambda d: {"data": [1, 2]}),
    "bundle.json format is text": (".envbuild/bundle.json", lambda d: dict(d, format="1")),
}


@pytest.mark.parametrize("case", sorted(META_DAMAGE))
def test_metadata_in_the_wrong_shape_names_the_file(cli, bundle, tmp_path, case):
    rel, damage = META_DAMAGE[case]
    path = bundle / rel
    path.write_text(json.dumps(damage(json.loads(path.read_text()))))
    res, _ = _replay(cli, bundle, tmp_path)
    assert_clean_error(res, rel)
    assert len(res.err.strip().splitlines()) == 1


@pytest.mark.parametrize("raw", [b"\xff\xfe{\x00}\x00", b"[" * 100000 + b"]" * 100000, b"", b"{\"format\": 1,}"])
def test_undecodable_or_deep_metadata_names_the_file(cli, bundle, tmp_path, raw):
    (bundle / ".envbuild" / "bundle.json").write_bytes(raw)
    res, _ = _replay(cli, bundle, tmp_path)
    assert_clean_error(res, ".envbuild/bundle.json")


def test_the_fixture_bundle_still_replays(cli, bundle, tmp_path):
    res, report = _replay(cli, bundle, tmp_path)
    assert res.code in (0, 1), res.err
    assert not [r for r in json.loads(report)["results"] if r["status"] == "error"]
