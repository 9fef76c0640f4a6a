"""The explain corpus is data other tests and the benchmark trust: check that its manifest says what the folder holds.

Every log in tests/explain/corpus/ must be listed in manifest.toml and every listed log must exist; each entry names
a public thread (a URL) or, for a fault made on purpose, the script in this repository that made it, the
repository it comes from (the unit the benchmark holds out), one cause id that envbuild knows (causes.toml, the
shared U ids, ``none`` or ``unknown``) and who or what established it. These checks run on the data alone, without
the explain engine.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.9/3.10 only
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "explain" / "corpus"
MANIFEST = CORPUS / "manifest.toml"
CAUSES = REPO / "envbuild" / "knowledge" / "causes.toml"

# The non-node causes TEAM.md fixes for explain and corpus; causes.toml holds them once explain has added them.
SHARED_U_IDS = {"U1", "U2", "U3", "U4", "U5"}
LABELS = {"none", "unknown"}
REQUIRED = ("file", "source", "repository", "project", "cause", "established_by")
OPTIONAL = ("also", "confidence", "notes", "collection")
MAX_BYTES = 200 * 1024
MIN_LOGS = 200
MIN_THREADS = 100
URL = re.compile(r"^https://[A-Za-z0-9.-]+\.[A-Za-z]{2,}/\S+$")
NAME = re.compile(r"^[A-Za-z0-9_.-]+-\d+(-\d+)?\.log$")


def known_cause_ids() -> set[str]:
    """Ids a corpus label may use: causes.toml's, plus the shared U ids when causes.toml does not carry them yet."""
    ids = {entry["id"] for entry in tomllib.loads(CAUSES.read_text())["cause"]}
    if not ids & SHARED_U_IDS:
        ids |= SHARED_U_IDS
    return ids | LABELS


@pytest.fixture(scope="module")
def entries() -> list[dict]:
    data = tomllib.loads(MANIFEST.read_text(encoding="utf-8"))
    assert set(data) == {"log"}, f"manifest.toml has unexpected top-level keys: {sorted(set(data) - {'log'})}"
    return data["log"]


def test_every_entry_has_the_required_fields_and_nothing_else(entries):
    for entry in entries:
        missing = [key for key in REQUIRED if not str(entry.get(key, "")).strip()]
        extra = sorted(set(entry) - set(REQUIRED) - set(OPTIONAL))
        assert not missing, f"{entry.get('file', entry)}: missing {missing}"
        assert not extra, f"{entry['file']}: unknown keys {extra}"


def test_listed_files_and_folder_agree(entries):
    listed = [entry["file"] for entry in entries]
    duplicates = sorted({name for name in listed if listed.count(name) > 1})
    assert not duplicates, f"listed more than once: {duplicates}"
    on_disk = {path.name for path in CORPUS.glob("*.log")}
    assert sorted(set(listed) - on_disk) == [], "listed but missing"
    assert sorted(on_disk - set(listed)) == [], "in the folder but not listed"


def test_file_names_follow_project_number(entries):
    bad = [entry["file"] for entry in entries if not NAME.match(entry["file"])]
    assert not bad, f"names not of the form <project>-<number>[-<n>].log: {bad}"


def test_causes_are_known_ids(entries):
    known = known_cause_ids()
    for entry in entries:
        assert entry["cause"] in known, f"{entry['file']}: unknown cause {entry['cause']!r}"
        also = entry.get("also", [])
        assert isinstance(also, list), f"{entry['file']}: 'also' must be a list"
        for extra in also:
            assert extra in known - LABELS, f"{entry['file']}: unknown 'also' cause {extra!r}"
            assert extra != entry["cause"], f"{entry['file']}: 'also' repeats the cause"


def test_sources_are_urls_or_scripts_in_this_repository(entries):
    for entry in entries:
        src = entry["source"]
        assert URL.match(src) or (REPO / src).is_file(), f"{entry['file']}: source is neither a URL nor a file here: {src!r}"


def test_repository_is_the_one_the_source_names(entries):
    """The benchmark holds out one repository at a time: the field must say where the log really comes from."""
    for entry in entries:
        src, repo = entry["source"], entry["repository"]
        m = re.match(r"https://github\.com/([^/]+/[^/]+)/", src)
        if m:
            assert repo == m.group(1), f"{entry['file']}: repository {repo!r} but the thread is in {m.group(1)}"
        elif URL.match(src):
            assert repo == re.match(r"https://([^/]+)/", src).group(1), entry["file"]
        else:
            assert repo.startswith("envbuild/"), f"{entry['file']}: a run of this repository's own is envbuild/<run>"


def test_confidence_values(entries):
    for entry in entries:
        if "confidence" in entry:
            assert entry["confidence"] in {"high", "medium", "low"}, entry["file"]


def test_logs_are_small_nonempty_text(entries):
    for entry in entries:
        path = CORPUS / entry["file"]
        size = path.stat().st_size
        assert 0 < size <= MAX_BYTES, f"{entry['file']}: {size} bytes"
        path.read_text(encoding="utf-8")  # raises on non-UTF-8


def test_corpus_size_and_spread(entries):
    assert len(entries) >= MIN_LOGS, f"only {len(entries)} logs; the corpus needs at least {MIN_LOGS}"
    threads = {entry["source"] for entry in entries if URL.match(entry["source"])}
    assert len(threads) >= MIN_THREADS, f"only {len(threads)} public threads; the corpus needs {MIN_THREADS}"
    causes = {entry["cause"] for entry in entries}
    assert "none" in causes, "no negative (a log without a failure)"
    assert "unknown" in causes, "no log whose cause no thread established"
    assert len(causes - LABELS) >= 15, f"only {len(causes - LABELS)} distinct causes"


def test_the_seed_is_in(entries):
    seed = [entry for entry in entries if entry["source"] == "https://github.com/THUDM/slime/issues/1305"]
    assert len(seed) >= 2, "slime#1305 must be present with both failure locations"


def test_readme_counts_match_the_manifest(entries):
    """The README's per-class table is what people read first; it must not drift from the manifest."""
    readme = (CORPUS / "README.md").read_text(encoding="utf-8")
    table = readme.split("<!-- counts")[1].split("<!-- /counts -->")[0]
    stated = {}
    for line in table.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[1].isdigit():
            stated[cells[0]] = int(cells[1])
    actual: dict[str, int] = {}
    for entry in entries:
        actual[entry["cause"]] = actual.get(entry["cause"], 0) + 1
    assert stated == actual
    assert f"({len(entries)} logs)" in readme, "the README's total is stale"
