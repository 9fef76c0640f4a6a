"""One doctor run from options to exit code: open the facts, pick checks, run them, write the reports."""
from __future__ import annotations

import datetime as _dt
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence

from envbuild import __version__
from envbuild.errors import EnvbuildError

if TYPE_CHECKING:  # pragma: no cover
    from envbuild.doctor.context import DoctorContext
    from envbuild.doctor.registry import Check
    from envbuild.doctor.runner import OnResult
    from envbuild.doctor.stack_reader import StackPrefetch
    from envbuild.facts.source import FactSource
    from envbuild.profile import Profile
    from envbuild.report.model import Report


@dataclass
class DoctorOptions:
    """One doctor run's settings, resolved once (envbuild/doctor/settings.py resolve_doctor for the CLI): `options`
    holds the typed `--set` values, `sets` the same as the user wrote them (recorded in the report)."""

    profile: Optional[str] = None
    python: Optional[str] = None
    prefix: Optional[str] = None
    root: Optional[str] = None
    mode: str = "static"
    gpus: Optional[List[int]] = None
    checks: List[str] = field(default_factory=list)
    skips: List[str] = field(default_factory=list)
    list_only: bool = False
    list_options: bool = False
    strict: bool = False
    require_gpu: bool = False
    json_path: Optional[str] = None
    junit_path: Optional[str] = None
    prom_path: Optional[str] = None
    html_path: Optional[str] = None
    options: Dict[str, Any] = field(default_factory=dict)
    sets: Dict[str, str] = field(default_factory=dict)
    quiet: bool = False
    loaded_profile: Optional["Profile"] = None  # the profile read once by the settings (not shipped to Ray nodes)
    env_origins: Dict[str, str] = field(default_factory=dict)  # DoctorContext.env_origins (a Ray worker's runtime_env)
    # The stack probe resolves torch's libraries through the loader's trace instead of loading them (create's gate:
    # envbuild/install/doctor_gate.py; envbuild/doctor/stack_reader.py read_stack)
    resolve_only: bool = False


def resolve_python(python: Optional[str], prefix: Optional[str]) -> str:
    """The interpreter of the environment under test: --python, else --prefix/bin/python, else ours."""
    if python and prefix:
        raise EnvbuildError("give --python or --prefix, not both")
    if prefix:
        candidate = os.path.join(prefix, "bin", "python")
        if not os.path.exists(candidate):
            raise EnvbuildError(f"--prefix {prefix}: no bin/python there; is it an environment?")
        return candidate
    if python:
        if not os.path.exists(python):
            raise EnvbuildError(f"--python {python}: no such file")
        return python
    return sys.executable


def host_facts(facts: "FactSource") -> Dict[str, Any]:
    """Host identity for the report header, read through the fact source (works on bundles)."""
    from envbuild.facts.source import FactUnavailable

    def read(path: str) -> Optional[str]:
        try:
            return facts.read_text(path).strip()
        except (FileNotFoundError, FactUnavailable, IsADirectoryError):
            return None

    hostname = read("/proc/sys/kernel/hostname")
    if hostname is None and facts.is_live:
        hostname = socket.gethostname()
    meta = getattr(facts, "meta", {})
    return {
        "hostname": meta.get("hostname", hostname) if not facts.is_live else hostname,
        "kernel": read("/proc/sys/kernel/osrelease"),
        "source": facts.description,
        "captured_at": meta.get("captured_at"),
    }


def gpu_inventory(facts: "FactSource") -> List[Dict[str, Any]]:
    """The report header's GPU list (identity only, no readings); [] without NVML, so a driverless run still
    writes a report."""
    from envbuild.facts.source import FactUnavailable

    try:
        snap = facts.nvml()
    except FactUnavailable:
        return []
    keys = ("index", "name", "uuid", "pci_bus_id", "memory_total_mib", "serial")
    return [{k: d.get(k) for k in keys if k in d} for d in snap.get("devices", [])]


def run_session(ctx: "DoctorContext", patterns: Sequence[str] = (), skips: Sequence[str] = (), *,
                options: Dict[str, Any], on_result: Optional["OnResult"] = None,
                before: Optional[Callable[[], None]] = None,
                on_start: Optional[Callable[["Check", List[str]], None]] = None) -> "Report":
    """Run the checks of ctx.mode matching `patterns` on ctx.facts and return the Report (host, GPUs, results,
    timing): what `envbuild doctor` writes, and what `envbuild capture --node` saves beside its bundle.
    `before` runs inside the timed run, before the checks (capture reads NVML and the stack first)."""
    from envbuild.doctor.runner import run_selected
    from envbuild.report.model import Report

    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    t0 = time.monotonic()
    from envbuild.doctor.interrupt import Stopped
    from envbuild.doctor.fold import fold_consequences  # issue 14: consequences under their root cause

    interrupted: Optional[Dict[str, Any]] = None
    try:
        if before is not None:  # inside the try: a stop while it reads NVML is a stopped run too, not a traceback
            before()
        results = run_selected(ctx, patterns, skips, on_result=on_result, on_start=on_start)
    except Stopped as stop:
        # The launcher has already killed the probe's ranks; the report keeps what was found before the stop.
        results = list(getattr(stop, "partial", []))
        interrupted = {"signal": stop.name, "exit_code": stop.exit_code, "where": getattr(stop, "where", "")}
    return Report(host=host_facts(ctx.facts), gpus=gpu_inventory(ctx.facts), results=fold_consequences(results),
                  profile=ctx.profile.name if ctx.profile else None, options=options, started_at=started,
                  duration_s=round(time.monotonic() - t0, 3), envbuild_version=__version__, interrupted=interrupted)


def stack_reader_for(mode: str, resolve_only: bool = False) -> "StackPrefetch":
    """The doctor's stack reader. A static run's critical path is the stack probe (issue 26: <= 2 s on a node's
    first run): there it resolves torch's libraries and initialises CUDA and NCCL through the copies resolved,
    without loading the rest; a quick or full run loads them all, its GPU probes importing torch beside it anyway."""
    from envbuild.doctor.stack_reader import StackPrefetch

    return StackPrefetch(resolve_only=resolve_only, resolve_init=mode == "static" and not resolve_only)


class StackAhead:
    """The stack probe started before the run's options are resolved (start_stack_ahead), with NVML's snapshot
    taken beside it in a thread that then opens the probe's gate: the snapshot must see the node before the probe's
    own CUDA context (start_stack_early), and taken here it no longer waits for the options (a first run with
    --profile kept the probe 0.13-0.15 s at its gate, docs/gpu-runs/s13/). `nvml` is the session's NVML reader."""

    def __init__(self, reader: "StackPrefetch", python: str) -> None:
        self.reader = reader
        self._done = threading.Event()
        self._snapshot: Optional[Dict[str, Any]] = None
        self._error: Optional[BaseException] = None
        reader.start(python, gated=True)
        threading.Thread(target=self._take_snapshot, name="envbuild-nvml-ahead", daemon=True).start()

    def _take_snapshot(self) -> None:
        from envbuild.facts.nvml import take_snapshot

        try:
            try:
                self._snapshot = take_snapshot()
            except BaseException as exc:  # handed to whoever asks, as if it had read NVML itself
                self._error = exc
            finally:
                self.reader.open_gate()
        finally:
            self._done.set()  # whatever happened, nobody waits on it for ever

    def nvml(self) -> Dict[str, Any]:
        from envbuild.facts.nvml import NVML_ANSWER_S, hung

        if not self._done.wait(NVML_ANSWER_S):
            self.reader.open_gate()  # the probe finds out for itself, under its own deadline
            raise hung(NVML_ANSWER_S)
        if self._error is not None:
            raise self._error
        return self._snapshot  # type: ignore[return-value]

    def close(self) -> None:
        self.reader.close()


def runs_everything_here(root: Optional[str], checks: Sequence[str], skips: Sequence[str]) -> bool:
    """Every check runs on this node (no --root, --check or --skip), the stack and node ones among them: the stack
    probe may then start before the checks, gated until NVML's snapshot (start_stack_early)."""
    return root is None and not checks and not skips


def start_stack_ahead(*, mode: str, python: Optional[str], prefix: Optional[str], root: Optional[str],
                      checks: Sequence[str], skips: Sequence[str]) -> Optional[StackAhead]:
    """The stack probe and NVML's snapshot started before the run's options are resolved, when every check runs on
    this node (no --root, --check or --skip): the probe loads its libraries while the settings import every check's
    module and load the profile (a first run reads them from disk: 0.1-0.2 s with --profile). None when it cannot
    start yet; hand it to run_doctor, or close it when the command ends first."""
    if not runs_everything_here(root, checks, skips):
        return None
    try:
        interpreter = resolve_python(python, prefix)
    except EnvbuildError:  # resolving the options says what is wrong, with its exit code
        return None
    return StackAhead(stack_reader_for(mode), interpreter)


def run_doctor(opts: DoctorOptions, ahead: Optional[StackAhead] = None) -> int:
    """The whole `envbuild doctor` run; returns its exit code (0 no fail, 1 a fail or, with --strict, a warn).
    `ahead`: what start_stack_ahead started for these options (run_doctor closes it)."""
    if opts.mode not in ("static", "quick", "full"):
        raise EnvbuildError(f"unknown mode {opts.mode!r}")
    import signal

    import click

    from envbuild.doctor.context import DoctorContext
    from envbuild.doctor.interrupt import Stopped, stop_on_signals
    from envbuild.doctor.progress_rows import RowProgress, left_out_count
    from envbuild.doctor.registry import declared_options, select
    from envbuild.facts.source import open_source
    from envbuild.profile import load_profile
    from envbuild.report import terminal
    from envbuild.report.progress import save_durations

    if opts.list_only:
        terminal.print_check_list(select(opts.checks, opts.skips, mode=None))
        return 0
    if opts.list_options:
        terminal.print_option_list(declared_options())
        return 0
    python = resolve_python(opts.python, opts.prefix)
    stack_reader = ahead.reader if ahead is not None else stack_reader_for(opts.mode, opts.resolve_only)
    with stop_on_signals() as stops:
        # a stop signal from here on ends the probe (and its gate directory) through close(), never by default
        try:  # bad input or a stop before the session's own cleanup takes over: the probe started ahead ends here
            if ahead is None and runs_everything_here(opts.root, opts.checks, opts.skips):
                stack_reader.start(python, gated=True)  # the set-up below overlaps it
            chosen = select(opts.checks, opts.skips, mode=opts.mode)
            _note_renamed(opts.checks + opts.skips)
            profile = opts.loaded_profile or (load_profile(opts.profile) if opts.profile else None)
            facts = open_source(opts.root, python=python, stack_reader=stack_reader,
                                nvml_reader=ahead.nvml if ahead is not None else None)
            ctx = DoctorContext(facts=facts, profile=profile, mode=opts.mode, gpus=opts.gpus, python=python,
                                require_gpu=opts.require_gpu, options=dict(opts.options),
                                env_origins=dict(opts.env_origins))
            progress = RowProgress(opts.mode, [c.id for c in chosen],
                                   left_out_count(opts.checks, opts.skips, opts.mode), quiet=opts.quiet)
        except Stopped as stop:
            stack_reader.close()
            click.echo(f"envbuild: STOPPED by {stop.name} before the checks started; no report written", err=True)
            return stop.exit_code
        except BaseException:
            stack_reader.close()
            raise
        try:
            try:
                report = run_session(ctx, opts.checks, opts.skips, on_result=progress.result,
                                     on_start=progress.start,
                                     before=lambda: start_stack_early(ctx, chosen, stack_reader),
                                     options={"mode": opts.mode, "gpus": opts.gpus, "checks": opts.checks,
                                              "skips": opts.skips, "strict": opts.strict, "python": python,
                                              "root": opts.root, "set": opts.sets})
            finally:
                stops.hold()  # the checks are over: a stop signal from here on waits for the report
                stack_reader.close()
                progress.stop()
        except Stopped as stop:  # after the checks, while the report was being assembled: nothing to write
            click.echo(f"envbuild: STOPPED by {stop.name} while the report was being assembled; no report written",
                       err=True)
            return stop.exit_code
        if not report.interrupted:
            save_durations(opts.mode, progress.durations)
            progress.save()
        _write_reports(report, opts)
        terminal.print_report(report, quiet=opts.quiet, strict=opts.strict)
    late = stops.first if not report.interrupted else None
    if late is not None:
        name = signal.Signals(late).name
        click.echo(f"envbuild: STOPPED by {name} after the checks had finished; the report above is complete",
                   err=True)
        return 128 + late
    return report.exit_code(strict=opts.strict)


def start_stack_early(ctx: "DoctorContext", chosen: Sequence["Check"], reader: "StackPrefetch") -> None:
    """Start the stack probe before the checks when a stack check will read it on the live node, so its seconds
    (loading torch's libraries, CUDA and NCCL init: about 1.1 s on the H200, docs/gpu-runs/s5-summary-call7.txt)
    overlap the node checks (the GPU probes wait for it: runner.next_check). When node checks run, NVML's snapshot
    is taken while the probe loads its libraries and before it may make its first CUDA call (the gate):
    node.gpu_processes must see the node without the probe's own CUDA context."""
    from envbuild.doctor.runner import unmet_need
    from envbuild.facts.source import FactUnavailable

    if not ctx.facts.is_live or not any(c.category == "stack" and unmet_need(c, ctx) is None for c in chosen):
        reader.open_gate()  # one started ahead (run_doctor) waits for nothing then
        return
    snapshot = any(c.category == "node" for c in chosen)
    reader.start(ctx.python or "", gated=snapshot)  # a no-op when run_doctor started it ahead, gated
    if snapshot:  # a stop signal here leaves the gate shut: the session's close cancels the probe
        try:
            ctx.facts.nvml()
        except FactUnavailable:
            pass
    reader.open_gate()


def _note_renamed(patterns: List[str]) -> None:
    """An old check id still selects its check; say once, on stderr, what it is called now."""
    import click

    from envbuild.doctor.registry import RENAMED

    for old in dict.fromkeys(p for p in patterns if p in RENAMED):
        click.echo(f"envbuild: note: check {old} was renamed to {RENAMED[old]}", err=True)


def _write_reports(report: "Report", opts: DoctorOptions) -> None:
    from envbuild.outputs import write_outputs
    from envbuild.report.writers import DOCTOR_WRITERS

    write_outputs(DOCTOR_WRITERS, opts, report)
