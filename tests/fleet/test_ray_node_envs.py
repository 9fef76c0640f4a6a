"""`envbuild doctor --ray` on a cluster whose nodes' Python environments differ, as they do on a real fleet: a head
with envbuild, a worker node whose Python has Ray but no envbuild, and one with an older envbuild. Each node runs
`ray start` (so its Ray workers) with its own interpreter: a venv whose site holds this environment's packages
minus envbuild (plus, for the old node, a copy of envbuild that says it is 0.0.9). Nothing is faked: the workers
really cannot import envbuild, or really import the other copy."""
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytest.importorskip("ray")

from envbuild.fleet.localray import LocalRayCluster  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def python_without_envbuild(root: Path, extra: tuple = ()) -> str:
    """A venv that sees every package of this environment except envbuild (and `extra` folders first)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    site = root / "site"
    site.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if entry.name.startswith(("envbuild", "__editable__")) or entry.suffix == ".pth":
            continue  # envbuild itself, its editable-install hook, and .pth files (they would not run there)
        (site / entry.name).symlink_to(entry)
    python = str(root / "venv" / "bin" / "python")
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, "fleet-test.pth").write_text("".join(f"{p}\n" for p in (*extra, site)))
    return python


def old_envbuild(root: Path) -> Path:
    """A copy of envbuild (with its payloads beside it, as in a checkout) whose version is 0.0.9."""
    shutil.copytree(REPO / "envbuild", root / "envbuild", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "checks").symlink_to(REPO / "checks")
    init = root / "envbuild" / "__init__.py"
    init.write_text(re.sub(r'__version__ = "[^"]+"', '__version__ = "0.0.9"', init.read_text()))
    return root


@pytest.fixture(scope="module")
def odd_cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("envs")
    bare = python_without_envbuild(root / "bare")
    probe = subprocess.run([bare, "-c", "import ray, envbuild"], capture_output=True, text=True, cwd=root)
    assert "No module named 'envbuild'" in probe.stderr, probe.stderr  # the premise: Ray yes, envbuild no
    old = python_without_envbuild(root / "old", extra=(old_envbuild(root / "old" / "pkg"),))
    with LocalRayCluster(workers=2, num_cpus=1, node_python={1: bare, 2: old}) as c:
        yield c
    assert c.leftovers() == [], "Ray processes left behind"


def test_node_without_envbuild_gets_the_drivers_and_mixed_versions_are_named(odd_cluster, tmp_path):
    # the driver runs outside the checkout: Ray puts the driver's working directory on every worker's sys.path
    proc = subprocess.run([sys.executable, "-m", "envbuild", "doctor", "--ray", odd_cluster.address, "--json",
                           str(tmp_path / "fleet.json")], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "COLUMNS": "300"})
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "shipping the driver's envbuild 0.1.0 to them (runtime_env py_modules)" in proc.stderr
    data = json.loads((tmp_path / "fleet.json").read_text())
    nodes = {n["node"].split("@")[-1]: n for n in data["nodes"]}
    assert sorted(nodes) == ["head", "w1", "w2"]

    bare = nodes["w1"]  # ran the doctor with the shipped envbuild: a full report, and a warning saying so
    assert bare["error"] is None and bare["envbuild_version"] == "0.1.0"
    shipped = [f for f in bare["fleet_findings"] if f["check_id"] == "fleet.envbuild_shipped"]
    assert shipped and shipped[0]["status"] == "warn", bare["fleet_findings"]
    assert "No module named 'envbuild'" in shipped[0]["summary"] and "pip install" in shipped[0]["remediation"]
    results = {r["check_id"]: r for r in bare["results"]}
    assert results["stack.env_policy"]["status"] != "error", results["stack.env_policy"]  # payloads shipped too

    old = nodes["w2"]  # its own envbuild 0.0.9 ran: the merge names the odd version, on the node and fleet-wide
    assert old["envbuild_version"] == "0.0.9" and old["node_status"] == "error"
    version = [f for f in old["fleet_findings"] if f["check_id"] == "fleet.envbuild_version"][0]
    assert "envbuild 0.0.9" in version["summary"] and "0.1.0" in version["summary"]
    fleet = {r["check_id"]: r for r in data["fleet_results"]}
    assert fleet["fleet.envbuild_version"]["status"] == "error"
    assert fleet["fleet.envbuild_version"]["evidence"]["nodes"] == {old["node"]: "0.0.9"}
    assert nodes["head"]["node_status"] != "error"
    assert "w2: report written by envbuild 0.0.9" in proc.stdout or "@w2: report written by envbuild 0.0.9" in proc.stdout
