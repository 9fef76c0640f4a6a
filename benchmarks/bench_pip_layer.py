"""The pip layer's lock and create against plain uv, in one run, on real PyPI (this benchmark uses the
network and several GB of disk: run it where PyPI is reachable, with --work on a disk that has room).

    python benchmarks/bench_lock_create.py --pip-layer --python /path/to/python3.12 \
        [--profile slime-v0.3.1-cu130] [--pairs 3] [--work /tmp]
    (the same as: python benchmarks/bench_pip_layer.py --python ...)

Prints four ratios, ours / anchor, each the median of interleaved pairs (--pairs cold, --warm-pairs warm;
anchor first in even pairs, ours first in odd ones: on a shared VM the page cache is reclaimed under the
runs and a warm install's seconds drift from one run to the next, so a fixed order would favour one side),
every command timed as a whole process as a user runs it:

  lock   `envbuild lock --only pip` on a copy of the profile folder, against `uv pip compile` of the same
         requirements with the flags envbuild gives uv (--python-version, --python-platform,
         --generate-hashes, --only-binary :all:, --index-strategy first-index, --exclude-newer, the
         profile's index, pylock output, the profile's pylock.toml as the existing output: uv's version
         preferences, which envbuild hands uv too)
  create `envbuild create --backend venv --python PY --profile P --prefix DIR` against `uv venv DIR
         --python PY` + `uv pip install --python DIR/bin/python --require-hashes --no-deps -r
         pylock.toml` (the committed lock, in the PEP 751 form: it names each chosen file, so uv resolves
         nothing and asks no index, the fastest way a uv user installs a hashed lock; from
         requirements.lock.txt uv also reads the index pages), the two uv commands timed together

cold: each run on an empty cache of its own (uv's, and envbuild's whole cache dir), so each cold create
downloads the whole layer (several GB for a CUDA stack). warm: a rerun after a cold run, each side on the
caches its last cold run filled: ONE uv cache for both sides (which also shows that create shares uv's
cache: a create that did not would download again), and for envbuild its own cache dir too (what create
keeps for a rerun with the same inputs, envbuild.install.rerun_cache). The goal is <= 1.2x for each.
Progress goes to stderr, one line per timed command; the load average is printed at the start and end.

The committed profile is used as it is (its folder copied, nothing stripped, the pip lock as committed:
nothing is re-locked for the create runs). Its [[recipe.git]] sources and the [[recipe.build]] entries built
from them are not pip-layer work and the uv anchor cannot do them (uv installs wheels from a lock; it clones
no checkout at a commit, applies no patch, builds nothing against the env's torch), so create runs with
`--without NAME` for each git source (which also leaves out the builds from it); the output says so.

Peak memory of create is sampled from /proc every 0.2 s over the whole process tree (envbuild, uv, the
doctor gate's stack probe): the largest sum of RSS over the tree at one instant, and which process was the
largest then; plus the envbuild process alone (its own getrusage at exit). The goal: <= 300 MB.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from _envbuild_cli import create_phases  # noqa: E402

from envbuild.lock.pip_lock import uv_python_platform  # noqa: E402
from envbuild.lock.pip_outputs import target  # noqa: E402
from envbuild.lock.uv_cli import uv_bin, uv_env  # noqa: E402
from envbuild.profile import load_profile, lockfiles_base  # noqa: E402

GOAL = 1.2
# envbuild's own peak RSS, printed by the process itself at exit (wait4 only sees the largest process)
_SELF_RSS = ("import atexit, resource, runpy, sys\n"
             "atexit.register(lambda: sys.stderr.write('BENCH_SELF_RSS_KB %d\\n' % "
             "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))\n"
             "sys.argv = ['envbuild'] + sys.argv[1:]\n"
             "runpy.run_module('envbuild', run_name='__main__', alter_sys=True)\n")


class Run:
    """One timed process: wall seconds, the largest RSS of its process tree (wait4), its output."""

    def __init__(self, cmd: Sequence[str], env: Dict[str, str], cwd: Optional[Path] = None):
        import threading

        t0 = time.monotonic()
        proc = subprocess.Popen([str(c) for c in cmd], env=env, cwd=cwd, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        got: Dict[str, str] = {}
        readers = [threading.Thread(target=lambda n=n, f=f: got.__setitem__(n, f.read()))
                   for n, f in (("out", proc.stdout), ("err", proc.stderr))]
        stop = threading.Event()
        self.tree_peak_kb, self.tree_peak_top = 0, ""
        readers.append(threading.Thread(target=self._sample_tree, args=(proc.pid, stop)))
        for r in readers:
            r.start()
        _, status, usage = os.wait4(proc.pid, 0)
        self.wall = time.monotonic() - t0
        stop.set()
        proc.returncode = os.waitstatus_to_exitcode(status)
        for r in readers:
            r.join()
        self.tree_rss_kb = usage.ru_maxrss
        self.stdout, self.stderr, self.returncode = got.get("out", ""), got.get("err", ""), proc.returncode
        m = re.search(r"BENCH_SELF_RSS_KB (\d+)", self.stderr)
        self.self_rss_kb = int(m.group(1)) if m else None
        words = [os.path.basename(str(c)) for c in cmd if not str(c).startswith("import ")]  # not _SELF_RSS
        _progress(f"{self.wall:6.2f}s  {' '.join(words[:4])} ...")
        if proc.returncode != 0:
            raise SystemExit(f"failed ({proc.returncode}): {' '.join(map(str, cmd))}\n{self.stderr[-3000:]}")

    def _sample_tree(self, root: int, stop) -> None:
        """Every 0.2 s: the RSS of `root` and all its descendants (from /proc), keeping the largest sum and
        the name and RSS of the largest process at that instant."""
        page_kb = os.sysconf("SC_PAGE_SIZE") // 1024
        while not stop.wait(0.2):
            parent: Dict[int, int] = {}
            info: Dict[int, Tuple[str, int]] = {}
            for d in os.listdir("/proc"):
                if not d.isdigit():
                    continue
                try:
                    with open(f"/proc/{d}/stat", "rb") as fh:
                        raw = fh.read().decode(errors="replace")
                except OSError:
                    continue
                name, rest = raw[raw.index("(") + 1:raw.rindex(")")], raw[raw.rindex(")") + 2:].split()
                parent[int(d)] = int(rest[1])
                info[int(d)] = (name, int(rest[21]) * page_kb)
            tree = {root}
            grew = True
            while grew:
                new = {p for p, pp in parent.items() if pp in tree and p not in tree}
                tree |= new
                grew = bool(new)
            procs = [info[p] for p in tree if p in info]
            total = sum(r for _, r in procs)
            if procs and total > self.tree_peak_kb:
                top = max(procs, key=lambda x: x[1])
                self.tree_peak_kb = total
                self.tree_peak_top = f"{top[0]} {top[1] / 1024:.0f} MB of {len(procs)} processes"


def _progress(line: str) -> None:
    sys.stderr.write(f"[bench {time.strftime('%H:%M:%S')}] {line}\n")
    sys.stderr.flush()


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def envbuild_cmd(*args: str) -> List[str]:
    return [sys.executable, "-c", _SELF_RSS, *args]


def envbuild_env(**extra: str) -> Dict[str, str]:
    """envbuild's environment: this checkout first, and bytecode on, as an installed envbuild has it (pip
    compiles a wheel's modules at install; a PYTHONDONTWRITEBYTECODE=1 shell would make every run compile
    all of envbuild from source, which no user pays)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return dict(env, PYTHONPATH=str(REPO), **extra)


def first_second(i: int) -> Tuple[str, str]:
    """Which side runs first in pair `i` (alternating: see the module docstring)."""
    return ("anchor", "ours") if i % 2 == 0 else ("ours", "anchor")


def median(xs: List[float]) -> float:
    return statistics.median(xs)


def ratio_line(label: str, ours: List[float], anchor: List[float]) -> str:
    r = median(ours) / median(anchor)
    spread = lambda xs: "/".join(f"{x:.2f}" for x in xs)  # noqa: E731
    return (f"{label:<13} ours {median(ours):7.2f}s  anchor {median(anchor):7.2f}s  = {r:.2f}x  "
            f"(goal <= {GOAL}x: {'met' if r <= GOAL else 'NOT met'}; runs ours {spread(ours)}, anchor {spread(anchor)})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", required=True, help="an interpreter of the profile's Python version")
    ap.add_argument("--profile", default="slime-v0.3.1-cu130")
    ap.add_argument("--pairs", type=int, default=3, help="interleaved pairs per cold measurement (medians)")
    ap.add_argument("--warm-pairs", type=int, default=5,
                    help="interleaved pairs per warm measurement (seconds each, and the noisier ones)")
    ap.add_argument("--work", default=None, help="where caches and envs go (default: the temp dir)")
    ap.add_argument("--skip-cold-create", action="store_true",
                    help="leave out the cold create pairs (each downloads the whole layer twice)")
    ap.add_argument("--cold-create-pairs", type=int, default=None,
                    help="pairs for cold create (default --pairs; each pair downloads the whole layer twice)")
    a = ap.parse_args(argv)
    base = lockfiles_base(None)
    profile = load_profile(a.profile, base)
    recipe = profile.require_recipe()
    python_version, tags = target(profile, recipe)
    tmp = Path(tempfile.mkdtemp(prefix="envbuild-bench-pip-", dir=a.work))
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "envbuild"), str(REPO / "checks")],
                   env=envbuild_env(), check=True, capture_output=True)
    try:
        lockfiles = tmp / "lockfiles"
        shutil.copytree(profile.directory, lockfiles / a.profile)
        without = [g.name for g in recipe.git]  # the anchor cannot do these (module docstring)
        without_args = [x for name in without for x in ("--without", name)]
        lock_file = lockfiles / a.profile / "requirements.lock.txt"
        pylock_file = lockfiles / a.profile / "pylock.toml"
        committed = lock_file.read_text(encoding="utf-8")
        load_at_start = load_average()
        n_pins = sum(1 for ln in committed.splitlines() if "==" in ln and not ln.startswith((" ", "#")))

        # --- lock
        relock = tmp / "relock"
        shutil.copytree(lockfiles, relock)
        project = tmp / "uv-project"
        project.mkdir()
        (project / "requirements.in").write_text("\n".join(recipe.pip_requirements) + "\n", encoding="utf-8")
        uv_lock_cmd = [uv_bin(), "pip", "compile", "--no-config", "requirements.in", "--no-header", "-o",
                       "pylock.toml", "--python-version", python_version, "--python-platform",
                       uv_python_platform(tags), "--generate-hashes", "--only-binary", ":all:",
                       "--index-strategy", "first-index", "--default-index", recipe.pip.indexes[-1].url]
        if recipe.pip.exclude_newer:
            uv_lock_cmd += ["--exclude-newer", recipe.pip.exclude_newer]
        lock_times: Dict[Tuple[str, str], List[float]] = {}

        def lock_pair(state: str, i: int) -> None:
            for who in first_second(i):
                cache = tmp / f"lock-cache-{who}-{i}"  # ours: $ENVBUILD_CACHE_DIR, uv's cache in its uv/
                if state == "cold":
                    shutil.rmtree(cache, ignore_errors=True)
                if who == "anchor":
                    # the same version preferences envbuild hands uv (envbuild.lock.pip_outputs: the profile's
                    # pylock.toml where uv writes its output), and not the previous pair's output
                    shutil.copyfile(pylock_file, project / "pylock.toml")
                    run = Run(uv_lock_cmd, uv_env(cache), cwd=project)
                else:
                    run = Run(envbuild_cmd("lock", "--only", "pip", "--profile", a.profile, "--lockfiles",
                                           str(relock), "--quiet"),
                              envbuild_env(ENVBUILD_CACHE_DIR=str(cache)))
                lock_times.setdefault((who, state), []).append(run.wall)

        for i in range(a.pairs):
            lock_pair("cold", i)
        for i in range(a.warm_pairs):
            lock_pair("warm", i % a.pairs)  # each warm pair on the caches a cold pair filled
        for i in range(a.pairs):
            for who in ("anchor", "ours"):
                shutil.rmtree(tmp / f"lock-cache-{who}-{i}", ignore_errors=True)

        # --- create
        create_times: Dict[Tuple[str, str], List[float]] = {}
        rss: List[Tuple[int, Optional[int], str, int]] = []
        phases: Dict[str, List[Dict[str, float]]] = {}
        shared = tmp / "shared-uv-cache"  # the warm runs' one uv cache

        def anchor_create(cache: Path) -> float:
            env_dir = tmp / "env-anchor"
            shutil.rmtree(env_dir, ignore_errors=True)
            t = Run([uv_bin(), "venv", "--no-config", "--quiet", str(env_dir), "--python", a.python], uv_env(cache)).wall
            t += Run([uv_bin(), "pip", "install", "--no-config", "--quiet", "--python", str(env_dir / "bin" / "python"),
                      "--require-hashes", "--no-deps", "-r", str(pylock_file)], uv_env(cache)).wall
            shutil.rmtree(env_dir, ignore_errors=True)
            return t

        def ours_create(eb_cache: Path, state: str) -> float:
            env_dir = tmp / "env-ours"
            shutil.rmtree(env_dir, ignore_errors=True)
            run = Run(envbuild_cmd("create", "--backend", "venv", "--python", a.python, "--profile", a.profile,
                                   "--lockfiles", str(lockfiles), "--prefix", str(env_dir), *without_args),
                      envbuild_env(ENVBUILD_CACHE_DIR=str(eb_cache), COLUMNS="400"))
            rss.append((run.tree_peak_kb, run.self_rss_kb, run.tree_peak_top, run.tree_rss_kb, state))
            phases.setdefault(state, []).append(create_phases(run.stderr))
            shutil.rmtree(env_dir, ignore_errors=True)
            return run.wall

        def pair(state: str, anchor_cache: Path, eb_cache: Path, i: int) -> None:
            for who in first_second(i):
                wall = anchor_create(anchor_cache) if who == "anchor" else ours_create(eb_cache, state)
                create_times.setdefault((who, state), []).append(wall)

        states = ("warm",) if a.skip_cold_create else ("cold", "warm")
        if "cold" in states:
            n_cold = a.cold_create_pairs or a.pairs
            for i in range(n_cold):
                anchor_cache, eb_cache = tmp / "cold-uv", tmp / "cold-envbuild"
                for d in (anchor_cache, eb_cache):
                    shutil.rmtree(d, ignore_errors=True)
                pair("cold", anchor_cache, eb_cache, i)
                shutil.rmtree(eb_cache / "uv", ignore_errors=True)
                if i == n_cold - 1:
                    anchor_cache.rename(shared)  # the warm runs start from what the last cold anchor fetched
                    eb_cache.rename(tmp / "warm-envbuild")  # and envbuild from what its last cold run kept
                else:
                    shutil.rmtree(anchor_cache, ignore_errors=True)
                    shutil.rmtree(eb_cache, ignore_errors=True)
        else:
            anchor_create(shared)  # untimed: fills the one cache the warm runs share
        eb_cache = tmp / "warm-envbuild"  # with --skip-cold-create, empty: the first warm create fills it
        eb_cache.mkdir(exist_ok=True)
        (eb_cache / "uv").symlink_to(shared)  # envbuild's uv cache is $ENVBUILD_CACHE_DIR/uv
        for i in range(a.warm_pairs):
            pair("warm", shared, eb_cache, i)

        print(f"load average (1/5/15 min) at start {load_at_start}, at end {load_average()}; {os.cpu_count()} CPUs")
        print(f"profile {a.profile} (committed, {profile.directory}): {len(recipe.pip.requirements)} requirements "
              f"+ {len(recipe.toolchain.pip)} [recipe.toolchain] pip, "
              f"{n_pins} pins in requirements.lock.txt, python {python_version}, {uv_python_platform(tags)}; "
              f"--python {a.python}; pairs interleaved, the first side alternating (anchor first in even pairs, ours in odd ones: the "
              f"load of the shared machine and its page-cache state drift between two runs, and hit both sides "
              f"alike), medians: lock {a.pairs} cold + {a.warm_pairs} warm, create "
              f"{0 if a.skip_cold_create else (a.cold_create_pairs or a.pairs)} cold + {a.warm_pairs} warm")
        print(f"git sources/builds: create runs {' '.join(without_args) or '(none)'}: the uv anchor cannot clone a "
              f"checkout at a commit, patch it or build it against the env's torch, so the {len(recipe.git)} git "
              f"sources and the {len(recipe.builds)} source builds from them are NOT part of this comparison; "
              f"both sides install the same committed pip lock ({n_pins} pins)")
        for state in ("cold", "warm"):
            print(ratio_line(f"lock {state}", lock_times[("ours", state)], lock_times[("anchor", state)]))
        for state in states:
            print(ratio_line(f"create {state}", create_times[("ours", state)], create_times[("anchor", state)]))
        for state in states:  # what the ratio would be without the doctor gate (uv has no such step)
            ours = [w - p.get("doctor", 0.0) for w, p in zip(create_times[("ours", state)], phases[state])]
            print("  " + ratio_line(f"create {state} without the doctor gate", ours, create_times[("anchor", state)]))
        for state in states:
            keys = sorted({k for p in phases[state] for k in p})
            print(f"  create {state} phases (median s): "
                  + "  ".join(f"{k} {median([p.get(k, 0.0) for p in phases[state]]):.2f}" for k in keys))
        peak = max(rss, key=lambda r: r[0])
        own = [r[1] for r in rss if r[1] is not None]
        tree_mb = peak[0] / 1024
        print(f"create peak RSS, whole process tree (sum over envbuild, uv, the doctor gate's stack probe at one "
              f"instant, sampled every 0.2 s): {tree_mb:.0f} MB (goal <= 300 MB: {'met' if tree_mb <= 300 else 'NOT met'}); "
              f"largest process then: {peak[2]}; envbuild process alone {max(own) / 1024 if own else float('nan'):.0f} MB; "
              f"largest single process (wait4) {max(r[3] for r in rss) / 1024:.0f} MB")
        for state in states:  # a warm rerun keeps the gate's verdict (no stack probe): its peak differs
            runs = [r for r in rss if r[4] == state]
            top = max(runs, key=lambda r: r[0])
            print(f"  create {state} peak RSS, whole tree: {top[0] / 1024:.0f} MB (runs "
                  f"{'/'.join(f'{r[0] / 1024:.0f}' for r in runs)}); largest process then: {top[2]}")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
