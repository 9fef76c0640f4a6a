"""A driver that never answers NVML (a GPU fallen off the bus, a wedged kernel module: nvidia-smi hangs there too)
must not hang the doctor with it. The snapshot is given up after NVML_ANSWER_S and every check that needed it says
so as an error, never a skip, and the run ends with its report.

CI has no driver, so the test builds one that hangs: a libnvidia-ml.so.1 whose init functions sleep for ever, put
first on the loader path of the real CLI. The deadline is shortened (the module constant, set before the CLI
starts) so the test takes seconds, not the two minutes a user's run would wait.
"""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

HANGING_NVML = r"""
#include <unistd.h>
static int hang(void) { for (;;) pause(); return 0; }
int nvmlInit(void) { return hang(); }
int nvmlInit_v2(void) { return hang(); }
int nvmlInitWithFlags(unsigned int flags) { (void)flags; return hang(); }
int nvmlShutdown(void) { return 0; }
"""

DEADLINE_S = 3


def hanging_libnvidia_ml(tmp_path: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the hanging libnvidia-ml.so.1")
    src = tmp_path / "nvml_hangs.c"
    src.write_text(HANGING_NVML)
    lib_dir = tmp_path / "lib"
    lib_dir.mkdir()
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib_dir / "libnvidia-ml.so.1"), str(src)], check=True)
    return lib_dir


def doctor(tmp_path: Path, lib_dir: Path, *args: str) -> subprocess.CompletedProcess:
    launch = ("import sys, envbuild.facts.nvml as nvml; nvml.NVML_ANSWER_S = %d; "
              "from envbuild.cli import main; sys.argv[0] = 'envbuild'; main()" % DEADLINE_S)
    env = {**os.environ, "LD_LIBRARY_PATH": f"{lib_dir}:{os.environ.get('LD_LIBRARY_PATH', '')}",
           "TMPDIR": str(tmp_path)}
    return subprocess.run([sys.executable, "-c", launch, "doctor", *args], env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120)


@pytest.mark.parametrize("selection", [["--check", "node.*"], []], ids=["node-checks", "whole-static-run"])
def test_a_driver_that_never_answers_nvml_ends_in_errors_not_a_hang(tmp_path, selection):
    """With --check the snapshot is read when the first check asks; a whole run reads it ahead, beside the stack
    probe (envbuild/doctor/session.py StackAhead): both paths have the deadline."""
    lib_dir = hanging_libnvidia_ml(tmp_path)
    report = tmp_path / "report.json"
    started = time.monotonic()
    proc = doctor(tmp_path, lib_dir, *selection, "--json", str(report))
    took = time.monotonic() - started
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
    results = {r["check_id"]: r for r in json.loads(report.read_text())["results"]}
    hung = {cid: r for cid, r in results.items() if "NVML gave no answer in %d s" % DEADLINE_S in r["summary"]}
    assert "node.driver_version" in hung, {cid: (r["status"], r["summary"][:120]) for cid, r in results.items()}
    # node.driver_version names the fault (D3: the driver does not answer) and every other check that asked for NVML
    # is an error folded under it: one root cause, not ten
    root = hung.pop("node.driver_version")
    assert root["status"] == "fail" and root["causes"] == ["D3"], root
    assert "nvidia-smi" in root["summary"] and "dmesg" in root["remediation"]
    node = {cid: r["status"] for cid, r in hung.items() if cid.startswith("node.")}
    assert len(node) >= 5 and set(node.values()) == {"error"}, node
    assert all(r["summary"].startswith("consequence of node.driver_version (D3)")
               for cid, r in hung.items() if cid.startswith("node.")), hung
    # the GPU probes need NVML's device list: they say why they did not run, they do not start on a wedged driver
    assert all(r["status"] == "skip" for cid, r in hung.items() if cid.split(".")[0] in ("gpu", "comm")), hung
    assert "root cause: node.driver_version (D3);" in proc.stdout, proc.stdout[-1500:]
    # one wait for the whole run: later checks get the same answer at once instead of waiting again
    assert took < 60, took


def test_a_capture_of_a_node_whose_nvml_hung_replays_the_same_failure(tmp_path):
    """`capture --node` on that node, then `doctor --root` anywhere: the same D3 failure and the same errors (the
    bundle records that NVML hung, not only that it was unavailable), as the doctor's rule of replaying what it saw
    asks."""
    lib_dir = hanging_libnvidia_ml(tmp_path)
    bundle = tmp_path / "bundle"
    launch = ("import sys, envbuild.facts.nvml as nvml; nvml.NVML_ANSWER_S = %d; "
              "from envbuild.cli import main; sys.argv[0] = 'envbuild'; main()" % DEADLINE_S)
    env = {**os.environ, "LD_LIBRARY_PATH": f"{lib_dir}:{os.environ.get('LD_LIBRARY_PATH', '')}", "TMPDIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", launch, "capture", "--node", str(bundle), "-q"], env=env,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((bundle / ".envbuild" / "nvml.json").read_text())["hung"] is True
    report = tmp_path / "replay.json"
    proc = subprocess.run([sys.executable, "-m", "envbuild", "doctor", "--root", str(bundle), "--check", "node.*",
                           "--json", str(report)], capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    assert proc.returncode == 1, proc.stderr[-2000:]
    results = {r["check_id"]: r for r in json.loads(report.read_text())["results"]}
    assert results["node.driver_version"]["status"] == "fail" and results["node.driver_version"]["causes"] == ["D3"]
    assert "(when captured)" in results["node.driver_version"]["summary"]
    assert results["node.ecc"]["status"] == "error", results["node.ecc"]
