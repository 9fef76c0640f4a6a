"""What makes our conda-lock.yml a file conda-lock itself accepts as its own: the pip layer as conda-lock
pip entries (`manager: pip`, url + sha256), and the content hash conda-lock computes from our rendered
environment files, so `conda-lock lock --check-input-hash -f environment.yml -f environment.<group>.yml
--virtual-package-spec virtual-packages.yml` finds the lock fresh and `conda-lock install` gets torch too.

Both go through conda-lock's own code (its spec parser, its virtual-package repo, compute_content_hashes,
its v2prelim models and writer), so a conda-lock that changes its rules changes ours with it.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Dict, Optional, Sequence

from envbuild.lock.pip_lockfile import LockedWheel

VPKG_NAME = "virtual-packages.yml"


def condalock_content_hashes(spec_files: Dict[str, str], platforms: Sequence[str]) -> Dict[str, str]:
    """platform -> the content hash conda-lock computes for our rendered spec (`spec_files`: file name ->
    text; every environment*.yml is a source, virtual-packages.yml the virtual package spec)."""
    from conda_lock.content_hash import compute_content_hashes
    from conda_lock.src_parser import make_lock_spec
    from conda_lock.virtual_package import virtual_package_repo_from_specification

    with tempfile.TemporaryDirectory(prefix="envbuild-condalock-") as tmp:
        folder = Path(tmp)
        for name, text in spec_files.items():
            (folder / name).write_text(text, encoding="utf-8")
        # conda-lock maps one PyPI name for an environment.yml: `pip` itself (it adds the conda `pip`), the
        # same name in its default mapping (fetched from GitHub); a local one-entry mapping keeps this offline
        mapping = folder / "pypi-mapping.json"
        mapping.write_text(json.dumps({"pip": {"conda_name": "pip", "conda_forge": "pip", "pypi_name": "pip"}}))
        sources = [folder / n for n in sorted(spec_files) if n.startswith("environment") and n.endswith(".yml")]
        spec = make_lock_spec(src_files=sources, platform_overrides=list(platforms), mapping_url=str(mapping))
        vpr = virtual_package_repo_from_specification(folder / VPKG_NAME) if VPKG_NAME in spec_files else None
        return dict(sorted(compute_content_hashes(spec, vpr).items()))


def with_pip_entries(lock_text: str, entries: Sequence[LockedWheel], platforms: Sequence[str],
                     custom: Optional[Dict[str, str]] = None) -> str:
    """`lock_text` (a conda-lock.yml) with its pip entries replaced by `entries` for every platform, and
    `custom` merged into metadata.custom_metadata (the freshness seal).

    Each entry is the file envbuild installs (url + sha256) in category main, the form conda-lock writes
    for a pip dependency; `conda-lock render --kind explicit` turns them into `# pip name @ url#sha256=`.
    """
    from conda_lock.lockfile import parse_conda_lock_file, write_conda_lock_file
    from conda_lock.lockfile.v1.models import HashModel
    from conda_lock.lockfile.v2prelim.models import LockedDependency

    with tempfile.TemporaryDirectory(prefix="envbuild-condalock-") as tmp:
        path = Path(tmp) / "conda-lock.yml"
        path.write_text(lock_text, encoding="utf-8")
        lock = parse_conda_lock_file(path)
        kept = [p for p in lock.package if p.manager != "pip"]
        for platform in sorted(platforms):
            for e in sorted(entries, key=lambda e: e.canonical_name):
                sha = next((f.sha256 for f in e.all_files() if f.filename == e.filename and f.sha256), "")
                sha = sha or (e.hashes[0] if len(e.hashes) == 1 else "")
                kept.append(LockedDependency(name=e.canonical_name, version=e.version, manager="pip",
                                             platform=platform, dependencies={}, url=e.url,
                                             hash=HashModel(sha256=sha), categories={"main"}))
        lock.package = kept
        if custom:
            lock.metadata.custom_metadata = dict(sorted({**(lock.metadata.custom_metadata or {}), **custom}.items()))
        write_conda_lock_file(lock, path, metadata_choices=None, include_help_text=True)
        return path.read_text(encoding="utf-8")
