"""The knowledge explain reads: every signature and fact entry loads alone, matches its own example line, and
the loader refuses a malformed entry naming the file and line."""
from pathlib import Path

import pytest

from envbuild.errors import InputFileError
from envbuild.knowledge import load_causes
from envbuild.knowledge.signatures import (SIGNATURES_DIR, load_facts, load_flips, load_signature_file,
                                           load_signatures)

FILES = sorted(SIGNATURES_DIR.glob("*.toml"))
SIGS = load_signatures()


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_each_file_loads_alone(path):
    assert load_signature_file(path)


@pytest.mark.parametrize("sig", SIGS, ids=[s.id for s in SIGS])
def test_signature_matches_its_example_and_names_known_causes(sig):
    assert sig.pattern.search(sig.example), sig.id
    assert sig.holds_key(sig.example), sig.id
    causes = load_causes()
    assert set(sig.supports) <= set(causes) and set(sig.rules_out) <= set(causes)
    assert sig.source.strip() and sig.means.strip()


def test_facts_extract_their_expected_values():
    facts = load_facts()
    ids = {f.id for f in facts}
    assert {"nccl_version", "cuda_driver_version", "driver_version", "torch_version", "gpu_model", "nranks",
            "framework", "phase", "failing_call"} <= ids
    for f in facts:
        assert f.value(f.pattern.search(f.example))


def test_flips_name_known_causes():
    flips = load_flips()
    assert flips["N1"][0].set == "NCCL_NVLS_ENABLE=0"
    assert flips["M1"][0].set == "NCCL_CUMEM_ENABLE=0"
    assert flips["N3"][0].set == "NCCL_P2P_DISABLE=1"


def _write(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "bad.toml"
    p.write_text(body)
    return p


def test_pattern_that_misses_its_example_is_refused_with_file_and_line(tmp_path):
    p = _write(tmp_path, '# header\n\n[[signature]]\nid = "x.ok"\npattern = "foo"\nkey = "foo"\nmeans = "m"\n'
                         'source = "s"\nexample = "foo"\n\n[[signature]]\nid = "x.bad"\npattern = "bar"\nkey = "bar"\n'
                         'means = "m"\nsource = "s"\nexample = "baz"\n')
    with pytest.raises(InputFileError) as exc:
        load_signature_file(p)
    assert f"{p}:11" in str(exc.value) and "x.bad" in str(exc.value)


@pytest.mark.parametrize("field,value,words", [
    ("supports", '{ Z9 = 1.0 }', "unknown cause"),
    ("supports", '{ C1 = 9.0 }', "weight"),
    ("kind", '"maybe"', "kind"),
    ("pattern", '"(unclosed"', "does not compile"),
    ("colour", '"red"', "unknown field"),
    ("written_from", '["not a repository"]', "written_from"),
])
def test_bad_fields_are_refused(tmp_path, field, value, words):
    entry = {"id": '"x.y"', "pattern": '"foo"', "key": '"foo"', "means": '"m"', "source": '"s"', "example": '"foo"'}
    entry[field] = value
    p = _write(tmp_path, "[[signature]]\n" + "".join(f"{k} = {v}\n" for k, v in entry.items()))
    with pytest.raises(InputFileError) as exc:
        load_signature_file(p)
    assert words in str(exc.value) and f"{p}:1" in str(exc.value)


def test_key_missing_from_example_is_refused(tmp_path):
    p = _write(tmp_path, '[[signature]]\nid = "x.y"\npattern = "fo+"\nkey = "fooo"\nmeans = "m"\nsource = "s"\nexample = "foo"\n')
    with pytest.raises(InputFileError, match="pre-filter"):
        load_signature_file(p)


def test_malformed_toml_names_the_line(tmp_path):
    p = _write(tmp_path, '[[signature]]\nid = "x.y"\npattern = \n')
    with pytest.raises(InputFileError) as exc:
        load_signature_file(p)
    assert f"{p}:3" in str(exc.value)
