"""Compile a profile's source builds (apex, Transformer Engine, torch_memory_saver) into the shared wheel cache,
on this machine, with the toolchain envbuild assembles (NVIDIA's PyPI nvcc + the system compiler), and time
each one: the documented run behind docs/real-build.md. Not a test: each build takes minutes to hours.

    python benchmarks/bench_source_builds.py --prefix ENV [--profile P] [--only NAME ...]
        [--git-mirror DIR|URL] [--source NAME=URL@COMMIT ...] [--json out.json]

ENV is an env `envbuild create` made (or its staging prefix): its python, torch and CUDA wheels are what the
builds compile against. Each source is checked out (through the mirror, like create does) under
<ENV>/src/<name> unless it is there already, then built by envbuild.install.source_builds exactly as the
builds phase of create does it (same cache key, same entry layout, same log): a create afterwards reuses the
wheels. `--source NAME=URL@COMMIT` builds NAME from another repository or commit than the profile pins; the
output says so on every line, and such a wheel is keyed by its own commit, so create never mistakes it for
the pinned one.

Prints one line per build: seconds, wheel, size, log; with --json, the same as JSON.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prefix", required=True, type=Path)
    ap.add_argument("--profile", default="slime-v0.3.1-cu130")
    ap.add_argument("--only", action="append", default=[], metavar="NAME")
    ap.add_argument("--git-mirror", default=None)
    ap.add_argument("--source", action="append", default=[], metavar="NAME=URL@COMMIT")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    from envbuild.errors import EnvbuildError
    from envbuild.install import git_mirror, git_sources, source_builds
    from envbuild.install.toolchain import build_env, preflight
    from envbuild.paths import lockfiles_dir
    from envbuild.profile import load_profile

    profile = load_profile(args.profile, lockfiles_dir())
    recipe = profile.require_recipe()
    overrides = {}
    for item in args.source:
        name, _, rest = item.partition("=")
        url, _, commit = rest.rpartition("@")
        if not (name and url and commit):
            ap.error(f"--source {item!r}: expected NAME=URL@COMMIT")
        overrides[name] = (url, commit)
    builds = [b for b in recipe.builds if not args.only or b.name in args.only]
    prefix = args.prefix.absolute()
    python = prefix / "bin" / "python"
    cache = source_builds.wheel_cache_dir().absolute()
    mirror = git_mirror.mirror_from(args.git_mirror)
    rows = []
    try:
        env = build_env(prefix, recipe)
        facts0 = source_builds.env_key_facts(python, prefix, builds[0], recipe.activation.env) if builds else {}
        print(f"toolchain: CUDA_HOME {env['CUDA_HOME']}; "
              f"{preflight(prefix, env, facts0.get('gpu_arch', '9.0'), cache)}", flush=True)
        for build in builds:
            src = recipe.git_source(build.git)
            note = ""
            if src.name in overrides:
                url, commit = overrides[src.name]
                note = f" (NOT the profile's {src.url}@{src.commit[:12]}: --source {url}@{commit[:12]})"
                src = dataclasses.replace(src, url=url, commit=commit)
            (origin,) = git_mirror.locate([src], mirror)
            if origin.problem:
                print(f"{build.name}: cannot fetch: {origin.problem}", flush=True)
                rows.append({"name": build.name, "error": origin.problem})
                continue
            dest = prefix / "src" / src.name
            git_sources.fetch_source(src, dest, recipe.profile_dir, origin=origin.url)
            for sub in origin.submodules:
                path = sub.name.split("/", 1)[1]
                git_sources.checkout_submodule(dest, path, sub.url, sub.commit, src.sparse.get(path, []))
            facts = source_builds.env_key_facts(python, prefix, build, recipe.activation.env)
            extra = {"CONDA_PREFIX": str(prefix), "PREFIX": str(prefix), "VIRTUAL_ENV": str(prefix), **env}
            print(f"{build.name}: compiling {src.url}@{src.commit[:12]}{note} for {facts} ...", flush=True)
            t0 = time.monotonic()
            wheel = source_builds.build_or_reuse(build, python, dest / (src.subdir or ""), cache, facts, extra)
            seconds = time.monotonic() - t0
            log = wheel.parent / "build.log"
            row = {"name": build.name, "url": src.url, "commit": src.commit, "pinned": not note, "seconds": round(seconds, 1),
                   "wheel": str(wheel), "bytes": wheel.stat().st_size, "log": str(log), "facts": facts}
            rows.append(row)
            print(f"{build.name}: {seconds:.0f} s -> {wheel.name} ({wheel.stat().st_size / 2**20:.1f} MiB), log {log}"
                  f"{note}", flush=True)
    except EnvbuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        rows.append({"error": str(exc)})
        if args.json:
            args.json.write_text(json.dumps(rows, indent=2) + "\n")
        return 2
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
