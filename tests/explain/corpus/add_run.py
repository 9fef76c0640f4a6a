"""Add the logs of a docs/gpu-runs/*-explain-logs.sh run to the corpus, and keep README.md's counts in step.

    python tests/explain/corpus/add_run.py PATH/TO/s6-explain-logs.tar.gz   # copy the logs, append cases.toml
    python tests/explain/corpus/add_run.py RUN.tar.gz --collection NAME     # the same, each entry in that collection
    python tests/explain/corpus/add_run.py --recount                        # only regenerate the counts table

A run scored blind, apart from the headline, goes in with `--collection held-out-...` (as a held-out slice).

A case whose program did not fail as planned keeps the cause the script planned: read the run's summary.txt
(printed at the end) and edit that entry's `cause` (a run that came out healthy is `none`) before committing.
Entries already in the manifest are left as they are, so running it twice adds nothing.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import tarfile
from collections import Counter
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CORPUS = Path(__file__).resolve().parent
CAUSES = CORPUS.parents[2] / "envbuild" / "knowledge" / "causes.toml"
NAME = re.compile(r"^(?:h200-s6|gpu-s\d+)-\d+\.log$")


def add(tarball: Path, collection: str = "") -> int:
    manifest = CORPUS / "manifest.toml"
    listed = {e["file"] for e in tomllib.loads(manifest.read_text(encoding="utf-8"))["log"]}
    try:
        tar_file = tarfile.open(tarball)
    except (OSError, tarfile.TarError) as e:
        print(f"{tarball}: not a readable tarball ({str(e).splitlines()[0].rstrip(':')})", file=sys.stderr)
        return 2
    with tar_file as tar:
        members = {Path(m.name).name: m for m in tar.getmembers() if m.isfile()}
        if "cases.toml" not in members:
            raise SystemExit(f"{tarball}: no cases.toml (not the tarball of a docs/gpu-runs/*-explain-logs.sh run)")
        cases_text = tar.extractfile(members["cases.toml"]).read().decode("utf-8")
        blocks = [b for b in cases_text.split("\n[[log]]\n") if b.strip()]
        added = []
        for block in blocks:
            entry = tomllib.loads("[[log]]\n" + block.lstrip().removeprefix("[[log]]\n"))["log"][0]
            name = entry["file"]
            if name in listed or not NAME.match(name) or name not in members:
                continue
            (CORPUS / name).write_bytes(tar.extractfile(members[name]).read())
            body = block.lstrip().removeprefix("[[log]]\n").rstrip("\n")
            if collection:
                body = re.sub(r"(?m)^collection = .*\n?", "", body).rstrip("\n")
                body += f"\ncollection = {json.dumps(collection)}"
            added.append("\n[[log]]\n" + body + "\n")
    if added:
        manifest.write_text(manifest.read_text(encoding="utf-8").rstrip("\n") + "\n" + "".join(added), encoding="utf-8")
    recount()
    print(f"added {len(added)} log(s) from {tarball}")
    return 0


def recount() -> None:
    entries = tomllib.loads((CORPUS / "manifest.toml").read_text(encoding="utf-8"))["log"]
    titles = {c["id"]: c["title"] for c in tomllib.loads(CAUSES.read_text(encoding="utf-8"))["cause"]}
    titles.update({"none": "no failure in the log (a negative)", "unknown": "no thread established a cause"})
    counts = Counter(e["cause"] for e in entries)
    order = [k for k in titles if counts[k]]
    table = "| cause | logs | meaning |\n|---|---|---|\n" + "".join(f"| {k} | {counts[k]} | {titles[k]} |\n" for k in order)
    readme = CORPUS / "README.md"
    text = readme.read_text(encoding="utf-8")
    start = text.index("<!-- counts")
    head_end = text.index("\n", start) + 1
    text = text[:head_end] + table + text[text.index("<!-- /counts -->"):]
    text = re.sub(r"## Per-class counts \(\d+ logs\)", f"## Per-class counts ({len(entries)} logs)", text)
    readme.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tarball", nargs="?", type=Path, help="the run's RUN-explain-logs.tar.gz")
    ap.add_argument("--collection", default="", help="put every added entry in this collection (a held-out slice)")
    ap.add_argument("--recount", action="store_true", help="only regenerate README.md's counts table")
    args = ap.parse_args()
    if args.recount:
        recount()
        sys.exit(0)
    if args.tarball is None:
        ap.error("a tarball, or --recount")
    sys.exit(add(args.tarball, args.collection))
