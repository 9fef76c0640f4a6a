"""The knowledge of causes: one entry per root cause, complete, and every cause id
that any registered check can report exists in it (checks added later are covered by iterating the
registry and their source)."""
import re
from pathlib import Path

import pytest

from envbuild.doctor.registry import all_checks
from envbuild.errors import InputFileError
from envbuild.knowledge import CAUSES_FILE, load_causes

RESEARCH_IDS = ([f"C{i}" for i in range(1, 11)] + [f"M{i}" for i in range(1, 6)] + [f"N{i}" for i in range(1, 4)]
                + [f"D{i}" for i in range(1, 11)] + [f"O{i}" for i in range(1, 5)]
                + [f"U{i}" for i in range(1, 6)]  # U: not the node's fault (envbuild explain names them)
                + ["C11"]  # the process sees no GPU (CUDA_VISIBLE_DEVICES): added for explain, issue 25
                + ["U6", "U7"])  # a process or node gone first: read from a recorded run dir (issue 22)
CHECKS_DIR = Path(__file__).resolve().parent.parent / "envbuild" / "doctor" / "checks"


def test_one_complete_entry_per_research_cause():
    causes = load_causes()
    assert sorted(causes) == sorted(RESEARCH_IDS)
    for c in causes.values():
        assert c.title and c.mechanism and c.detect and c.fix and c.confidence, c.id
        assert c.signatures and all(isinstance(s, str) and s.strip() for s in c.signatures), c.id
        assert c.sources and all(s.strip() for s in c.sources), c.id


def test_signatures_are_exact_log_strings_from_the_research():
    causes = load_causes()
    assert "CUDA driver is a stub library" in causes["C7"].signatures
    assert "include/alloc.h:112 NCCL WARN Cuda failure 999 'unknown error'" in causes["M1"].signatures
    assert "pidfd_getfd: Operation not permitted" in causes["M3"].signatures
    assert "Failed to initialize NVML: Driver/library version mismatch" in causes["D2"].signatures


def test_every_cause_a_registered_check_declares_exists():
    causes = load_causes()
    checks = all_checks()
    assert checks
    for c in checks:
        for cid in c.causes:
            assert cid in causes, f"{c.id} declares unknown cause {cid}"


def test_every_cause_id_written_in_a_check_module_exists():
    """Checks also name causes per result (causes=[...] in a Result): scan every check module's source."""
    causes = load_causes()
    found = {}
    for path in sorted(CHECKS_DIR.glob("*.py")):
        text = path.read_text()
        for block in re.findall(r"causes\s*=\s*[\[(]([^\])]*)[\])]", text):
            for cid in re.findall(r"[\"']([A-Z]\d{1,2})[\"']", block):
                found.setdefault(cid, path.name)
    assert found, "no cause ids found in the check modules"
    unknown = {cid: where for cid, where in found.items() if cid not in causes}
    assert not unknown, f"cause ids not in {CAUSES_FILE.name}: {unknown}"


def test_bad_knowledge_file_is_refused_with_file_and_line(tmp_path):
    load_causes.cache_clear()
    bad = tmp_path / "causes.toml"
    bad.write_text('[[cause]]\nid = "C1"\ntitle = "x\n')
    with pytest.raises(InputFileError) as exc:
        load_causes(bad)
    assert str(bad) in str(exc.value) and "line 3" in str(exc.value) or exc.value.line == 3
    bad.write_text('[[cause]]\nid = "C1"\ntitle = "t"\n')
    with pytest.raises(InputFileError) as exc:
        load_causes(bad)
    assert "cause #1 (C1) lacks mechanism" in str(exc.value)
    load_causes.cache_clear()


def test_malformed_causes_file_names_its_line(tmp_path):
    """The causes file is read like a profile: a TOML syntax error names file:line, on every Python."""
    load_causes.cache_clear()
    bad = tmp_path / "causes.toml"
    bad.write_text('[[cause]]\nid = "C1"\ntitle = "x\n')
    with pytest.raises(InputFileError) as exc:
        load_causes(bad)
    assert exc.value.line == 3
    assert str(exc.value).startswith(f"{bad}:3: malformed TOML")
    load_causes.cache_clear()
