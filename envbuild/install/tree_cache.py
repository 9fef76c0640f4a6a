"""What relocation and the manifest found in a staged tree, kept for a create whose inputs an earlier one had.

Why: with uv's cache warm, uv installs a torch stack in about 0.9 s, and create then spent about as long again
on its own tree work: walking the prefix's 90,000 files, parsing the wheels' RECORDs for the files that came
verbatim, reading the scripts and dist-info files for the staging path, and writing a manifest line per file.
For the same inputs (`tree_inputs`) that work finds the same answer: uv unpacks the same locked wheels into
the same staging path with the same interpreter, and envbuild's own code writes the same files. So a create
keeps two things under the hash of those inputs (envbuild.install.rerun_cache): which files relocation
rewrote, and the manifest's rows. A rerun with the same inputs rewrites exactly those files and writes the
kept rows, after hashing envbuild's own files (activation, written after relocation) afresh: when their
rows differ from the kept ones, the manifest is made the long way.

What this trusts is what the manifest already trusted: that uv's cache is not edited in place (a verbatim
file's sha256 has always come from its wheel's RECORD, never from reading it), and that an installer given
the same inputs writes the same files. A run that resumed a staged prefix never uses or fills the cache
(its tree may hold a half-done phase), and neither does one with git sources or source builds, whose
checkouts and wheels are work this module cannot vouch for.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

CACHE_KIND = "tree"
# What changes the files uv writes (bytecode, link mode, ...) or what the interpreter writes when run
_ENV_PREFIXES = ("UV_", "PYTHON", "SOURCE_DATE_EPOCH")
_SEP = "\0"
KEEP = 8  # a torch stack's entry is about 20 MB: one per recent (locks, prefix) is plenty for reruns


def tree_inputs(prefix: Path, target: Path, lock_key: str, layers: Dict[str, Any],
                interpreter: Optional[Path]) -> Dict[str, Any]:
    """Everything the staged tree depends on: the locks and what the layers installed (with the wheels'
    sha256), the staging path and the target, the interpreter a venv links to, uv's binary, the environment
    that changes what uv or Python write, and envbuild's installing code. Whether the doctor gate's probe ran
    is not among them: it runs without writing bytecode (envbuild.install.doctor_gate)."""
    from envbuild import __version__
    from envbuild.install.rerun_cache import file_identity, tree_digest
    from envbuild.lock.uv_cli import uv_bin

    here = Path(__file__).resolve().parent
    return {
        "lock_key": lock_key,
        "layers": layers,
        "prefix": str(prefix),
        "target": str(target),
        "interpreter": file_identity(interpreter) if interpreter else None,
        "uv": file_identity(uv_bin()),
        "env": sorted((k, v) for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES)),
        "code": [__version__, tree_digest(here, here / "backends")],
    }


def usable(resumed: bool, layers: Dict[str, Any]) -> bool:
    """Whether this run may use the cache: a fresh staging prefix and no git source or source build."""
    return not resumed and not layers.get("git") and not layers.get("builds")


class KeptTree:
    """A kept answer: the files relocation rewrote, the manifest rows of envbuild's own files (activation),
    and every manifest row, joined as the manifest writes them (manifest.ROW_SEP)."""

    def __init__(self, rewritten: List[str], own_rows: List[str], rows_text: str):
        self.rewritten, self.own_rows, self.rows_text = rewritten, own_rows, rows_text


def get(key: str) -> Optional[KeptTree]:
    from envbuild.install import rerun_cache

    text = rerun_cache.get(CACHE_KIND, key)
    if text is None:
        return None
    rewritten, sep, rest = text.partition(_SEP)
    own, sep2, rows_text = rest.partition(_SEP)
    if not (sep and sep2):
        return None
    return KeptTree(rewritten.split("\n") if rewritten else [], own.split("\n") if own else [], rows_text)


def put(key: str, rewritten: Sequence[str], own_rows: Sequence[str], rows: Sequence[str]) -> None:
    """Keep `rewritten` (relative paths), `own_rows` (the rows of envbuild's own files) and `rows` (every
    manifest row, in order); at most KEEP entries stay, the most recently written."""
    from envbuild.install import rerun_cache
    from envbuild.install.manifest import ROW_SEP

    rerun_cache.put(CACHE_KIND, key, _SEP.join(["\n".join(rewritten), "\n".join(own_rows), ROW_SEP.join(rows)]))
    rerun_cache.prune(CACHE_KIND, KEEP)
