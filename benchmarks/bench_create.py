"""Time every phase of `envbuild lock/create/pack/create --bundle` for the all-layer fixture profile.

The question it answers (issue 3): does a second node with a warm wheel cache skip the source builds?
The fixture's source build compiles a C extension with the system gcc (-O2, `--functions` kernels), so the
first create does real compile work; the second create goes to another prefix with the same
ENVBUILD_CACHE_DIR, as a second node sharing the cache would. Bar: the second create's builds phase takes
at most 20% of the first's.

    python benchmarks/bench_create.py [--functions 500] [--json out.json]

Prints a table of phase times (seconds, from create's own per-phase timings) and the ratio; exits 1 when the
ratio is over the bar.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from _envbuild_cli import create_phases, run_envbuild

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

BAR = 0.20


def envbuild(args, env, offline=False):
    """run_envbuild, stopping the benchmark when the command fails."""
    proc, seconds = run_envbuild(args, env, offline=offline)
    if proc.returncode != 0:
        sys.exit(f"envbuild {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return proc, seconds


def phases(proc) -> dict:
    """create's own per-phase timings; stops the benchmark when its output has none."""
    text = proc.stderr + proc.stdout
    found = create_phases(text)
    if not found:
        sys.exit("could not find create's phase timings in its output:\n" + " ".join(text.split())[-1500:])
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--functions", type=int, default=500, help="C kernels in the fixture extension (compile work)")
    ap.add_argument("--json", help="also write the numbers here")
    args = ap.parse_args()

    from fixturegen.e2e import make_world
    from fixturegen.wheels import serve

    with tempfile.TemporaryDirectory(prefix="envbuild-bench-") as tmp:
        t0 = time.monotonic()
        world = make_world(Path(tmp), c_functions=args.functions)
        fixture_s = time.monotonic() - t0
        env = {"ENVBUILD_CACHE_DIR": f"{tmp}/cache", "ENVBUILD_LOCKFILES": str(world.lockfiles)}
        with serve(world.index_dir) as base:
            world.write_profile(base)
            _, lock_s = envbuild(["lock"], env)
            first, first_s = envbuild(["create", "--prefix", f"{tmp}/envs/node1"], env)
            second, second_s = envbuild(["create", "--prefix", f"{tmp}/envs/node2"], env)
            _, pack_s = envbuild(["pack", "-o", f"{tmp}/fx.tar", "-q"], env)
        bundle_env = {"ENVBUILD_CACHE_DIR": f"{tmp}/cache3", "ENVBUILD_LOCKFILES": f"{tmp}/none"}
        third, third_s = envbuild(["create", "--profile", "fx", "--bundle", f"{tmp}/fx.tar", "--prefix",
                                   f"{tmp}/envs/node3"], bundle_env, offline=True)
        bundle_mb = Path(f"{tmp}/fx.tar").stat().st_size / 1e6

    p1, p2, p3 = phases(first), phases(second), phases(third)
    ratio = p2["builds"] / p1["builds"]
    names = [n for n in p1 if n in p2]
    print(f"fixture: C extension with {args.functions} kernels; fixture setup {fixture_s:.1f}s; "
          f"lock {lock_s:.2f}s; pack {pack_s:.2f}s ({bundle_mb:.2f} MB)")
    print(f"{'phase':<12}{'create #1 (cold)':>18}{'create #2 (warm cache)':>24}{'create --bundle (offline)':>27}")
    for n in names:
        print(f"{n:<12}{p1[n]:>18.2f}{p2[n]:>24.2f}{p3.get(n, float('nan')):>27.2f}")
    print(f"{'wall':<12}{first_s:>18.2f}{second_s:>24.2f}{third_s:>27.2f}")
    print(f"builds phase, warm/cold = {p2['builds']:.2f}s / {p1['builds']:.2f}s = {ratio:.3f} "
          f"(bar <= {BAR:.2f}: {'PASS' if ratio <= BAR else 'FAIL'}); whole second create / first builds = "
          f"{second_s / p1['builds']:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "functions": args.functions, "lock_s": lock_s, "pack_s": pack_s, "bundle_mb": bundle_mb,
            "create_cold": p1, "create_warm": p2, "create_bundle_offline": p3,
            "wall": {"cold": first_s, "warm": second_s, "bundle": third_s}, "builds_ratio": ratio, "bar": BAR,
        }, indent=2) + "\n")
    return 0 if ratio <= BAR else 1


if __name__ == "__main__":
    sys.exit(main())
