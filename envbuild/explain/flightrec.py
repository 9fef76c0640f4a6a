"""PyTorch's NCCL flight-recorder dumps (TORCH_FR_DUMP_TEMP_FILE / TORCH_NCCL_DEBUG_INFO_TEMP_FILE + rank):
a dict {version, pg_config, pg_status, entries} pickled (the default) or JSON. The format followed is that of
torch 2.5-2.9 (version "2.x"; the semantics as in torch/distributed/flight_recorder, `torchfrtrace`).

A user's pickle is never given to pickle.load: the unpickler here allows no globals at all (the dump holds only
dicts, lists, tuples, strings, numbers, None), so a crafted file cannot run code. The verdict per process group:
the first collective_seq_id not completed everywhere, and whether some rank never entered it (a desync, or a
process that hung or died before it) or all entered and one never completed.
"""
from __future__ import annotations

import io
import json
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

MAX_DUMP = 64 * 1024 * 1024  # a dump larger than this is not read (TORCH_FR_BUFFER_SIZE=2000 gives a few MB)
_RANK = re.compile(r"(\d+)$")


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:  # noqa: D401 - pickle's hook
        raise pickle.UnpicklingError(f"a global ({module}.{name}) in a flight-recorder dump: refused")


def load(path: Path) -> Dict[str, Any]:
    """One dump as a dict; ValueError with the reason when it is not a readable dump."""
    size = path.stat().st_size
    if size > MAX_DUMP:
        raise ValueError(f"{size} bytes, over the {MAX_DUMP >> 20} MiB a dump may have: not read")
    data = path.read_bytes()
    try:
        dump = json.loads(data) if data[:1] in (b"{", b" ", b"\n") else _NoGlobals(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, ValueError, EOFError, IndexError, TypeError, KeyError, AttributeError) as exc:
        raise ValueError(f"not a readable flight-recorder dump ({str(exc)[:120] or type(exc).__name__}; cut short?)")
    if not isinstance(dump, dict) or not isinstance(dump.get("entries", []), list):
        raise ValueError("not a flight-recorder dump (no entries list)")
    return dump


@dataclass
class Verdict:
    group: str
    seq: int
    op: str
    kind: str  # "never_entered" | "not_completed" | "mismatch" | "no_dump"
    ranks: List[int]  # the ranks the verdict is about
    others: List[int]
    says: str


def _ranks_of(cfg: Any) -> List[int]:
    r = cfg.get("ranks") if isinstance(cfg, dict) else None
    if isinstance(r, str):
        try:
            r = json.loads(r)
        except ValueError:
            return []
    return [int(x) for x in r] if isinstance(r, list) else []


def analyse(dumps: Dict[int, Dict[str, Any]], expected: Optional[List[int]] = None) -> List[Verdict]:
    """Verdicts over the dumps of one job (rank -> dump), one per process group that did not finish."""
    out: List[Verdict] = []
    groups: Dict[str, List[int]] = {}
    per: Dict[str, Dict[int, Dict[int, Dict[str, Any]]]] = {}  # group -> rank -> seq -> entry
    for rank, d in dumps.items():
        for name, cfg in (d.get("pg_config") or {}).items():
            groups.setdefault(str(name), _ranks_of(cfg))
        for e in d.get("entries") or []:
            if not isinstance(e, dict) or e.get("is_p2p") or str(e.get("profiling_name", "")).startswith("gloo:"):
                continue  # gloo's entries stay "scheduled" (no completion is tracked): no verdict from them
            pg = e.get("process_group")
            g = str(pg[0]) if isinstance(pg, (list, tuple)) and pg else str(e.get("pg_id", "0"))
            seq = e.get("collective_seq_id")
            if isinstance(seq, int):
                per.setdefault(g, {}).setdefault(rank, {})[seq] = e
    for g, by_rank in sorted(per.items()):
        members = groups.get(g) or sorted(set(by_rank) | set(expected or []))
        undone = [s for r in by_rank.values() for s, e in r.items() if e.get("state") != "completed"]
        absent = [r for r in members if r not in dumps]
        if not undone:
            continue
        seq = min(undone)
        entries = {r: by_rank.get(r, {}).get(seq) for r in members if r in dumps}
        op = next((str(e.get("profiling_name")) for e in entries.values() if e), "?")
        names = {str(e.get("profiling_name")) for e in entries.values() if e}
        never = sorted(r for r, e in entries.items() if e is None)
        entered = sorted(r for r, e in entries.items() if e is not None)
        if len(names) > 1:
            out.append(Verdict(g, seq, op, "mismatch", entered, [],
                               f"collective {seq} of group {g} differs across ranks ({', '.join(sorted(names))}): a desync"))
        elif never:
            last = {r: max(by_rank.get(r, {}) or [0]) for r in never}
            out.append(Verdict(g, seq, op, "never_entered", never, entered,
                               f"rank {', '.join(map(str, never))} never entered collective {seq} ({op}) of group {g}; "
                               f"rank {', '.join(map(str, entered))} did (its last was {', '.join(str(v) for v in last.values())})"))
        elif absent:
            out.append(Verdict(g, seq, op, "no_dump", absent, entered,
                               f"rank {', '.join(map(str, absent))} wrote no dump; rank {', '.join(map(str, entered))} "
                               f"entered collective {seq} ({op}) of group {g} and it never completed"))
        else:
            sched = sorted(r for r, e in entries.items() if e and e.get("state") == "scheduled")
            who = sched or sorted(entries)
            out.append(Verdict(g, seq, op, "not_completed", who, [r for r in entered if r not in who],
                               f"all ranks entered collective {seq} ({op}) of group {g}; it never completed"
                               + (f" (rank {', '.join(map(str, sched))} never started it on the GPU)" if sched else "")))
    return out


@dataclass
class Dump:
    name: str  # the file's name in fr/
    writer: str  # the <pid>-<starttime> of the process that wrote it ('' in the older layout, fr/nccl_trace_rank_<r>)
    rank: int
    data: Dict[str, Any]


def read_dir(fr_dir: Path, problems: List[str]) -> List[Dump]:
    """Every dump in a fr/ folder whose name ends in a rank number, oldest first."""
    out: List[Dump] = []
    files = [p for p in fr_dir.iterdir() if p.is_file() and _RANK.search(p.name)]
    for p in sorted(files, key=lambda q: (q.stat().st_mtime, q.name)):
        rank = int(_RANK.search(p.name).group(1))  # type: ignore[union-attr]
        writer = p.name.split(".nccl_trace_rank_")[0] if ".nccl_trace_rank_" in p.name else ""
        try:
            out.append(Dump(p.name, writer, rank, load(p)))
        except (ValueError, OSError) as exc:
            problems.append(f"{p.name}: {exc}")
    return out
