"""The layers hold (issue 10): no import goes from a lower layer up (report/ into doctor/ was one), no modules
import each other in a ring (facts/source <-> nvml/stack was one). tests/importgraph.py prints the numbers."""
from pathlib import Path

from importgraph import back_edges, cycles, graph

REPO = Path(__file__).resolve().parent.parent


def test_no_back_edges_and_no_cycles():
    g = graph(REPO)
    assert len(g) > 80  # the walk found the package
    assert back_edges(g) == []
    assert cycles(g) == []


def test_the_measure_can_fail(tmp_path):
    pkg = tmp_path / "envbuild"
    (pkg / "report").mkdir(parents=True)
    (pkg / "doctor").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "report" / "__init__.py").write_text("")
    (pkg / "doctor" / "__init__.py").write_text("")
    (pkg / "report" / "terminal.py").write_text("def f():\n    from envbuild.doctor.registry import x\n")
    (pkg / "doctor" / "registry.py").write_text("from envbuild.doctor import runner\n")
    (pkg / "doctor" / "runner.py").write_text("import envbuild.doctor.registry\n")
    g = graph(tmp_path)
    assert back_edges(g) == [("envbuild.report.terminal", "envbuild.doctor.registry")]
    assert cycles(g) == [["envbuild.doctor.registry", "envbuild.doctor.runner"]]
