"""Slurm: the documented srun recipe on a real Slurm (munged + slurmctld + two slurmd on this machine, Debian's
slurm-wlm), and the HealthCheckProgram mode's drain line on a real node fault (the real 2xH200 bundle with
uncorrectable ECC errors on GPU 0) and on a user-side finding (no drain)."""
import json
import os
import shutil
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fakenode import H200X2, derive_bundle  # noqa: E402

ENVBUILD = [sys.executable, "-m", "envbuild"]
ROOT = Path(__file__).resolve().parents[2]


def run(argv, env=None, timeout=120):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})


def ecc_fault(b):
    b.device(0, lambda d: d["ecc_uncorrected"].__setitem__("volatile", 3))


@pytest.fixture(scope="module")
def ecc_bundle(tmp_path_factory):
    return derive_bundle(H200X2, tmp_path_factory.mktemp("ecc") / "bundle", ecc_fault)


def test_health_check_prints_a_drain_line_for_a_node_problem(ecc_bundle, tmp_path):
    t0 = time.monotonic()
    proc = run(ENVBUILD + ["doctor", "--health-check", "--root", str(ecc_bundle), "--json", str(tmp_path) + "/"],
               env={"SLURMD_NODENAME": "gpu-a7"})
    assert time.monotonic() - t0 < 60  # Slurm kills a HealthCheckProgram at 60 s
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = [l for l in proc.stdout.splitlines() if l.startswith("scontrol")]
    assert len(lines) == 1
    assert lines[0].startswith("scontrol update NodeName=gpu-a7 State=DRAIN Reason='envbuild: node.ecc")
    report = json.loads((tmp_path / "gpu-a7.json").read_text())
    assert report["health_check"]["node_problems"] and report["node"] == "gpu-a7"


def test_health_check_does_not_drain_for_a_user_problem(tmp_path):
    bundle = derive_bundle(H200X2, tmp_path / "b", lambda b: None)
    proc = run(ENVBUILD + ["doctor", "--health-check", "--root", str(bundle), "--strict"], env={"SLURMD_NODENAME": "n9"})
    # --strict turns the real node's warnings into failures: ulimits (O2) and HMM (D1) are the node's
    assert proc.returncode == 1 and "State=DRAIN" in proc.stdout
    proc = run(ENVBUILD + ["doctor", "--health-check", "--root", str(bundle), "--strict", "--skip", "node.*"],
               env={"SLURMD_NODENAME": "n9"})
    assert proc.returncode == 0 and "DRAIN" not in proc.stdout
    assert "user-side problem, not draining: stack." in proc.stdout and proc.stdout.rstrip().endswith("n9: OK")


def test_slurm_without_a_job_is_bad_usage():
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    proc = subprocess.run(ENVBUILD + ["doctor", "--slurm", "--json", "/tmp/x/"], capture_output=True, text=True, env=env)
    assert proc.returncode == 2 and "no SLURM_JOB_ID" in proc.stderr and "Traceback" not in proc.stderr


SLURM_CONF = """ClusterName=eb
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket={d}/msock/munge.sock
CredType=cred/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/linear
MpiDefault=none
ReturnToService=2
HealthCheckProgram={d}/hc/envbuild-hc
HealthCheckInterval=2
HealthCheckNodeState=ANY
NodeName=n1 NodeHostname=localhost Port={p1} CPUs=1 RealMemory=500
NodeName=n2 NodeHostname=localhost Port={p2} CPUs=1 RealMemory=500
PartitionName=p Nodes=n1,n2 Default=YES MaxTime=10 State=UP
"""


def _pid(path: Path):
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """munged, slurmctld and two slurmd (n1, n2) on this machine; stopped by their pid files."""
    if os.geteuid() != 0 or not all(shutil.which(b) for b in ("munged", "slurmctld", "slurmd", "srun")):
        pytest.skip("real Slurm needs root and Debian's slurm-wlm + munge (installed by .ci/run)")
    import socket

    def port():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    d = Path(tmp_path_factory.mktemp("slurm"))
    for sub in ("msock", "mstate", "state", "spool", "hc"):
        (d / sub).mkdir()
    # slurm.conf's HealthCheckProgram, as an admin installs it: a two-line script. slurmd gives it SLURMD_NODENAME
    # and PWD only (no PATH, no SLURM_CONF); PYTHONPATH is this checkout's envbuild. A node runs the doctor on the
    # bundle named in hc/<node> (a test writes it); without that file it passes at once.
    hc = d / "hc" / "envbuild-hc"
    hc.write_text(f"""#!/bin/sh
[ -f {d}/hc/$SLURMD_NODENAME ] || exit 0
PYTHONPATH={ROOT} exec {sys.executable} -m envbuild doctor --health-check --drain --root "$(cat {d}/hc/$SLURMD_NODENAME)" >>{d}/hc/$SLURMD_NODENAME.log 2>&1
""")
    hc.chmod(0o755)
    key = d / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    conf = d / "slurm.conf"
    conf.write_text(SLURM_CONF.format(d=d, ctld_port=port(), p1=port(), p2=port()))
    env = {"SLURM_CONF": str(conf)}
    pids = [d / "mstate" / "munged.pid", d / "slurmctld.pid", d / "slurmd-n1.pid", d / "slurmd-n2.pid"]
    try:
        r = run(["munged", "-f", "-S", f"{d}/msock/munge.sock", f"--key-file={key}", f"--pid-file={pids[0]}",
                 f"--log-file={d}/mstate/munged.log", f"--seed-file={d}/mstate/seed"])
        assert r.returncode == 0, r.stderr
        assert run(["slurmctld", "-f", str(conf)], env).returncode == 0
        for n in ("n1", "n2"):
            assert run(["slurmd", "-N", n, "-f", str(conf)], env).returncode == 0
        end = time.monotonic() + 60
        while time.monotonic() < end:
            info = run(["sinfo", "-h", "-o", "%T %D"], env).stdout.split()
            if info[:2] == ["idle", "2"]:
                break
            time.sleep(1)
        else:
            pytest.fail(f"Slurm nodes not idle: {info}")
        yield types.SimpleNamespace(env=env, dir=d)
    finally:
        for p in reversed(pids):
            pid = _pid(p)
            if pid:
                try:
                    os.kill(pid, 15)
                except OSError:
                    pass


@pytest.mark.slow
def test_srun_recipe_writes_one_report_per_node_and_drains(slurm, tmp_path, ecc_bundle):
    slurm = slurm.env
    out = tmp_path / "reports"
    out.mkdir()  # docs/fleet.md, "Slurm": the recipe, word for word but the env's path
    proc = run(["srun", "-N2", "--ntasks-per-node=1", sys.executable, "-m", "envbuild", "doctor", "--slurm",
                "--json", f"{out}/", "-q"], slurm, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["n1.json", "n2.json"]
    assert json.loads((out / "n1.json").read_text())["slurm"]["SLURMD_NODENAME"] == "n1"
    merged = run(ENVBUILD + ["report", "merge", str(out), "-q"])
    assert merged.stdout.startswith(("OK: 2 node(s)", "FAIL: 2 node(s)")), merged.stdout
    # the HealthCheckProgram mode with --drain, on n2, against a real slurmctld
    hc = run(ENVBUILD + ["doctor", "--health-check", "--drain", "--root", str(ecc_bundle)],
             {**slurm, "SLURMD_NODENAME": "n2"})
    assert hc.returncode == 1 and "State=DRAIN" in hc.stdout
    state = run(["sinfo", "-h", "-N", "-n", "n2", "-o", "%T|%E"], slurm).stdout.strip()
    assert state.startswith("drain") and "envbuild: node.ecc" in state, state
    assert run(["scontrol", "update", "NodeName=n2", "State=RESUME"], slurm).returncode == 0


def _node(slurm, name):
    """(state, reason) of a node as sinfo shows them."""
    state, _, reason = run(["sinfo", "-h", "-N", "-n", name, "-o", "%T|%E"], slurm.env).stdout.strip().partition("|")
    return state, reason


def _wait_for(slurm, name, pred, what, timeout=90):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        state, reason = _node(slurm, name)
        if pred(state, reason):
            return state, reason
        time.sleep(1)
    log = slurm.dir / "hc" / f"{name}.log"
    pytest.fail(f"{name}: {what} not seen in {timeout} s: {_node(slurm, name)}; "
                f"{log.read_text()[-2000:] if log.exists() else 'no health-check log'}")


@pytest.mark.slow
def test_health_check_program_as_slurmd_runs_it_drains_and_resumes_its_own_drains_only(slurm, tmp_path, ecc_bundle):
    """slurmd itself runs the HealthCheckProgram (its bare environment: no PATH, no SLURM_CONF): a node fault
    drains n2 with envbuild's reason; n2 healthy again is resumed; n1, drained by an admin, stays drained with the
    admin's reason although it passes."""
    healthy = derive_bundle(H200X2, tmp_path / "healthy", lambda b: None)
    hc = slurm.dir / "hc"
    assert run(["scontrol", "update", "NodeName=n1", "State=DRAIN", "Reason=admin: disk swap"], slurm.env).returncode == 0
    (hc / "n1").write_text(str(healthy))
    (hc / "n2").write_text(str(ecc_bundle))
    try:
        _wait_for(slurm, "n2", lambda s, r: s.startswith("drain") and r.startswith("envbuild: node.ecc"),
                  "a drain by envbuild")
        (hc / "n2").write_text(str(healthy))
        _wait_for(slurm, "n2", lambda s, r: s == "idle", "the resume of envbuild's drain")
        n2_log = (hc / "n2.log").read_text()
        assert "n2: drained" in n2_log and "n2: OK; resumed (envbuild had drained it: envbuild: node.ecc" in n2_log
        # n1 passed at least once meanwhile, and kept the admin's drain
        assert "drained by someone else (Reason='admin: disk swap'); left drained" in (hc / "n1.log").read_text()
        assert _node(slurm, "n1") == ("drained", "admin: disk swap")
        # a fault on the admin's node does not overwrite the admin's reason either
        (hc / "n1").write_text(str(ecc_bundle))
        end = time.monotonic() + 60
        while "already drained by someone else" not in (hc / "n1.log").read_text() and time.monotonic() < end:
            time.sleep(1)
        assert "already drained by someone else (Reason='admin: disk swap'); left as it is" in (hc / "n1.log").read_text()
        assert _node(slurm, "n1") == ("drained", "admin: disk swap")
        assert "Traceback" not in n2_log + (hc / "n1.log").read_text()
    finally:
        for n in ("n1", "n2"):
            (hc / n).unlink(missing_ok=True)
        time.sleep(3)  # a health check that already read hc/<node> finishes before the nodes are resumed
        for n in ("n1", "n2"):
            run(["scontrol", "update", f"NodeName={n}", "State=RESUME"], slurm.env)


def test_a_drain_without_slurm_conf_says_so_at_once(ecc_bundle, tmp_path):
    """SLURM_CONF naming no file (scontrol itself would retry reading it for 60 s): exit 3 and one line, at once;
    the printed drain line is still there to run by hand."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env.update(SLURMD_NODENAME="gpu-a7", SLURM_CONF=str(tmp_path / "missing.conf"))
    proc = subprocess.run(ENVBUILD + ["doctor", "--health-check", "--drain", "--root", str(ecc_bundle)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "State=DRAIN" in proc.stdout and "Traceback" not in proc.stderr
    if shutil.which("scontrol"):
        assert proc.stderr.strip() == (f"envbuild health-check gpu-a7: NOT drained: SLURM_CONF={tmp_path}/missing.conf "
                                       "(SLURM_CONF): no such file")
    else:
        assert proc.stderr.strip().startswith("envbuild health-check gpu-a7: NOT drained: no scontrol on PATH")


@pytest.mark.slow
def test_a_drain_scontrol_refuses_gives_its_exit_code_and_message(slurm, ecc_bundle):
    proc = run(ENVBUILD + ["doctor", "--health-check", "--drain", "--root", str(ecc_bundle)],
               {**slurm.env, "SLURMD_NODENAME": "n9"})
    assert proc.returncode == 3, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("envbuild health-check n9: NOT drained: scontrol exited 1: ") and "n9" in line[40:], line


def test_a_hung_scontrol_is_killed_with_its_children_and_said(ecc_bundle, tmp_path):
    """An scontrol that never answers (a wrapper that forks a sleeper, as a site's scontrol shim may): killed at its
    5 s deadline with everything it started, exit 3 and one line."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from procmark import marked

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/sh\nsleep 300 &\nsleep 300\n")
    (bin_dir / "scontrol").chmod(0o755)
    mark = f"hung-scontrol-{os.getpid()}"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURMD_NODENAME": "gpu-a7",
           "ENVBUILD_TEST_MARK": mark}
    t0 = time.monotonic()
    proc = subprocess.run(ENVBUILD + ["doctor", "--health-check", "--drain", "--root", str(ecc_bundle)],
                          capture_output=True, text=True, env=env, timeout=120)
    took = time.monotonic() - t0
    assert proc.returncode == 3 and "Traceback" not in proc.stderr, proc.stderr
    assert "NOT drained: scontrol did not answer within 5 s (killed; slurm.conf: " in proc.stderr
    assert took < 40, took
    assert marked(mark) == [], "the scontrol wrapper's sleepers outlived its deadline"


def test_drain_needs_health_check():
    proc = run(ENVBUILD + ["doctor", "--drain"])
    assert proc.returncode == 2 and "--drain" in proc.stderr and "--health-check" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_crash_of_envbuilds_own_check_never_drains(tmp_path):
    """The runner keeps a crashed check as an `error` row with its traceback: that is envbuild's bug, not the node's;
    an error row of a node check without one (a node command that hung) is the node's."""
    from envbuild.fleet.slurm import classify

    out = tmp_path / "r.json"
    run(ENVBUILD + ["doctor", "--root", str(H200X2), "--json", str(out), "-q"])
    report = json.loads(out.read_text())
    ecc = next(r for r in report["results"] if r["check_id"] == "node.ecc")
    limits = next(r for r in report["results"] if r["check_id"] == "node.ulimits")
    ecc.update(status="error", summary="the check itself failed: KeyError: 'x'", evidence={"traceback": "..."})
    limits.update(status="error", summary="journalctl did not answer within 15 s", evidence={"hung": True})
    node, user, own = classify(report)
    assert [r["check_id"] for r in own] == ["node.ecc"] and "node.ecc" not in [r["check_id"] for r in node + user]
    assert "node.ulimits" in [r["check_id"] for r in node]
