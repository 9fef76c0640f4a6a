"""What `envbuild create` cleans before it starts and says when it is interrupted (envbuild/leftovers.py does the
sweeping; this module knows create's own cache folders and its manifest)."""
from __future__ import annotations

from pathlib import Path
from typing import List

from envbuild.leftovers import sweep_cache, sweep_tmp


def sweep_for_create() -> List[Path]:
    """What a create run removes before it starts: dead creates' scratch folders and half cache entries."""
    from envbuild.paths import cache_dir
    from envbuild.install.source_builds import wheel_cache_dir

    removed = sweep_tmp(("envbuild-pip", "envbuild-build", "envbuild-git"))
    return removed + sweep_cache({cache_dir(), wheel_cache_dir()})


def interrupted_message(job) -> str:
    """What create says on Ctrl-C: the old env is intact, or (after the swap) the new env is already in place."""
    if job.swapped:
        return (f"interrupted after the new env was put in place: {job.target} is complete; the previous env's "
                f"leftovers are removed by the next run")
    return f"interrupted: {job.target} is as it was; rerun the same command to resume"
