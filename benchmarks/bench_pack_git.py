"""How long pack's git part takes per recipe git source, against `git clone --mirror` of the same repository
measured in the same run, and whether two packs give the same bytes.

    python benchmarks/bench_pack_git.py --profile slime-v0.3.1-cu130 --git-mirror DIR|URL

For each [[recipe.git]] (and the submodules it lists): the anchor is `git clone --mirror --quiet` of the
repository the mirror gives (what the conda bundle used to carry); ours is envbuild.pack.git_part, run
twice into fresh folders. Prints one JSON line per source: seconds, MB, the ratio to the anchor, whether
the two runs are byte-identical, or the error (one line, as pack prints it).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _digest(root: Path) -> str:
    files = {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
             for p in sorted(root.rglob("*")) if p.is_file()}
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


def _size_mb(root: Path) -> float:
    return round(sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / 1e6, 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="slime-v0.3.1-cu130")
    ap.add_argument("--git-mirror", default=None, help="as for envbuild pack (default: $ENVBUILD_GIT_MIRROR)")
    args = ap.parse_args()

    from envbuild.errors import EnvbuildError
    from envbuild.install.git_mirror import locate, mirror_from
    from envbuild.pack.git_part import pack_git_sources
    from envbuild.profile import load_profile

    recipe = load_profile(args.profile).require_recipe()
    mirror = mirror_from(args.git_mirror)
    with tempfile.TemporaryDirectory(prefix="bench-pack-git-") as tmp:
        for src, origin in zip(recipe.git, locate(recipe.git, mirror)):
            row = {"source": src.name, "commit": src.commit[:12], "submodules": list(src.submodules)}
            if origin.all_problems():
                row["error"] = "; ".join(origin.all_problems())
                print(json.dumps(row), flush=True)
                continue
            anchor = Path(tmp) / f"{src.name}-anchor.git"
            t0 = time.monotonic()
            subprocess.run(["git", "clone", "--mirror", "--quiet", origin.url, str(anchor)], check=True)
            row["anchor_seconds"] = round(time.monotonic() - t0, 2)
            row["anchor_MB"] = _size_mb(anchor)
            shutil.rmtree(anchor)
            digests = []
            try:
                for run in (1, 2):
                    out = Path(tmp) / f"{src.name}-{run}" / "git"
                    t0 = time.monotonic()
                    pack_git_sources([src], out, mirror)
                    row[f"seconds_{run}"] = round(time.monotonic() - t0, 2)
                    row["MB"] = _size_mb(out)
                    digests.append(_digest(out))
                    shutil.rmtree(out.parent)
            except EnvbuildError as exc:
                row["error"] = str(exc)
            else:
                row["ratio_1"] = round(row["seconds_1"] / row["anchor_seconds"], 2)
                row["identical"] = digests[0] == digests[1]
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
