"""Fold a doctor run's consequences under their root cause, with the same signatures `envbuild explain` reads.

When one node fault breaks CUDA or NCCL for every process, every GPU probe fails too, each blamed on the causes
it was written for: a forward-compatible libcuda first on the library path fails stack.libcuda_compat (right,
C8) and makes cumem.ipc, offload.cycle and weight.sync fail with "Unexpected error from cudaGetDeviceCount()",
which they would blame on M1/D8, C9/M5 and C5/C3. Two ways tie a failure to its root:

- a signature's `consequence_of` lists the causes whose presence makes its message a consequence: a failed
  result whose text holds such a signature, while a static (node/stack) check failed naming one of those
  causes, is folded under that check;
- a root's own evidence names what it explains (`evidence["explains"]`: regular expressions): a check that
  found, say, NCCL_SOCKET_IFNAME naming no interface knows that every NCCL init error of the run follows from
  it (envbuild/doctor/checks/node_net_interfaces.py). This way a static check's failure folds too (stack.torch
  under node.net_interfaces), and a probe's own finding can be a root (comm.weight_sync [nccl_env], whose
  transfer fails because of what it found); the signature way folds only the probes, as before.

A probe's own finding that names no cause beyond a static root's (comm.weight_sync [libnccl] seeing in its rank
the two libnccl copies stack.nccl_copies found in the env) is the same fault seen twice: it folds under the
static check, and what it explains folds there too, so the run shows one root (the f09 fault of
docs/gpu-runs/s7/f09.json).

A folded result's causes become the root's and its summary says "consequence of ...". The verdict then names one
root cause and shows the rest as consequences. Statuses and the exit code are unchanged: a consequence still
failed.
"""
from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

if TYPE_CHECKING:  # pragma: no cover
    from envbuild.knowledge.signatures import Signature
    from envbuild.report.model import Result

ROOT_CATEGORIES = ("node", "stack")  # checks that read the node or the env statically: they name root causes
_TEXT_LIMIT = 20000  # characters of a result's evidence searched (summaries and payload errors are short)


def _text(result: "Result") -> str:
    evidence = {k: v for k, v in (result.evidence or {}).items() if k not in ("explains", "consequences")}
    return f"{result.summary}\n{json.dumps(evidence, default=str)[:_TEXT_LIMIT] if evidence else ''}"


def _explains(root: "Result") -> List["re.Pattern[str]"]:
    """The root's own patterns (evidence["explains"]); a malformed one is ignored rather than fatal."""
    out = []
    for pattern in (root.evidence or {}).get("explains") or []:
        try:
            out.append(re.compile(str(pattern)))
        except re.error:
            continue
    return out


def _consequence_signatures(text: str, signatures: Sequence["Signature"]) -> List["Signature"]:
    return [s for s in signatures if s.consequence_of and s.holds_key(text) and s.pattern.search(text)]


def _explained_by(result: "Result", roots: Sequence["Result"]) -> Optional[Tuple["Result", str]]:
    text = _text(result)
    for root in roots:
        if root is result:
            continue
        for pattern in _explains(root):
            if pattern.search(text):
                return root, f"explains:{pattern.pattern}"
    return None


def _signature_root(result: "Result", roots: Sequence["Result"],
                    signatures: Sequence["Signature"]) -> Optional[Tuple["Result", str]]:
    for sig in _consequence_signatures(_text(result), signatures):
        for root in roots:
            if set(root.causes) & set(sig.consequence_of):
                return root, sig.id
    return None


def fold_consequences(results: List["Result"], signatures: Optional[Sequence["Signature"]] = None) -> List["Result"]:
    """`results` with every consequence annotated (in place, same order): evidence['consequence_of'] names the
    root check, its causes and what tied them (a signature id, or `explains:<pattern>`); the root's
    evidence['consequences'] lists them."""
    from envbuild.report.model import Status

    # a probe's own finding that names what it explains is a root too (comm.weight_sync [nccl_env] under which its
    # transfer's NCCL error folds)
    roots = [r for r in results if r.status == Status.FAIL and r.causes
             and (r.category in ROOT_CATEGORIES or _explains(r))]
    if not roots:  # a healthy node: no signature file is read (their TOML and 100 regexes were 0.1 s of a static run)
        return results
    # Roots that name what they explain go first: a static check they explain is no root of its own.
    explainers = [r for r in roots if _explains(r)]
    ties: Dict[int, Tuple["Result", str]] = {}
    for r in roots:
        if any(tie[0] is r for tie in ties.values()):  # already another's root: no chains
            continue
        found = _explained_by(r, [e for e in explainers if id(e) not in ties])
        if found is not None:
            ties[id(r)] = found
    # the same fault seen twice: a probe root whose causes a static root already names folds under that static root
    seen_twice: Dict[int, "Result"] = {}
    static = [r for r in roots if r.category in ROOT_CATEGORIES and id(r) not in ties]
    for r in roots:
        if r.category in ROOT_CATEGORIES or id(r) in ties or any(tie[0] is r for tie in ties.values()):
            continue
        same = next((s for s in static if set(r.causes) <= set(s.causes)), None)
        if same is not None:
            ties[id(r)] = (same, "same cause: " + ", ".join(r.causes))
            seen_twice[id(r)] = same
    standing = [r for r in roots if id(r) not in ties]
    root_ids = {id(r) for r in roots}
    need_signatures = any(r.status in (Status.FAIL, Status.ERROR) and id(r) not in root_ids for r in results)
    if signatures is None and need_signatures:
        from envbuild.knowledge.signatures import load_signatures

        signatures = load_signatures()
    for r in results:
        if r.status not in (Status.FAIL, Status.ERROR) or id(r) in root_ids:
            continue
        found = _explained_by(r, [s for s in standing if _explains(s)] + [roots_r for roots_r in roots
                                                                          if id(roots_r) in seen_twice]) or \
            _signature_root(r, standing, signatures or ())
        if found is not None and id(found[0]) in seen_twice:  # explained by a finding folded under a static root
            found = (seen_twice[id(found[0])], found[1])
        if found is not None:
            ties[id(r)] = found
    folded: Dict[int, List[str]] = {}
    for r in results:
        if id(r) not in ties:
            continue
        root, how = ties[id(r)]
        r.evidence["consequence_of"] = {"check": root.check_id, "subject": root.subject, "causes": list(root.causes),
                                        "signature": how, "blamed_before": list(r.causes)}
        r.causes = list(root.causes)
        r.summary = f"consequence of {root.check_id} ({', '.join(root.causes)}): {r.summary}"
        folded.setdefault(id(root), []).append(r.label)
    for root in standing:
        if id(root) in folded:
            root.evidence["consequences"] = folded[id(root)]
    return results


def root_causes(results: Sequence["Result"]) -> List[Tuple[str, List[str], List[str]]]:
    """(root check id, its causes, the checks folded under it) for every root that has consequences."""
    return [(r.check_id, list(r.causes), r.consequences) for r in results if r.consequences]
