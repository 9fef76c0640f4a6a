"""node.ulimits' fix names the limits its finding names: a nofile finding alone was told to raise memlock and stack."""
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fakenode import H200X2, derive_bundle  # noqa: E402


def ulimits(bundle, tmp_path):
    out = tmp_path / "r.json"
    subprocess.run([sys.executable, "-m", "envbuild", "doctor", "--root", str(bundle), "--check", "node.ulimits",
                    "--json", str(out), "-q"], capture_output=True, text=True, timeout=120)
    return [r for r in json.loads(out.read_text())["results"] if r["check_id"] == "node.ulimits"][0]


def test_a_nofile_finding_alone_is_fixed_with_nofile_only(tmp_path):
    r = ulimits(H200X2, tmp_path)  # the real node: hard nofile 20000, memlock and stack fine
    assert r["status"] == "warn" and r["summary"].startswith("hard nofile 20000")
    assert "nofile" in r["remediation"] and "-n 65536" in r["remediation"]
    assert "memlock" not in r["remediation"].lower() and "stack" not in r["remediation"].lower(), r["remediation"]


def test_a_memlock_and_nofile_finding_names_both(tmp_path):
    def low_memlock(b):
        lines = [("Max locked memory         65536                65536                bytes" if l.startswith("Max locked")
                  else l) for l in b.read("/proc/self/limits").splitlines()]
        b.write("/proc/self/limits", "\n".join(lines) + "\n")

    r = ulimits(derive_bundle(H200X2, tmp_path / "b", low_memlock), tmp_path)
    assert r["status"] == "fail"
    assert "LimitMEMLOCK=infinity" in r["remediation"] and "LimitNOFILE=65536" in r["remediation"]
    assert "stack" not in r["remediation"].lower(), r["remediation"]
