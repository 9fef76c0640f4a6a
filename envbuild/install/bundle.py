"""The offline bundle: one tar file that lets `envbuild create --bundle` run with no network.

Two layouts (docs/bundles.md): the conda bundle below, and the venv bundle of a profile with only a pip
lock (manifest `layers: ["pip"]`): the same parts without pixi-pack.json, environment.yml and the
channels, for `create --bundle --backend venv --python PATH`. git/ also holds git/<source>--<path>.git
for each submodule a source lists (envbuild.install.git_mirror.bundle_repo).

Layout: a pixi-pack bundle (what `pixi-unpack environment.tar` reads: pixi-pack.json, environment.yml,
channel/<subdir>/ with repodata.json, pypi/*.whl; Quantco/pixi-pack src/lib.rs, src/unpack.rs) with the
parts the slime stack needs beside it, which pixi-unpack ignores:

    pixi-pack.json              {"version": "1", "pixi-pack-version": null, "platform": "<subdir>"}
    environment.yml             channels: [./channel], the main category's packages pinned name=version=build
    channel/<subdir>/...        the main category's conda archives, indexed by rattler (repodata.json per subdir):
                                pixi-unpack installs every package in channel/, so only those
    pypi/*.whl                  the file of each pip lock entry (pixi-unpack installs them all with uv)
    envbuild-bundle.json        format, profile, and the sha256 + size of every other member
    optional-channel/<subdir>/  the optional conda categories (cuda-compat), for `envbuild create --bundle`
    builds/<name>/<entry>/      source-built wheels, same layout as the wheel cache (entry.json + wheel)
    git/<name>.git/             bare mirrors holding each git source's commit (envbuild/pack/git_part.py)
    locks/<profile>/            the profile folder: profile.toml, conda-lock.yml, the pip locks, patches
    tool/                       (with pack --tool-python) envbuild's own dependency wheels + their lock

Byte-reproducible: members sorted, every mtime SOURCE_DATE_EPOCH (default 0), uid/gid 0 with no names,
modes 0644/0755, PAX headers without times; the same inputs give the same tar, byte for byte.

`open_bundle` extracts it safely (no absolute paths, no `..`, no links leaving the tree, no devices) and
checks every member against the manifest before anything is used: a bundle carried across an air gap on a
USB disk or a flaky copy must fail loudly, naming the damaged member, not install half of itself.
"""
from __future__ import annotations

import json
import os
import shutil
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Dict, Iterator, Optional, Tuple, Union

from envbuild.errors import EnvbuildError, InputFileError
from envbuild.fsutil import naming
from envbuild.hashing import sha256_file

BUNDLE_FORMAT = 2  # 2: the pixi-pack layout (pypi/, pixi-pack.json, environment.yml, optional-channel/)
MANIFEST = "envbuild-bundle.json"
MANIFEST_MAX_BYTES = 64 * 2**20  # a manifest of 100 000 members is about 15 MB
PIXI_PACK_METADATA = "pixi-pack.json"
PIXI_ENV_SPEC = "environment.yml"
ROOT_FILES = (PIXI_PACK_METADATA, PIXI_ENV_SPEC)  # hashed into the manifest like the parts' files
_EXTRACTED_MARK = ".envbuild-extracted"  # written in the workdir after a complete, verified extraction
PARTS = ("channel", "optional-channel", "pypi", "builds", "git", "locks", "tool")


@dataclass(frozen=True)
class BundleLayout:
    """Where the parts of an opened (extracted and verified) bundle are.

    `envbuild create --bundle` uses: channel_dir as a mirror channel for the conda layer, wheel_dir as the
    only --find-links of the pip layer (offline), git_dir as mirror_root of git_sources.fetch_source,
    builds_dir as prebuilt source-build entries, lock_dir as the lockfiles base (it holds <profile>/).
    """

    root: Path
    profile: str
    channel_dir: Path
    wheel_dir: Path  # pypi/
    git_dir: Path
    lock_dir: Path
    builds_dir: Path
    members: Dict[str, Dict[str, object]] = field(default_factory=dict, compare=False)
    layers: Tuple[str, ...] = ("conda", "pip")  # ("pip",): a venv bundle, for `create --backend venv` only

    @property
    def channel_dirs(self) -> Tuple[Path, ...]:
        """The local channels create reads archives from: channel/ and optional-channel/."""
        return (self.channel_dir, self.root / "optional-channel")


def walk_members(root: Path) -> Iterator[Tuple[str, Path]]:
    """(posix relative name, path) of the ROOT_FILES and every regular file under root's PARTS, sorted."""
    for name in ROOT_FILES:
        if (root / name).is_file():
            yield name, root / name
    for part in PARTS:
        base = root / part
        if not base.exists():
            continue
        for path in sorted(base.rglob("*")):
            if path.is_file() and not path.is_symlink():
                yield path.relative_to(root).as_posix(), path


def write_manifest(root: Path, profile: str, extra: Optional[Dict[str, object]] = None) -> Dict[str, object]:
    members = {name: {"sha256": sha256_file(path), "size": path.stat().st_size} for name, path in walk_members(root)}
    manifest = {"format": BUNDLE_FORMAT, "profile": profile, "members": members, **(extra or {})}
    (root / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return manifest


def _epoch() -> int:
    """Every member's mtime: SOURCE_DATE_EPOCH (reproducible-builds.org's variable), else 0."""
    value = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if not value:
        return 0
    if not value.isdigit() or int(value) >= 8 ** 11:  # a ustar mtime field holds 11 octal digits
        raise EnvbuildError(f"SOURCE_DATE_EPOCH={value[:40]!r} is not a whole number of seconds since 1970 "
                            f"(below 8**11); unset it or give one such as {int(time.time())}")
    return int(value)


def write_tar(root: Path, out: Path, phase: Any = None) -> None:
    """Tar the staged bundle (manifest first, then folders and members sorted) reproducibly; written beside
    `out` then renamed. `phase` (an envbuild.progress.Phase) counts the members and their bytes."""
    out = Path(out)
    partial = out.with_name(out.name + ".part")
    mtime = _epoch()

    def clean(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = mtime
        info.mode = 0o755 if info.isdir() or info.mode & 0o111 else 0o644
        info.pax_headers = {}
        return info

    try:
        with naming(partial), tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
            tar.add(root / MANIFEST, arcname=MANIFEST, filter=clean)
            for name in PARTS:  # folders too: a bare git mirror needs its empty refs/ folders
                base = root / name
                if base.is_dir():
                    for folder in [base, *sorted(p for p in base.rglob("*") if p.is_dir() and not p.is_symlink())]:
                        tar.add(folder, arcname=folder.relative_to(root).as_posix(), recursive=False, filter=clean)
            for name, path in walk_members(root):
                tar.add(path, arcname=name, filter=clean)
                if phase is not None:
                    phase.advance()
                    phase.add_bytes(path.stat().st_size)
        os.replace(partial, out)
    except BaseException:
        partial.unlink(missing_ok=True)  # a failed or interrupted pack leaves no half bundle beside `out`
        raise


def _safe_members(tar: tarfile.TarFile, bundle: Path) -> Iterator[tarfile.TarInfo]:
    for info in tar:
        name = PurePosixPath(info.name)
        if name.is_absolute() or ".." in name.parts:
            raise InputFileError(bundle, f"member {info.name!r} points outside the bundle; refusing to extract")
        if not (info.isfile() or info.isdir()):
            raise InputFileError(bundle, f"member {info.name!r} is not a plain file or folder; refusing to extract")
        if name.as_posix() == MANIFEST and info.size > MANIFEST_MAX_BYTES:
            raise InputFileError(bundle, f"member {MANIFEST} is {info.size} bytes, over the {MANIFEST_MAX_BYTES} a "
                                         f"manifest may have; refusing to extract")
        yield info


def _verify(root: Path, bundle: Path) -> Dict[str, object]:
    from envbuild.fsutil import InputRefused, read_bounded

    try:
        manifest = json.loads(read_bounded(root / MANIFEST, MANIFEST_MAX_BYTES).decode("utf-8"))
    except FileNotFoundError as exc:
        raise InputFileError(bundle, f"not an envbuild bundle (no {MANIFEST})") from exc
    except InputRefused as exc:
        raise InputFileError(bundle, f"{MANIFEST}: {exc}") from exc
    except (ValueError, RecursionError) as exc:
        raise InputFileError(bundle, f"{MANIFEST} is not valid JSON: {str(exc)[:200]}") from exc
    if not isinstance(manifest, dict):
        raise InputFileError(bundle, f"{MANIFEST} is not a JSON object")
    if manifest.get("format") != BUNDLE_FORMAT:
        raise InputFileError(bundle, f"bundle format {manifest.get('format')!r}; this envbuild reads {BUNDLE_FORMAT}")
    listed: Dict[str, Dict[str, object]] = manifest.get("members", {})
    if not isinstance(listed, dict) or not all(isinstance(k, str) and isinstance(v, dict)
                                               and isinstance(v.get("sha256"), str) for k, v in listed.items()):
        raise InputFileError(bundle, f"{MANIFEST}: 'members' is not an object of {{name: {{sha256: ...}}}}")
    present = dict(walk_members(root))
    for name in sorted(set(present) - set(listed)):
        raise InputFileError(bundle, f"member {name} is not in the bundle manifest (added after packing?)")
    for name, meta in sorted(listed.items()):
        path = present.get(name)
        if path is None:
            raise InputFileError(bundle, f"member {name} is listed in the manifest but missing")
        got = sha256_file(path)
        if got != meta.get("sha256"):
            raise InputFileError(bundle, f"member {name}: sha256 {got} differs from the manifest's "
                                         f"{meta.get('sha256')}; the bundle is damaged or was altered")
    return manifest


def default_workdir(bundle: Path) -> Path:
    """<envbuild cache>/bundles/<name>-<size>-<mtime>: a re-copied bundle is extracted again."""
    from envbuild.paths import cache_dir

    st = bundle.stat()
    return cache_dir() / "bundles" / f"{bundle.stem}-{st.st_size}-{st.st_mtime_ns}"


def open_bundle(path: Union[str, Path], workdir: Optional[Union[str, Path]] = None) -> BundleLayout:
    """Extract `path` into `workdir` (default: default_workdir), verify every member; return the layout.

    Called by `envbuild create --bundle` before any work. An earlier complete extraction in the same
    workdir is reused but always re-verified against the manifest. Raises InputFileError naming the bundle
    and the member on any damage.
    """
    bundle = Path(path).expanduser().absolute()
    if not bundle.is_file():
        raise InputFileError(bundle, "bundle file does not exist")
    root = Path(workdir).absolute() if workdir else default_workdir(bundle)
    if not (root / _EXTRACTED_MARK).is_file():
        if root.exists():
            shutil.rmtree(root)  # a half-finished extraction: start over
        root.mkdir(parents=True)
        try:
            with tarfile.open(bundle, "r:*") as tar:
                for info in _safe_members(tar, bundle):
                    tar.extract(info, root, set_attrs=False, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        except tarfile.TarError as exc:
            raise InputFileError(bundle, f"not a readable tar file: {exc}") from exc
    manifest = _verify(root, bundle)
    (root / _EXTRACTED_MARK).write_text(str(bundle) + "\n", encoding="utf-8")
    profile = str(manifest.get("profile", ""))
    if not (root / "locks" / profile / "profile.toml").is_file():
        raise InputFileError(bundle, f"the bundle has no locks/{profile}/profile.toml")
    return BundleLayout(root=root, profile=profile, channel_dir=root / "channel", wheel_dir=root / "pypi",
                        git_dir=root / "git", lock_dir=root / "locks", builds_dir=root / "builds",
                        members=manifest.get("members", {}),
                        layers=tuple(manifest.get("layers") or ("conda", "pip")))
