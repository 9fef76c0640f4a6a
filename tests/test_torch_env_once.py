"""The payload tests' torch (tests/torch_env.py) is installed once a session. A test module or conftest that imports
the fixture defines a session fixture of its own, which pip-installs the 0.9 GB CPU torch once more: nine such
imports put 8 GB on the CI disk. Only tests/conftest.py may import it."""
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
IMPORT = re.compile(r"^\s*(from\s+torch_env\s+import|import\s+torch_env\b)", re.M)


def test_only_the_top_conftest_imports_the_torch_fixture():
    importers = sorted(str(p.relative_to(TESTS)) for p in TESTS.rglob("*.py") if IMPORT.search(p.read_text()))
    assert importers == ["conftest.py"], importers
