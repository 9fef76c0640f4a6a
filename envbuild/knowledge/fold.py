"""Fold a doctor run's consequences under their root cause, with the same signatures `envbuild explain` reads.

When one node fault breaks CUDA for every process, every GPU probe fails too, each blamed on the causes it
was written for: a forward-compatible libcuda first on the library path fails stack.libcuda_compat (right, C8)
and makes cumem.ipc, offload.cycle and weight.sync fail with "Unexpected error from cudaGetDeviceCount()",
which they would blame on M1/D8, C9/M5 and C5/C3. A signature's `consequence_of` lists the causes whose
presence makes its message a consequence; a failed result whose text holds such a signature, while a static
(node/stack) check failed naming one of those causes, is folded under that check: its causes become the
root's and its summary says so. The verdict then names one root cause and shows the rest as consequences.
Statuses and the exit code are unchanged: a consequence still failed.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

if TYPE_CHECKING:  # pragma: no cover
    from envbuild.knowledge.signatures import Signature
    from envbuild.report.model import Result

ROOT_CATEGORIES = ("node", "stack")  # checks that read the node or the env statically: they name root causes
_TEXT_LIMIT = 20000  # characters of a result's evidence searched (summaries and payload errors are short)


def _text(result: "Result") -> str:
    evidence = json.dumps(result.evidence, default=str)[:_TEXT_LIMIT] if result.evidence else ""
    return f"{result.summary}\n{evidence}"


def _consequence_signatures(text: str, signatures: Sequence["Signature"]) -> List["Signature"]:
    return [s for s in signatures if s.consequence_of and any(k in text for k in s.keys) and s.pattern.search(text)]


def _root_for(result: "Result", roots: Sequence["Result"], signatures: Sequence["Signature"]) -> Optional[Tuple["Result", "Signature"]]:
    for sig in _consequence_signatures(_text(result), signatures):
        for root in roots:
            if set(root.causes) & set(sig.consequence_of):
                return root, sig
    return None


def fold_consequences(results: List["Result"], signatures: Optional[Sequence["Signature"]] = None) -> List["Result"]:
    """`results` with every consequence annotated (in place, same order): evidence['consequence_of'] names the
    root check, its causes and the signature that tied them; the root's evidence['consequences'] lists them."""
    from envbuild.report.model import Status

    roots = [r for r in results if r.status == Status.FAIL and r.causes and r.category in ROOT_CATEGORIES]
    if not roots:  # a healthy node: no signature file is read (their TOML and 100 regexes were 0.1 s of a static run)
        return results
    if signatures is None:
        from envbuild.knowledge.signatures import load_signatures

        signatures = load_signatures()
    folded: Dict[int, List[str]] = {}
    for r in results:
        if r.status not in (Status.FAIL, Status.ERROR) or any(r is root for root in roots):
            continue
        found = _root_for(r, roots, signatures)
        if found is None:
            continue
        root, sig = found
        name = r.check_id + (f" [{r.subject}]" if r.subject else "")
        r.evidence["consequence_of"] = {"check": root.check_id, "subject": root.subject, "causes": list(root.causes),
                                        "signature": sig.id, "blamed_before": list(r.causes)}
        r.causes = list(root.causes)
        r.summary = f"consequence of {root.check_id} ({', '.join(root.causes)}): {r.summary}"
        folded.setdefault(id(root), []).append(name)
    for root in roots:
        if id(root) in folded:
            root.evidence["consequences"] = folded[id(root)]
    return results


def root_causes(results: Sequence["Result"]) -> List[Tuple[str, List[str], List[str]]]:
    """(root check id, its causes, the checks folded under it) for every root that has consequences."""
    return [(r.check_id, list(r.causes), list(r.evidence["consequences"]))
            for r in results if isinstance(r.evidence, dict) and r.evidence.get("consequences")]
