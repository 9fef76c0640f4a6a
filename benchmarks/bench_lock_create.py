"""Time `envbuild lock` and each phase of `envbuild create` on the fixture profile (offline, local channel).

    python benchmarks/bench_lock_create.py [--packages 200] [--size-kib 64] [--http-latency-ms 20]
    python benchmarks/bench_lock_create.py --pip-layer --python PY3.12 [--pairs 3]   # the pip layer's lock and
        # create against plain uv on real PyPI, cold and warm: the four ratios of one run (bench_pip_layer.py)

The fixture channel gets N filler packages (random, incompressible payloads of --size-kib each) so that
fetch/verify, linking and manifest hashing have real work. Anchor, measured in the same run: copying
and sha256-hashing the same archives with the standard library — the floor for the fetch phase. Runs:
cold create (empty cache), warm create (--force, archives already verified in the cache), and a resume
after a SIGKILL at the doctor phase (only doctor + swap left to do).

--http-latency-ms N serves the channel over loopback HTTP, each response held N ms (a remote channel's
round trip), so the fetch phase shows what fetching archives in parallel buys over one at a time; the
anchor is then N ms x archives (the floor of a one-at-a-time fetch) and fetch/anchor < 1 means overlap.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _envbuild_cli import create_phases, run_envbuild

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from fixturegen.conda_channel import Pkg, build_channel, default_packages, write_fixture_profile  # noqa: E402

def envbuild(args, env):
    """Every command of this benchmark runs offline: the fixture channel is local."""
    return run_envbuild(args, env, offline=True)


def main() -> int:
    if "--pip-layer" in sys.argv:
        from bench_pip_layer import main as pip_layer

        return pip_layer([x for x in sys.argv[1:] if x != "--pip-layer"])
    ap = argparse.ArgumentParser()
    ap.add_argument("--packages", type=int, default=200)
    ap.add_argument("--size-kib", type=int, default=64)
    ap.add_argument("--http-latency-ms", type=float, default=None,
                    help="serve the channel over loopback HTTP with this delay per response")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="envbuild-bench-"))
    try:
        fillers = [Pkg(f"filler{i}", "1.0", "h0_0", files={f"share/filler{i}/blob": os.urandom(a.size_kib * 1024)},
                       fmt="conda" if i % 2 else "tar.bz2") for i in range(a.packages)]
        hub = Pkg("filler-all", "1.0", "h0_0", depends=[f"filler{i} 1.0" for i in range(a.packages)],
                  files={"share/filler-all": b"hub\n"})
        t0 = time.monotonic()
        built = build_channel(tmp / "channel", default_packages() + fillers + [hub])
        t_channel = time.monotonic() - t0
        base = tmp / "lockfiles"
        prof = write_fixture_profile(base, tmp / "channel")
        prof.write_text(prof.read_text().replace('"foodata"]', '"foodata", "filler-all"]'))
        server = None
        if a.http_latency_ms is not None:
            server, url = _serve_slow(tmp / "channel", a.http_latency_ms / 1000)
            prof.write_text(prof.read_text().replace((tmp / "channel").as_uri(), url))
        env = {"ENVBUILD_LOCKFILES": str(base), "ENVBUILD_CACHE_DIR": str(tmp / "cache"),
               "ENVBUILD_ENVS_DIR": str(tmp / "envs"), "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}

        t0 = time.monotonic()  # anchor: stdlib copy + sha256 of every archive
        anchor_dir = tmp / "anchor"
        anchor_dir.mkdir()
        for path in built.values():
            shutil.copyfile(path, anchor_dir / path.name)
            hashlib.sha256((anchor_dir / path.name).read_bytes()).hexdigest()
        anchor = time.monotonic() - t0
        if server is not None:
            anchor = len(built) * a.http_latency_ms / 1000

        lock, t_lock = envbuild(["lock"], env)
        assert lock.returncode == 0, lock.stderr
        check, t_check = envbuild(["lock", "--check"], env)
        assert check.returncode == 0, check.stdout
        cold, t_cold = envbuild(["create", "--name", "fx"], env)
        assert cold.returncode == 0, cold.stderr
        warm, t_warm = envbuild(["create", "--name", "fx", "--force"], env)
        assert warm.returncode == 0, warm.stderr
        prof.write_text(prof.read_text().replace('FIXTURE_MARK = "a"', 'FIXTURE_MARK = "b"'))
        killed, _ = envbuild(["create", "--name", "fx"], dict(env, ENVBUILD_TEST_KILL_AT="doctor"))
        assert killed.returncode == -9
        resumed, t_resume = envbuild(["create", "--name", "fx"], env)
        assert resumed.returncode == 0, resumed.stderr

        total_mib = sum(p.stat().st_size for p in built.values()) / 2**20
        print(f"fixture: {len(built)} archives, {total_mib:.1f} MiB; channel build+index {t_channel:.2f}s")
        print(f"anchor ({'one-at-a-time latency floor: %g ms x %d archives' % (a.http_latency_ms, len(built)) if server else 'stdlib copy + sha256 of all archives'}): {anchor:.3f}s")
        print(f"lock: {t_lock:.2f}s   lock --check: {t_check:.2f}s   (whole CLI process)")
        for label, proc, wall in (("cold create", cold, t_cold), ("warm create", warm, t_warm),
                                  ("resume after kill@doctor", resumed, t_resume)):
            ph = create_phases(proc.stderr)
            detail = "  ".join(f"{k} {v:.3f}s" for k, v in ph.items())
            print(f"{label}: wall {wall:.2f}s | {detail}")
            if "fetch" in ph:
                print(f"    fetch/anchor = {ph['fetch'] / anchor:.2f}x")
        if server is not None:
            server.shutdown()
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _serve_slow(folder: Path, delay_s: float):
    """A loopback HTTP server for `folder` that holds each response `delay_s` (threaded, like a CDN)."""
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Slow(SimpleHTTPRequestHandler):
        def send_head(self):  # noqa: D102
            time.sleep(delay_s)
            return super().send_head()

        def log_message(self, *args):  # noqa: D102
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Slow, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


if __name__ == "__main__":
    sys.exit(main())
