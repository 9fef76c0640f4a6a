"""What `envbuild create` shows: the plan, each phase as it starts and ends, the doctor gate, the summary.

Everything goes to stderr, so stdout stays clean for scripts. The phases are envbuild.progress.Steps: a
live line with a bar in a terminal, one flushed line per phase start and end in a pipe or a log; `--quiet`
drops the phase lines and keeps the plan, the notes, the gate and the closing line.
"""
from __future__ import annotations

from typing import Any, Optional
from urllib.parse import urlparse

from envbuild.progress import Steps, fmt_bytes


def _size(n: Optional[int]) -> str:
    return "?" if n is None else fmt_bytes(n)


def _origin(source: str) -> str:
    parsed = urlparse(source)
    if parsed.scheme in ("http", "https"):
        return f"{parsed.netloc}{parsed.path.rsplit('/', 2)[0]}"
    path = parsed.path if parsed.scheme == "file" else source
    return path.rsplit("/", 2)[0]


class CreateUI:
    def __init__(self, quiet: bool = False) -> None:
        from rich.console import Console

        self.steps = Steps("create", quiet=quiet)
        # one console in a terminal, so the plan, notes and gate print above the live line, not through it
        self.console = self.steps.display.console() if self.steps.display.tty else Console(stderr=True, highlight=False)

    def phase(self, label: str, **counts: Any):
        """A phase of the pipeline (envbuild.progress.Steps.phase)."""
        return self.steps.phase(label, **counts)

    def note(self, text: str) -> None:
        self.console.print(text, markup=False)

    def plan(self, job) -> None:
        from rich.table import Table

        c = self.console
        c.print(f"envbuild create: profile {job.profile.name} -> {job.target}", markup=False)
        from envbuild.install import backends

        c.print(f"  platform {job.platform}, backend {job.backend} ({backends.get(job.backend).HELP}), "
                f"lock key {job.key[:12]}", markup=False)
        if job.backend_note:
            c.print(f"  backend chosen: {job.backend_note}", markup=False)
        if job.interpreter is not None:
            c.print(f"  interpreter {job.interpreter} (Python {job.profile.python})", markup=False)
        table = Table(title="conda layer", title_justify="left", show_edge=False, pad_edge=False)
        for col in ("package", "version", "build", "category", "size", "from"):
            table.add_column(col, no_wrap=col != "from")
        total, unknown = 0, 0
        for item in job.planned:
            p = item.locked
            table.add_row(p.name, p.version, p.build, p.category, _size(item.size), _origin(item.source))
            if item.size is None:
                unknown += 1
            else:
                total += item.size
        c.print(table)
        more = f" (+{unknown} of unknown size, fetched over the network)" if unknown else ""
        c.print(f"  {len(job.planned)} conda archives, {_size(total)}{more}", markup=False)
        r = job.recipe
        if r.pip_requirements:
            where = str(job.pip_lock) if job.pip_lock else "NOT LOCKED"
            c.print(f"  pip layer: {len(r.pip_requirements)} requirements, lock {where}", markup=False)
        origins = {o.name: o for o in job.origins}
        for g in r.git:
            o = origins.get(g.name)
            if g.name in job.without:
                where = "LEFT OUT (--without)"
            elif o is None:
                where = "?"
            else:
                where = f"from {o.via} {o.url or '(nothing answered)'}"
            subs = f", {len(g.submodules)} submodule(s)" if g.submodules else ""
            subs += "".join(f" ({path} sparse: {', '.join(folders)})" for path, folders in g.sparse.items())
            c.print(f"  git {g.name}: {g.url} @ {g.commit[:12]}, {len(g.patches)} patch(es){subs}, install "
                    f"{g.install}, {where}", markup=False)
        builds = [b for b in r.builds if b.git not in job.without]
        for b in builds:
            c.print(f"  source build {b.name} (from git {b.git})", markup=False)
        if builds:
            from envbuild.install.resolve import toolchain_pieces

            for p in toolchain_pieces(job):
                c.print(f"  toolchain {p.what}: {p.layer} ({p.detail})", markup=False)
        for problem in job.problems:
            c.print(f"  PROBLEM {problem}", markup=False)
        if r.conda.optional.get("compat"):
            from envbuild.install.activation import host_decision

            c.print(f"  cuda-compat on this node: {host_decision(job.profile.cuda)[1]} (decided again at each "
                    f"activation)", markup=False)
        if r.activation.env:
            c.print(f"  activation sets: {', '.join(sorted(r.activation.env))}", markup=False)

    def gate(self, gate) -> str:
        """Print the gate's verdict (and every fail/warn/error); returns the counts line."""
        counts = {}
        for r in gate.results:
            counts[r.status.value] = counts.get(r.status.value, 0) + 1
        summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "no stack checks registered"
        if getattr(gate, "cached", False):
            summary += "; kept from an earlier create with the same inputs"
        self.console.print(f"  doctor stack checks: {summary}", markup=False)
        for r in gate.results:
            if r.status.value in ("fail", "warn", "error"):
                self.console.print(f"    {r.status.value.upper()} {r.check_id}: {r.summary}", markup=False)
        return summary

    def done(self, job) -> None:
        phases = ", ".join(f"{k} {v:.2f}s" for k, v in job.timings.items())
        self.console.print(f"created {job.target} ({phases})", markup=False)
        self.console.print(f"  activate: source {job.target}/envbuild/activate", markup=False)
