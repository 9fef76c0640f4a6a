"""The layers hold (issue 10): no import goes from a lower layer up (report/ into doctor/ was one), no modules
import each other in a ring (facts/source <-> nvml/stack was one), and every top-level part of envbuild is a
layer of its own, so two packages cannot import each other unseen (knowledge <-> report was one).
tests/importgraph.py prints the numbers."""
from pathlib import Path

from importgraph import LAYERS, back_edges, cycles, graph, part

REPO = Path(__file__).resolve().parent.parent

def test_no_back_edges_and_no_cycles():
    g = graph(REPO)
    assert len(g) > 80  # the walk found the package
    assert back_edges(g) == []
    assert cycles(g) == []


def test_every_part_is_a_layer_of_its_own():
    parts = {part(m) for m in graph(REPO)}
    assert parts - set(LAYERS) == set(), "a new package or top-level module needs its place in importgraph.ORDER"
    assert len(set(LAYERS.values())) == len(LAYERS)


def _tree(tmp_path, files):
    for rel, text in files.items():
        path = tmp_path / "envbuild" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for folder in {(tmp_path / "envbuild" / rel).parent for rel in files} | {tmp_path / "envbuild"}:
        (folder / "__init__.py").touch()
    return graph(tmp_path)


def test_the_measure_can_fail(tmp_path):
    g = _tree(tmp_path, {"report/terminal.py": "def f():\n    from envbuild.doctor.registry import x\n",
                         "doctor/registry.py": "from envbuild.doctor import runner\n",
                         "doctor/runner.py": "import envbuild.doctor.registry\n"})
    assert back_edges(g) == [("envbuild.report.terminal", "envbuild.doctor.registry")]
    assert cycles(g) == [["envbuild.doctor.registry", "envbuild.doctor.runner"]]


def test_two_packages_importing_each_other_show_a_back_edge(tmp_path):
    """The loop that used to hide: knowledge and report once shared a layer, so this gave no back-edge."""
    g = _tree(tmp_path, {"knowledge/fold.py": "from envbuild.report.model import Result\n",
                         "report/model.py": "", "report/html.py": "from envbuild.knowledge import fold\n"})
    assert back_edges(g) == [("envbuild.knowledge.fold", "envbuild.report.model")]
    assert cycles(g) == []  # no module ring: only the layers tell
