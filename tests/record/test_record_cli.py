"""`envbuild record env|submit|collect` as a user runs them, and the recorder in plain processes (no Ray): the
bootstrap route for children (spawn, fork, a site's own sitecustomize kept), one record per process, an
unwritable run dir that breaks nothing, secrets kept out."""
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BOOT = REPO / "envbuild" / "record" / "bootstrap"


def envbuild(*args, env=None):
    return subprocess.run([sys.executable, "-m", "envbuild", *args], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})}, timeout=60)


def test_env_prints_the_runtime_env_and_merges_into_a_given_one(tmp_path):
    proc = envbuild("record", "env", "--dir", str(tmp_path / "run"), "--hang-s", "60")
    assert proc.returncode == 0, proc.stderr
    ours = json.loads(proc.stdout)
    assert ours == {"worker_process_setup_hook": "envbuild.record.hook.setup",
                    "env_vars": {"ENVBUILD_RECORD_DIR": str(tmp_path / "run"), "ENVBUILD_RECORD_HANG_S": "60"}}
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["schema"] == "envbuild.record.run/1" and run["limits"]["events_jsonl_bytes"] == 1 << 20
    merged = json.loads(envbuild("record", "env", "--dir", str(tmp_path / "run"), "--merge",
                                 '{"env_vars": {"NCCL_CUMEM_ENABLE": "0"}, "worker_process_setup_hook": "nemo.setup",'
                                 ' "pip": ["x"]}').stdout)
    assert merged["env_vars"]["NCCL_CUMEM_ENABLE"] == "0" and merged["pip"] == ["x"]
    assert merged["env_vars"]["ENVBUILD_RECORD_NEXT_HOOK"] == "nemo.setup"  # theirs runs after ours


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "file").write_text("x")
    for args in (["record", "env", "--dir", str(tmp_path / "file" / "run")],
                 ["record", "env", "--dir", str(tmp_path / "run"), "--merge", "{bad"],
                 ["record", "env", "--dir", str(tmp_path / "run"), "--merge", "[1]"],
                 ["record", "collect", str(tmp_path / "nothing"), "-o", str(tmp_path / "o")],
                 ["record", "collect", str(tmp_path), "--ray", "127.0.0.1:1", "-o", str(tmp_path / "o")],
                 ["record", "submit", "--dir", str(tmp_path / "run"), "--", "ray", "job", "submit",
                  "--runtime-env-json", "nope", "--", "python", "x.py"]):
        proc = envbuild(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr


def test_submit_merges_into_the_commands_runtime_env_json(tmp_path):
    show = tmp_path / "bin" / "ray"
    show.parent.mkdir()
    show.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    show.chmod(0o755)
    env = {"PATH": f"{show.parent}{os.pathsep}{os.environ['PATH']}"}
    proc = envbuild("record", "submit", "--dir", str(tmp_path / "run"), "--", "ray", "job", "submit",
                    "--address", "http://h:8265", "--runtime-env-json", '{"env_vars": {"A": "1"}}', "--",
                    "python", "train.py", "--runtime-env-json", "untouched", env=env)
    assert proc.returncode == 0, proc.stderr
    argv = json.loads(proc.stdout)
    renv = json.loads(argv[argv.index("--runtime-env-json") + 1])
    assert renv["env_vars"] == {"A": "1", "ENVBUILD_RECORD_DIR": str(tmp_path / "run")}
    assert argv[-2:] == ["--runtime-env-json", "untouched"]  # the entrypoint's own arguments are left alone
    proc = envbuild("record", "submit", "--dir", str(tmp_path / "run"), "--", "ray", "job", "submit", "--",
                    "python", "train.py", env=env)
    argv = json.loads(proc.stdout)
    assert argv[:3] == ["job", "submit", "--runtime-env-json"]


CHILD = """
import multiprocessing as mp, os, sys, time
if __name__ == "__main__":
    for ctx in ("spawn", "fork"):
        p = mp.get_context(ctx).Process(target=time.sleep, args=(0.2,)); p.start(); p.join()
    import sitecustomize
    print("site:", getattr(sitecustomize, "MARK", None))
    raise RuntimeError("boom password=hunter2 ghp_abcdefghijklmnopqrstuvwxyz0123456789")
"""


def test_a_plain_process_tree_is_recorded_once_per_process_and_the_sites_sitecustomize_still_runs(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("MARK = 'site own'\n")
    script = tmp_path / "job.py"
    script.write_text(CHILD)
    run = tmp_path / "run"
    env = {**os.environ, "ENVBUILD_RECORD_DIR": str(run), "SECRET_TOKEN": "s3cr3t-value-abcdef",
           "PYTHONPATH": os.pathsep.join([str(BOOT), str(REPO), str(site)])}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 1 and "site: site own" in proc.stdout  # the chain-loaded one ran
    assert "RuntimeError: boom" in proc.stderr  # the user's traceback is still theirs
    dirs = sorted((run).glob("*/proc/*"))
    starts = [json.loads((d / "events.jsonl").read_text().splitlines()[0]) for d in dirs]
    assert all(s["kind"] == "start" for s in starts)
    assert len({s["pid"] for s in starts}) == len(starts) >= 3  # parent, spawn child (+ resource tracker), fork child
    assert {"sitecustomize", "fork"} <= {s["origin"] for s in starts}
    main = next(d for d, s in zip(dirs, starts) if s["ppid"] == os.getpid())
    failure = json.loads((main / "failure.json").read_text())
    assert failure["type"] == "builtins.RuntimeError" and "boom" in failure["message"]
    text = "".join(p.read_text() for d in dirs for p in d.iterdir() if p.is_file())
    assert "hunter2" not in text and "ghp_abcdef" not in text and "s3cr3t-value" not in text


def test_an_unwritable_run_dir_breaks_nothing_and_says_so_once(tmp_path):
    (tmp_path / "file").write_text("x")
    env = {**os.environ, "ENVBUILD_RECORD_DIR": str(tmp_path / "file" / "run"),
           "PYTHONPATH": os.pathsep.join([str(BOOT), str(REPO)])}
    code = ("import multiprocessing as mp, time\nif __name__ == '__main__':\n"
            "    p = mp.get_context('spawn').Process(target=time.sleep, args=(0.1,)); p.start(); p.join()\n"
            "    print('ok', p.exitcode)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok 0"
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("envbuild record: not recording"), proc.stderr


def test_collect_from_files_tolerates_cut_records_and_names_the_silent_ones(tmp_path):
    run = tmp_path / "run"
    now = 1_800_000_000.0
    for pid, evs, alive in ((11, [{"t": now, "kind": "start"}, {"t": now + 100, "kind": "exit"}], now + 99),
                            (12, [{"t": now, "kind": "start"}], now + 5),
                            (13, [{"t": now, "kind": "start"}], now + 100)):
        d = run / "h1" / "proc" / f"{pid}-1"
        d.mkdir(parents=True)
        (d / "start.json").write_text(json.dumps({"pid": pid, "role": "python", "heartbeat_s": 10}))
        (d / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evs) + '{"t": 1, "ki')
        (d / "alive.json").write_text(json.dumps({"t": alive}))
    (run / "h1" / "proc" / "14-1").mkdir()  # died before writing anything
    proc = envbuild("record", "collect", str(run), "-o", str(tmp_path / "out"), "--json")
    assert proc.returncode == 0, proc.stderr
    status = {p["pid"]: p["status"] for p in json.loads(proc.stdout)["processes"]}
    assert status == {11: "exited", 12: "killed or stopped", 13: "running", 14: "unknown"}
    assert (tmp_path / "out" / "h1" / "proc" / "12-1" / "events.jsonl").exists()


def test_a_ray_worker_writes_a_partial_start_at_once_and_the_full_one_later_or_at_exit(tmp_path):
    """In a Ray worker the redacted start record waits (its cost would lengthen the worker's start): a first
    start.json holds who it is and the short steering values; an exit before the delay writes the full one."""
    code = ("import json, os, sys, glob\nfrom envbuild.record import hook\nhook.setup(origin='ray')\n"
            "d = glob.glob(os.path.join(os.environ['ENVBUILD_RECORD_DIR'], '*', 'proc', '*'))[0]\n"
            "print(open(os.path.join(d, 'start.json')).read())\nprint(d)\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "ENVBUILD_RECORD_DIR": str(tmp_path / "run"),
           "ENVBUILD_RECORD_START_DELAY_S": "30", "NCCL_CUMEM_ENABLE": "0", "NCCL_SOCKET_IFNAME": "eth0-long-name",
           "NCCL_IB_TOKEN": "abc"}
    proc = subprocess.run([sys.executable, "-c", code, "--password=hunter2hunter2"], capture_output=True, text=True,
                          env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    text, folder = proc.stdout.rsplit("}", 1)
    early = json.loads(text + "}")
    assert early["partial"] is True and early["origin"] == "ray" and early["pid"] > 0
    assert early["env"]["NCCL_CUMEM_ENABLE"] == "0"
    assert "NCCL_SOCKET_IFNAME" not in early["env"] and "NCCL_IB_TOKEN" not in early["env"] and "argv" not in early
    full = json.loads((Path(folder.strip()) / "start.json").read_text())  # rewritten at exit
    assert "partial" not in full and full["env"]["NCCL_SOCKET_IFNAME"] == "eth0-long-name"
    assert "hunter2hunter2" not in json.dumps(full) and any("redacted" in a for a in full["argv"])
    events = (Path(folder.strip()) / "events.jsonl").read_text()
    assert '"setup_ms"' in events and '"kind": "exit"' in events


def test_without_detect_secrets_nothing_unscrubbed_is_written_and_the_error_is_one_line(tmp_path):
    """An interpreter where envbuild's secret scrubber cannot import (seen on a GPU node whose image had envbuild's
    other dependencies): `record env` writes no run.json and says what to install, exit 2, no traceback."""
    blocked = tmp_path / "blocked" / "detect_secrets"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text("raise ImportError('blocked for this test')\n")
    proc = envbuild("record", "env", "--dir", str(tmp_path / "run"),
                    env={"PYTHONPATH": f"{blocked.parent}{os.pathsep}{REPO}"})
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "detect-secrets" in proc.stderr and "pip install" in proc.stderr
    assert not (tmp_path / "run" / "run.json").exists()
