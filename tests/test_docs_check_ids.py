"""The check ids the documents cite are the registry's (issue 23): a renamed check or an option that went away
must not live on in the docs. Each `node.x`, `gpu.x`, `stack.x`, `comm.x`, `train.x` (and the old prefixes of
RENAMED, and `nccl.x`) token in docs/ and README.md must be a registered check, a `--set` key (or the start of
one), a signature id of envbuild/knowledge/signatures, or a fleet-wide result the fleet code writes. An old id
is allowed only on a line that also names its new id (the sentence saying it was renamed); the recorded GPU runs
(docs/gpu-runs/) keep the ids of their day."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Dict, List, Set

from envbuild.doctor.registry import RENAMED, all_checks, declared_options
from envbuild.knowledge.signatures import load_signatures
from envbuild.report.model import CATEGORIES

REPO = Path(__file__).resolve().parent.parent
PREFIXES = sorted(set(CATEGORIES) | {old.split(".")[0] for old in RENAMED} | {"nccl"})
TOKEN = re.compile(r"(?<![\w./@-])((?:%s)\.[a-z][a-z0-9_]*)(?![\w-]|\.[a-z])" % "|".join(PREFIXES))
FILE_SUFFIXES = (".json", ".html", ".md", ".py", ".cc", ".h", ".toml", ".log", ".txt", ".xml", ".prom", ".so")
# ids a document uses as an example of something that is not a check: the new check of the tutorial, a typo
EXAMPLES: Dict[str, str] = {"node.hugepages": "docs/adding-a-check.md", "train.layer": "docs/checks-train.md"}


def _fleet_result_ids() -> Set[str]:
    text = "\n".join(p.read_text() for p in (REPO / "envbuild" / "fleet").glob("*.py"))
    ids = set(re.findall(r'"((?:comm|fleet)\.[a-z_]+)"', text))
    ops = re.search(r'for op in \(([^)]*)\):', text)  # the cross-node collectives: f"comm.fleet_{op}"
    assert ops and 'f"comm.fleet_{op}"' in text, "the fleet collectives' result ids moved: update this test"
    return ids | {f"comm.fleet_{op}" for op in re.findall(r'"(\w+)"', ops.group(1))}


def known_ids() -> Set[str]:
    keys = set(declared_options())
    return ({c.id for c in all_checks()} | keys | {k.rsplit(".", n)[0] for k in keys for n in (1, 2)}
            | {s.id for s in load_signatures()} | _fleet_result_ids())


def cited(paths: List[Path], root: Path = REPO) -> Dict[str, List[str]]:
    """token -> ['file:line', ...] of every citation a reader would take for a check id and that is not one."""
    known = known_ids()
    bad: Dict[str, List[str]] = {}
    for path in paths:
        rel = str(path.relative_to(root))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for token in TOKEN.findall(line):
                if token in RENAMED:  # only on the line that says so: "cumem.ipc is now gpu.cumem_ipc"
                    if RENAMED[token] in line:
                        continue
                elif token in known or token.endswith(FILE_SUFFIXES) or EXAMPLES.get(token) == rel:
                    continue
                bad.setdefault(token, []).append(f"{rel}:{number}")
    return bad


def _documents() -> List[Path]:
    files = subprocess.run(["git", "ls-files", "README.md", "docs"], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.split()
    return [REPO / f for f in files if f.endswith(".md") and not f.startswith("docs/gpu-runs/")]


def test_every_check_id_the_docs_cite_is_registered():
    assert len(_documents()) > 10
    assert cited(_documents()) == {}


def test_the_measure_can_fail(tmp_path):
    doc = tmp_path / "docs" / "x.md"
    doc.parent.mkdir()
    doc.write_text("run `--check node.ulimits` and `cumem.ipc`; `weight.sync` is now `comm.weight_sync`;\n"
                   "`nccl.collectives` and `--set train.layers=2`, `nccl.cuda_failure_999`, `node.json`\n")
    assert cited([doc], root=tmp_path) == {"cumem.ipc": ["docs/x.md:1"], "nccl.collectives": ["docs/x.md:2"]}
