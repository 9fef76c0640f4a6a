"""tests/explain/corpus/add_run.py: a GPU run's tarball enters the corpus once, in the collection asked for."""
import importlib.util
import io
import shutil
import tarfile
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CORPUS = Path(__file__).resolve().parent / "corpus"


def _module(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("add_run", CORPUS / "add_run.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "manifest.toml").write_text('[[log]]\nfile = "a.log"\ncause = "U2"\n', encoding="utf-8")
    shutil.copy(CORPUS / "README.md", corpus / "README.md")
    monkeypatch.setattr(mod, "CORPUS", corpus)
    return mod, corpus


def _tarball(tmp_path) -> Path:
    cases = ('\n[[log]]\nfile = "gpu-s99-01.log"\nsource = "docs/gpu-runs/s99.sh"\nrepository = "envbuild/gpu-s99"\n'
             'cause = "O1"\n\n[[log]]\nfile = "notes.log"\ncause = "U2"\n')
    path = tmp_path / "run.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, text in (("run/cases.toml", cases), ("run/gpu-s99-01.log", "bus error\n"), ("run/notes.log", "x\n")):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_a_run_enters_once_with_its_collection(tmp_path, monkeypatch):
    mod, corpus = _module(tmp_path, monkeypatch)
    tarball = _tarball(tmp_path)
    assert mod.add(tarball, "held-out-x") == 0
    assert mod.add(tarball, "held-out-x") == 0  # twice adds nothing
    entries = tomllib.loads((corpus / "manifest.toml").read_text(encoding="utf-8"))["log"]
    assert [e["file"] for e in entries] == ["a.log", "gpu-s99-01.log"]  # a file not named like a run's log stays out
    assert entries[1]["collection"] == "held-out-x" and "collection" not in entries[0]
    assert (corpus / "gpu-s99-01.log").read_text() == "bus error\n"
    assert "## Per-class counts (2 logs)" in (corpus / "README.md").read_text(encoding="utf-8")


def test_an_entry_that_names_a_collection_gets_the_one_asked_for_once(tmp_path, monkeypatch):
    mod, corpus = _module(tmp_path, monkeypatch)
    tarball = _tarball(tmp_path)
    with tarfile.open(tarball) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    members["run/cases.toml"] = members["run/cases.toml"].replace(b'cause = "O1"', b'cause = "O1"\ncollection = "old"')
    with tarfile.open(tarball, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    assert mod.add(tarball, 'held-out-"q"') == 0
    entries = tomllib.loads((corpus / "manifest.toml").read_text(encoding="utf-8"))["log"]
    assert entries[1]["collection"] == 'held-out-"q"'


def test_a_tarball_that_cannot_be_read_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    mod, corpus = _module(tmp_path, monkeypatch)
    before = (corpus / "manifest.toml").read_text(encoding="utf-8")
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(b"x")
    for path in (bad, tmp_path / "missing.tar.gz"):
        assert mod.add(path) == 2
        assert "not a readable tarball" in capsys.readouterr().err
    assert (corpus / "manifest.toml").read_text(encoding="utf-8") == before
