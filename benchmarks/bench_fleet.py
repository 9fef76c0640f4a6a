"""Fleet benchmarks, each next to an anchor measured in the same run.

    python benchmarks/bench_fleet.py merge [--nodes 1000]     # goal: report merge of 1000 node reports <= 2 s
    python benchmarks/bench_fleet.py ray [--sizes 1,2,8,32]    # goal: static sweep of 8 Ray nodes <= 2x one node's

merge: 1000 copies of a real node report (docs/gpu-runs/doctor-quick-2gpu-s3.json, 2xH200, 50+ results) with
distinct host names, merged by the CLI (`envbuild report merge DIR -o fleet.json --junit --prometheus -q`), a
whole process as an admin runs it; the anchor is `python -c "import json"` reading the same files.
ray: a local Ray cluster of N nodes on this machine (`ray start` with --num-cpus 1 each, loopback only), then
`envbuild doctor --ray ADDRESS` (static) against it; the anchor is the same sweep on a 1-node cluster that is up
at the same time, its sweeps alternated with the N-node ones.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TEMPLATE = REPO / "docs" / "gpu-runs" / "doctor-quick-2gpu-s3.json"


def write_nodes(folder: Path, n: int, template: Path = TEMPLATE) -> None:
    data = json.loads(template.read_text())
    for i in range(n):
        data["host"]["hostname"] = f"gpu-node-{i:04d}"
        (folder / f"gpu-node-{i:04d}.json").write_text(json.dumps(data))


CPU = []  # CPU seconds (user + sys) of each timed child: on a shared machine wall time counts the others' load


def timed(argv, env=None) -> float:
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(map(str, argv))} exited {proc.returncode}: {proc.stderr[-800:]}")
    return dt


def bench_merge(nodes: int, template: Path = TEMPLATE) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "nodes"
        src.mkdir()
        write_nodes(src, nodes, template)
        out = Path(tmp) / "out"
        out.mkdir()
        read_all = f"import json,pathlib\nfor p in sorted(pathlib.Path({str(src)!r}).glob('*.json')): json.loads(p.read_text())"
        anchor = min(timed([sys.executable, "-c", read_all]) for _ in range(3))
        cpu_anchor = min(CPU[-3:])
        cli = [sys.executable, "-m", "envbuild", "report", "merge", str(src), "-q"]
        t_json = min(timed(cli + ["-o", str(out / "fleet.json")]) for _ in range(3))
        cpu_json = min(CPU[-3:])
        t_all = min(timed(cli + ["-o", str(out / "fleet.json"), "--junit", str(out / "f.xml"),
                                 "--prometheus", str(out / "f.prom")]) for _ in range(3))
        cpu_all = min(CPU[-3:])
        size = sum(p.stat().st_size for p in src.iterdir()) / 1e6
        print(f"{nodes} node reports, {size:.0f} MB ({template.name} each)")
        print(f"{'what':46} {'wall s':>7} {'cpu s':>6} {'goal s':>7} {'x anchor':>9}")
        print(f"{'python: json.loads of every file (anchor)':46} {anchor:7.2f} {cpu_anchor:6.2f} {'':>7} {1.0:9.1f}")
        for name, t, c in (("report merge -o fleet.json", t_json, cpu_json),
                           ("report merge -o --junit --prometheus", t_all, cpu_all)):
            print(f"{name:46} {t:7.2f} {c:6.2f} {2.0:7.1f} {t / anchor:9.1f}  {'ok' if t <= 2.0 else 'OVER GOAL (wall)'}")


def _sweep_argv(cluster) -> list:
    return [sys.executable, "-m", "envbuild", "doctor", "--ray", cluster.address, "-q"]


def bench_ray(sizes, repeats: int = 3) -> None:
    """Each size N next to the 1-node anchor, both clusters up at once and their sweeps alternated (anchor, N,
    anchor, N, ...), best of `repeats` each: on a machine whose other users come and go, the anchor and the
    N-node sweep then see the same load. A cluster this machine cannot start is said, not crashed on."""
    from envbuild.fleet.localray import LocalRayCluster

    env = dict(os.environ, COLUMNS="300")
    rows = []
    with LocalRayCluster(workers=0, num_cpus=1) as one:
        timed(_sweep_argv(one), env)  # warm-up: the first sweep of a cluster also fills the OS page cache
        for n in sizes:
            if n == 1:
                continue
            t0 = time.perf_counter()
            try:
                cluster = LocalRayCluster(workers=n - 1, num_cpus=1).__enter__()
            except (RuntimeError, OSError, subprocess.SubprocessError) as exc:  # it stopped what it started
                why = str(exc).strip().splitlines()
                print(f"N={n:3d}: cluster did not start on this machine ({os.cpu_count()} CPUs) after "
                      f"{time.perf_counter() - t0:.0f} s: {why[0][:300] if why else exc}", flush=True)
                rows.append((n, None, None))
                continue
            try:
                print(f"N={n:3d}: cluster up in {time.perf_counter() - t0:.0f} s", flush=True)
                timed(_sweep_argv(cluster), env)
                anchor, sweep = [], []
                for _ in range(repeats):
                    anchor.append(timed(_sweep_argv(one), env))
                    sweep.append(timed(_sweep_argv(cluster), env))
                rows.append((n, min(anchor), min(sweep)))
                print(f"N={n:3d}: static sweep {min(sweep):6.2f} s, 1-node anchor {min(anchor):6.2f} s", flush=True)
            finally:
                cluster.stop()
    print(f"{'nodes':>5} {'1-node s':>9} {'sweep s':>8} {'x one node':>10} {'s per added node':>17}")
    for n, anchor, t in rows:
        if t is None:
            print(f"{n:5d} {'':>9} {'':>8} {'':>10} {'':>17}  did not start on {os.cpu_count()} CPUs")
            continue
        verdict = "" if n != 8 else ("ok (goal <= 2.0)" if t <= 2 * anchor else "OVER GOAL (2.0)")
        print(f"{n:5d} {anchor:9.2f} {t:8.2f} {t / anchor:10.2f} {(t - anchor) / (n - 1):17.2f}  {verdict}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    m = sub.add_parser("merge")
    m.add_argument("--nodes", type=int, default=1000)
    m.add_argument("--template", type=Path, default=TEMPLATE, help="the node report copied N times")
    r = sub.add_parser("ray")
    r.add_argument("--sizes", default="1,2,8,32")
    r.add_argument("--repeats", type=int, default=3, help="timed sweeps per size and of the anchor (best kept)")
    args = ap.parse_args()
    if args.what == "merge":
        bench_merge(args.nodes, args.template)
    else:
        bench_ray([int(x) for x in args.sizes.split(",")], args.repeats)


if __name__ == "__main__":
    main()
