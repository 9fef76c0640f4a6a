"""Temporaries named after the process that owns them, and the sweep that removes those of dead owners.

Why: a SIGKILLed create cannot clean up after itself, so its temporaries (pip's and the source builds'
scratch folders in /tmp, half-built wheel cache entries `.tmp-*`, half-copied archives `*.part-*`) carry the
owner's pid in their name, and the next create removes every one whose owner is gone. A live owner's
temporaries are never touched, so two creates sharing a cache or /tmp do not clean each other away.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Iterable, List, Optional, Union

# /tmp prefixes envbuild creates; each name is `<prefix>-<pid>-<random>`
TMP_PREFIXES = ("envbuild-pip", "envbuild-build", "envbuild-git", "envbuild-run")
# a doctor's run dir holds the rank logs its report cites: kept this long after its doctor exited
RUN_DIR_KEEP_S = 3600.0
# `.tmp-<entry>-<pid>` (source-build cache entries), `<file>.part-<pid>-<random>` (cachelock.temp_path)
_OWNED = re.compile(r"^\.tmp-.*-(\d+)$|\.part-(\d+)-[A-Za-z0-9_]+$")
_TMP_OWNED = re.compile(r"^(" + "|".join(map(re.escape, TMP_PREFIXES)) + r")-(\d+)-")


def tmp_prefix(kind: str) -> str:
    """A tempfile prefix for `kind` ('envbuild-pip', ...) that names this process as the owner."""
    return f"{kind}-{os.getpid()}-"


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def _remove(path: Path) -> bool:
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
        return True
    except FileNotFoundError:
        return False
    except OSError:
        return False


def sweep_cache(roots: Iterable[Union[str, Path]], max_depth: int = 4) -> List[Path]:
    """Remove `.tmp-*-<pid>` folders and `*.part-<pid>` files under `roots` whose owner pid is dead."""
    removed: List[Path] = []
    for root in roots:
        root = Path(root)
        if not root.is_dir():
            continue
        base_depth = len(root.parts)
        for dirpath, dirnames, filenames in os.walk(root):
            here = Path(dirpath)
            if len(here.parts) - base_depth >= max_depth:
                dirnames[:] = []
            for name in list(dirnames) + filenames:
                m = _OWNED.search(name)
                if m and not pid_alive(int(m.group(1) or m.group(2))) and _remove(here / name):
                    removed.append(here / name)
                    if name in dirnames:
                        dirnames.remove(name)
    return removed


def sweep_tmp(kinds: Iterable[str] = TMP_PREFIXES, tmpdir: Optional[str] = None, min_age_s: float = 0.0) -> List[Path]:
    """Remove /tmp/<kind>-<pid>-* of dead owners (not younger than `min_age_s`: a report may still cite them)."""
    kinds = set(kinds)
    base = Path(tmpdir or tempfile.gettempdir())
    removed: List[Path] = []
    try:
        names = os.listdir(base)
    except OSError:
        return removed
    now = time.time()
    for name in names:
        m = _TMP_OWNED.match(name)
        if not m or m.group(1) not in kinds or pid_alive(int(m.group(2))):
            continue
        path = base / name
        try:
            if min_age_s and now - path.lstat().st_mtime < min_age_s:
                continue
            if path.lstat().st_uid != os.getuid():
                continue
        except OSError:
            continue
        if _remove(path):
            removed.append(path)
    return removed
