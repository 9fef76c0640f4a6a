"""`--set KEY=VALUE` as a user meets it: keys are declared by the checks (type, bounds, default, help); an unknown
key exits 2 naming the closest keys (not all forty), a malformed or out-of-bounds value exits 2 naming the bound,
both before any check runs; --list-options shows them all."""
import json
import subprocess
import sys

import pytest


def doctor(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "envbuild", "doctor", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def test_a_misspelt_key_exits_2_naming_the_closest_key(no_gpu_env):
    proc = doctor("--check", "node.*", "--set", "ofload.backend=tms")
    assert proc.returncode == 2
    assert "--set ofload.backend: no check takes this option; did you mean offload.backend?" in proc.stderr
    assert "train.layers" not in proc.stderr and "envbuild doctor --list-options" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


@pytest.mark.parametrize("setting, expected", [
    ("comm.cumem=2", "expected 0|1|both"),
    ("comm.sizes=1M", "expected int,int,..."),
    ("train.layers=four", "expected int"),
    ("train.sp=maybe", "expected bool"),
    ("offload.hook=ld", "expected preload|torch"),
    # was an `error` result of train.moe_step (exit 1) before the options were declared
    ("train.layres=2", "no check takes this option; did you mean train.layers?"),
    # bounds: these parsed and became an `error` row (exit 1) or a run of the default before
    ("train.steps=0", "--set train.steps=0: must be at least 1"),
    ("train.layers=-1", "--set train.layers=-1: must be at least 1"),
    ("train.layers=" + "9" * 30, "must be at most 1024"),
    ("gpu.compute.seconds=inf", "--set gpu.compute.seconds=inf: must be a finite number"),
    ("gpu.compute.seconds=nan", "--set gpu.compute.seconds=nan: must be a finite number"),
    ("gpu.compute.seconds=0", "--set gpu.compute.seconds=0: must be greater than 0"),
    ("comm.sizes=1024,0", "--set comm.sizes=1024,0: must be at least 1"),
    ("comm.phase_deadline_s=0", "--set comm.phase_deadline_s=0: must be at least 1"),
])
def test_a_malformed_value_exits_2_before_any_check_runs(setting, expected, tmp_path, no_gpu_env):
    out = tmp_path / "r.json"
    proc = doctor("--check", "node.*", "--set", setting, "--json", str(out))
    assert proc.returncode == 2, proc.stdout
    assert expected in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not out.exists()


def test_a_declared_key_runs_and_is_recorded_as_given(tmp_path, no_gpu_env):
    out = tmp_path / "r.json"
    proc = doctor("--check", "node.wsl", "--set", "offload.backend=tms", "--set", "comm.sizes=1048576,2097152",
                  "--json", str(out), "-q")
    assert proc.returncode in (0, 1), proc.stderr
    assert json.loads(out.read_text())["options"]["set"] == {"offload.backend": "tms", "comm.sizes": "1048576,2097152"}


def test_list_options_shows_type_default_checks_and_help():
    proc = doctor("--list-options")
    assert proc.returncode == 0, proc.stderr
    rows = {line.split()[0]: line for line in proc.stdout.splitlines()[1:]}
    assert {"offload.backend", "comm.phase_deadline_s", "train.layers", "stack.patch_dir"} <= set(rows)
    assert "auto|tms|cumem" in rows["offload.backend"] and " auto " in rows["offload.backend"]
    assert "comm.nccl_churn,comm.nccl_collectives" in rows["comm.phase_deadline_s"]
    assert "int" in rows["train.layers"] and " 4 " in rows["train.layers"] and "model depth" in rows["train.layers"]
