"""Make an offline bundle for one profile from its locks (online, once; see bundle.py for the layout).

Every part is fetched and verified against its lock before it goes in (git sources first, so an
unreachable git host fails the pack before any archive or wheel is downloaded): conda archives through the same
fetch_and_verify create uses (sha256, also for file:// channels), wheels against the pip lock's hashes,
git mirrors checked to hold the recipe's commit, source-built wheels re-hashed from the wheel cache. The
staged tree is then hashed into the manifest and tarred; the output file appears only when complete.
Each part is a phase of the caller's envbuild.progress.Steps (files, bytes and rate as they move).
"""
from __future__ import annotations

import asyncio
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from envbuild.errors import EnvbuildError
from envbuild.progress import Steps


@dataclass
class PackSummary:
    output: Path
    conda_archives: int = 0
    wheels: int = 0
    builds: List[str] = field(default_factory=list)
    git_mirrors: List[str] = field(default_factory=list)
    size_bytes: int = 0
    skipped_builds: List[str] = field(default_factory=list)  # builds with no cached wheel for this commit
    tool_wheels: int = 0  # envbuild's own dependency wheels (pack --tool-python)
    layers: Tuple[str, ...] = ("conda", "pip")  # ("pip",): the venv bundle (no conda-lock.yml)


def bundle_layers(profile) -> Tuple[str, ...]:
    """The layers a bundle of `profile` carries: conda and pip when conda-lock.yml exists; pip alone (the
    venv bundle, for `create --bundle --backend venv`) when the profile has only a pip lock to give, as on a
    machine that reaches PyPI but no conda channel (`envbuild lock --only pip`)."""
    from envbuild.lock import condalock

    recipe = profile.require_recipe()
    if (profile.directory / condalock.LOCK_FILE).is_file() or not recipe.pip_requirements:
        return ("conda", "pip")
    return ("pip",)


def _conda_part(profile, stage: Path, steps: Steps) -> int:
    """The archives of conda-lock.yml for the recipe's first platform, verified: the main category in
    channel/ (pixi-unpack installs all of it), optional categories in optional-channel/; both indexed.
    Writes pixi-pack.json and environment.yml for pixi-unpack and conda users."""
    from envbuild.install import conda_layer
    from envbuild.lock import condalock

    lock_path = profile.directory / condalock.LOCK_FILE
    if not lock_path.is_file():
        raise EnvbuildError(f"{lock_path} does not exist; run `envbuild lock --profile {profile.name}` first")
    lock = condalock.read_lock(lock_path)
    platform = profile.require_recipe().platforms[0]
    if platform not in lock.metadata.platforms:
        raise EnvbuildError(f"{lock_path}: no packages for {platform}; run `envbuild lock --profile {profile.name}`")
    categories = sorted({p.category for p in lock.package if p.manager == "conda"})
    count = 0
    main: List = []
    for where, cats in (("channel", ["main"]), ("optional-channel", [c for c in categories if c != "main"])):
        if not cats:
            continue
        locked = condalock.locked_conda(lock, platform, cats)
        planned = conda_layer.plan(locked)
        with steps.phase(f"conda: fetch + verify {len(locked)} archives for {platform} ({', '.join(cats)})",
                         total=len(planned), unit="archives", total_bytes=conda_layer.planned_bytes(planned)) as ph:
            verified = conda_layer.fetch_and_verify(planned, phase=ph)
        channel = stage / where
        (channel / "noarch").mkdir(parents=True, exist_ok=True)  # conda channels always have noarch/
        with steps.phase(f"conda: copy into {where}/ and index it", total=len(locked), unit="archives") as ph:
            for pkg in locked:
                dest = channel / pkg.subdir / pkg.filename
                if not dest.exists():
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(verified[pkg.filename], dest)
                    ph.add_bytes(dest.stat().st_size)
                    count += 1
                ph.advance()
            from rattler.index import index_fs

            ph.detail("rattler index")
            asyncio.run(index_fs(channel, write_zst=False, write_shards=False, force=True))
            _drop_index_times(channel)
        if where == "channel":
            main = locked
    _pixi_pack_files(stage, profile.name, platform, main)
    return count


def _drop_index_times(channel: Path) -> None:
    """rattler stamps each record with the time it indexed it (`indexed_timestamp`); without it two packs of
    the same archives give the same repodata.json, byte for byte (the field is optional for every reader)."""
    import json

    for repodata in sorted(channel.glob("*/repodata.json")):
        data = json.loads(repodata.read_text(encoding="utf-8"))
        for key in ("packages", "packages.conda"):
            for record in (data.get(key) or {}).values():
                record.pop("indexed_timestamp", None)
        repodata.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def _pixi_pack_files(stage: Path, name: str, platform: str, locked: List) -> None:
    """pixi-pack.json (format 1, the platform) and an environment.yml naming ./channel, as pixi-pack writes."""
    import json

    meta = {"version": "1", "pixi-pack-version": None, "platform": platform}
    (stage / "pixi-pack.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    lines = [f"name: {name}", "channels:", "  - ./channel", "  - nodefaults", "dependencies:"]
    lines += [f"  - {p.name}={p.version}={p.build}" for p in sorted(locked, key=lambda p: p.name)]
    (stage / "environment.yml").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _wheel_part(profile, stage: Path, steps: Steps) -> int:
    """The file of every pip lock entry in pypi/, downloaded in parallel and hashed while it streams."""
    from envbuild.downloads import Download, fetch_all
    from envbuild.install.pip_layer import read_locked_entries
    from envbuild.lock.lockset import PIP_LOCK_FILE

    wheels = stage / "pypi"
    lock_path = profile.directory / PIP_LOCK_FILE
    if not lock_path.is_file():
        return 0
    wheels.mkdir(parents=True, exist_ok=True)
    entries = read_locked_entries(lock_path)
    with steps.phase(f"pip: fetch + verify {len(entries)} wheels -> pypi/", total=len(entries), unit="wheels") as ph:
        fetch_all([Download(url=e.url, dest=wheels / e.filename, sha256=tuple(e.hashes)) for e in entries], phase=ph)
    return len(entries)


def _git_and_build_parts(recipe, stage: Path, wheel_cache: Path, steps: Steps, summary: PackSummary,
                         git_mirror: Optional[object] = None) -> None:
    from envbuild.pack.git_part import pack_git_sources

    if recipe.git:
        def phase_for(src):
            subs = f" and {len(src.submodules)} submodule(s)" if src.submodules else ""
            return steps.phase(f"git: mirror {src.name} @ {src.commit[:12]}{subs}")

        summary.git_mirrors.extend(pack_git_sources(recipe.git, stage / "git", git_mirror, phase_for))
    if not recipe.builds:
        return
    with steps.phase(f"builds: prebuilt wheels of {len(recipe.builds)} source build(s) from {wheel_cache}") as ph:
        _build_part(recipe, stage, wheel_cache, summary)
        ph.result = f"{len(summary.builds)} found, {len(summary.skipped_builds)} to build on the node"


def _build_part(recipe, stage: Path, wheel_cache: Path, summary: PackSummary) -> None:
    from envbuild.install.source_builds import read_entry

    for build in recipe.builds:
        commit = recipe.git_source(build.git).commit
        found = 0
        # entries are named <full commit[:12]>-<key>; the recipe's commit may be shorter (7+ hex)
        for folder in sorted((wheel_cache / build.name).glob(f"{commit[:12]}*-*")):
            entry = read_entry(folder)
            if entry is None or not str(entry.key.get("commit", "")).startswith(commit):
                continue
            shutil.copytree(folder, stage / "builds" / build.name / folder.name)
            found += 1
        (summary.builds if found else summary.skipped_builds).append(build.name)


def _glibc(recipe) -> str:
    """The nodes' glibc from the recipe's __glibc virtual package (manylinux floor 2.17 otherwise)."""
    for v in recipe.virtual_packages:
        if v.startswith("__glibc="):
            return v.split("=")[1]
    return "2.17"


def make_bundle(profile_name: str, output: Path, lockfiles: Optional[str] = None,
                wheel_cache: Optional[Path] = None, steps: Optional[Steps] = None,
                tool_python: Optional[str] = None, tool_index: Optional[str] = None,
                git_mirror: Optional[object] = None) -> PackSummary:
    """Write the bundle of `profile_name` to `output`; return what went in. `steps` announces each part as
    a phase (None: silent).

    With `tool_python` (the nodes' bootstrap python3 version), envbuild's own dependency wheels go in too.
    `git_mirror` (an envbuild.install.git_mirror.GitMirror) is where the git sources are fetched from.
    """
    from envbuild.install.source_builds import wheel_cache_dir
    from envbuild.install.bundle import write_manifest, write_tar
    from envbuild.profile import load_profile, lockfiles_base, select_profile

    base = lockfiles_base(lockfiles)
    profile = load_profile(select_profile(base, profile_name), base)
    recipe = profile.require_recipe()
    output = Path(output).absolute()
    output.parent.mkdir(parents=True, exist_ok=True)
    summary = PackSummary(output=output)
    steps = steps or Steps("", quiet=True)
    with tempfile.TemporaryDirectory(prefix=".envbuild-pack-", dir=output.parent) as tmp:
        stage = Path(tmp)
        summary.layers = bundle_layers(profile)
        # git first: an unreachable git host fails the pack before gigabytes of archives and wheels are fetched
        _git_and_build_parts(recipe, stage, Path(wheel_cache) if wheel_cache else wheel_cache_dir(), steps, summary,
                             git_mirror)
        if "conda" in summary.layers:
            summary.conda_archives = _conda_part(profile, stage, steps)
        summary.wheels = _wheel_part(profile, stage, steps)
        if tool_python:
            from envbuild.pack.tool import PYPI, stage_tool

            repo = Path(__file__).resolve().parent.parent.parent
            with steps.phase(f"tool: lock + fetch envbuild's dependencies for Python {tool_python}",
                             unit="wheels") as ph:
                summary.tool_wheels = stage_tool(stage, repo, tool_python, _glibc(recipe), tool_index or PYPI, ph)
        shutil.copytree(profile.directory, stage / "locks" / profile.name,
                        ignore=shutil.ignore_patterns(".*", "__pycache__"))
        with steps.phase("hash the members into the manifest"):
            extra: Dict[str, object] = {"skipped_builds": summary.skipped_builds, "layers": list(summary.layers)}
            write_manifest(stage, profile.name, extra)
        with steps.phase(f"write {output}", unit="members") as ph:
            write_tar(stage, output, ph)
    summary.size_bytes = output.stat().st_size
    return summary
