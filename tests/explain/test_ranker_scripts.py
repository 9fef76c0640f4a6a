"""The ranker's two scripts (benchmarks/train_ranker.py, benchmarks/ranker_variants.py) as a user runs them: without
scikit-learn, with a bad variant name and under Ctrl-C they end with one line and an exit code, never a traceback."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks"


def _env(extra_path: str = "") -> dict:
    parts = [p for p in (extra_path, str(REPO)) if p]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(parts)}


def test_without_scikit_learn_each_script_says_what_to_install(tmp_path):
    hidden = tmp_path / "sklearn"  # a package that fails to import, as if scikit-learn were absent
    hidden.mkdir()
    (hidden / "__init__.py").write_text("raise ImportError(\"No module named 'sklearn'\")\n")
    for script in ("train_ranker.py", "ranker_variants.py"):
        proc = subprocess.run([sys.executable, str(BENCH / script), "--out", str(tmp_path / "model.json")]
                              if script == "train_ranker.py" else [sys.executable, str(BENCH / script)],
                              capture_output=True, text=True, env=_env(str(tmp_path)), timeout=120)
        assert proc.returncode == 2, (script, proc.stderr)
        assert "Traceback" not in proc.stderr and "needs scikit-learn" in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "model.json").exists()  # nothing written


def test_an_unknown_variant_is_one_line_and_exit_2():
    proc = subprocess.run([sys.executable, str(BENCH / "ranker_variants.py"), "nonesuch"], capture_output=True,
                          text=True, env=_env(), timeout=120)
    assert proc.returncode == 2 and "unknown variant(s) nonesuch" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_ctrl_c_ends_with_130_and_no_traceback():
    proc = subprocess.Popen([sys.executable, str(BENCH / "ranker_variants.py"), "shipped"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env())
    try:
        time.sleep(3)  # inside the corpus scan or the first fold (minutes in all)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, (err, out[-500:])
    assert "Traceback" not in err and "interrupted" in err, err


def test_ctrl_c_while_scikit_learn_imports_ends_the_same_way(tmp_path):
    """scikit-learn takes a second or more to import; Ctrl-C in that second is still one line and 130."""
    slow = tmp_path / "sklearn"
    slow.mkdir()
    (slow / "__init__.py").write_text("import time\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, str(BENCH / "train_ranker.py"), "--out", str(tmp_path / "model.json")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(str(tmp_path)))
    try:
        time.sleep(2)  # inside the import's sleep
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, (err, out)
    assert "Traceback" not in err and err.strip() == "train_ranker.py: interrupted", err
    assert not (tmp_path / "model.json").exists()
