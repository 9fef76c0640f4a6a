"""The repository stands on its own (issue 23): no tracked file cites a document outside it — the team's notes
(its research folder and its design notes) are not shipped, so a user or a new maintainer could not open them. A
fact names its public source (a URL, an issue, a release note) or a document inside the repository instead.

The patterns are spelt in pieces so that this file does not cite what it looks for."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import List

REPO = Path(__file__).resolve().parent.parent
NOTES = "research"
OUTSIDE = re.compile(r"(?<![\w-])" + NOTES + r"/|\bDESIGN" r"\.md\b|(?<![\w/.-])(?:validators|error999|gpu-machine|"
                     r"envbuilders|landscape-2026-12|round3-anchors)" r"\.md\b|(?<![\w-])" + NOTES + r" (?:§|[CMNDOU]\d)")


def citations(root: Path, files: List[str]) -> List[str]:
    """'file:line: text' of every line that points outside the repository."""
    out = []
    for name in files:
        try:
            text = (root / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue  # binary files cite nothing
        out += [f"{name}:{n}: {line.strip()[:120]}" for n, line in enumerate(text.splitlines(), 1)
                if OUTSIDE.search(line)]
    return out


def test_no_tracked_file_cites_a_document_outside_the_repository():
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    assert len(files) > 100
    assert citations(REPO, files) == []


def test_the_measure_can_fail(tmp_path):
    (tmp_path / "a.py").write_text(f"# see {NOTES}/error999" ".md M4\nx = 1  # DESIGN" ".md says so\n"
                                   f"# the {NOTES} ranks: {NOTES} C3; validators" ".md §1.2\n")
    (tmp_path / "b.md").write_text("a log of ms-deepresearch/.venv and https://github.com/aurekaresearch/x is fine\n")
    assert [c.split(":")[:2] for c in citations(tmp_path, ["a.py", "b.md"])] == [["a.py", "1"], ["a.py", "2"],
                                                                               ["a.py", "3"]]
