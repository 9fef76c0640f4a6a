"""`envbuild capture`: save what the doctor reads on this node (--node DIR), or an image's stack as a profile
manifest (--env OUT.toml).

--node runs every static check (node + stack) through a RecordingSource wrapped around the live node, so the
bundle holds exactly the files, command outputs, NVML readings and stack facts the checks used, no more; then
`envbuild doctor --root DIR` on any machine gives the same verdicts. The run's own report is saved beside it
(DIR/.envbuild/report.json) so a replay can be compared with what the node said.
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Dict, List, Optional

import click

from envbuild import cmdoptions

if TYPE_CHECKING:  # pragma: no cover
    from envbuild.facts.source import RecordingSource


@click.command("capture")
@click.option("--node", "node_dir", metavar="DIR", help="Write a node bundle here (for `envbuild doctor --root DIR`).")
@click.option("--env", "env_out", metavar="OUT.toml", help="Write the env's stack facts as a profile manifest.")
@click.option("--python", "python", metavar="PATH", help="Python of the environment to capture (default: this one).")
@click.option("--prefix", metavar="DIR", help="Environment prefix to capture (uses DIR/bin/python).")
@cmdoptions.quiet("Print only the bundle line.")
def capture(node_dir: Optional[str], env_out: Optional[str], python: Optional[str], prefix: Optional[str],
            quiet: bool) -> int:
    """Save this node's facts as a bundle (--node DIR) or this env's stack as a profile manifest (--env OUT)."""
    from envbuild.doctor.session import resolve_python
    from envbuild.errors import EnvbuildError

    from envbuild.outputs import check_output_dir, check_output_file

    if (node_dir is None) == (env_out is None):
        raise EnvbuildError("give exactly one of --node DIR or --env OUT.toml")
    check_output_dir(node_dir, "--node")
    check_output_file(env_out, "--env", allow_stdout=False, new_folder_ok=True)  # a new profile's folder
    interpreter = resolve_python(python, prefix)
    if env_out:
        try:
            from envbuild.facts.manifest import write_env_manifest
        except ImportError as exc:
            raise EnvbuildError(f"capture --env is not available in this build ({exc})") from exc
        try:
            from envbuild.doctor.stack_reader import read_stack

            write_env_manifest(interpreter, env_out, read_stack=read_stack)
        except OSError as exc:
            raise EnvbuildError(f"--env {env_out}: cannot write: {exc.strerror or exc}") from exc
        click.echo(f"wrote {env_out}")
        return 0
    return capture_node(node_dir, interpreter, quiet=quiet)


def capture_node(directory: str, python: str, quiet: bool = False, argv: Optional[List[str]] = None) -> int:
    """Run the static checks through a recorder, save the bundle and its report; exit code 0 (a capture that
    finds failures still succeeded: the failures are in the report)."""
    import json
    import platform
    import socket
    from pathlib import Path

    from envbuild import __version__
    from envbuild.doctor.context import DoctorContext
    from envbuild.doctor.session import run_session
    from envbuild.errors import EnvbuildError
    from envbuild.facts.source import FactUnavailable, LiveSource, RecordingSource
    from envbuild.outputs import write_output
    from envbuild.redact import scrub_json
    from envbuild.report.json_report import report_to_dict
    from envbuild.report.terminal import verdict_line

    from envbuild.outputs import check_output_dir

    out = Path(directory)
    check_output_dir(directory, "--node")
    from envbuild.doctor.stack_reader import read_stack

    rec = RecordingSource(LiveSource("/", python=python, stack_reader=read_stack))
    ctx = DoctorContext(facts=rec, mode="static", python=python)

    def read_whole() -> None:
        # NVML first (before the stack probe starts a CUDA process, so its process list shows the node at rest),
        # then the stack facts: both go into the bundle whole, whichever checks read them today.
        for read in (rec.nvml, rec.stack):
            try:
                read()
            except FactUnavailable:
                pass

    report = run_session(ctx, before=read_whole,
                         options={"mode": "static", "python": python, "root": None, "capture": str(out)})
    host = report.host
    meta: Dict[str, Any] = {
        "hostname": host.get("hostname") or socket.gethostname(),
        "captured_at": report.started_at,
        "envbuild_version": __version__,
        "kernel": host.get("kernel") or platform.release(),
        "argv": list(argv if argv is not None else sys.argv),
        "python": python,
    }
    meta["trimmed"] = trim_kernel_logs(rec)
    try:
        rec.save(out, meta)
    except OSError as exc:
        raise EnvbuildError(f"--node {out}: cannot write the bundle: {exc.strerror or exc}") from exc
    write_output(str(out / ".envbuild" / "report.json"),  # the same secrets rules as the bundle's other files
                 json.dumps(scrub_json(report_to_dict(report)), indent=2, default=str) + "\n", "--node")
    files = [p for p in out.rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    click.echo(f"captured {out}: {len(files)} files, {size / 1024:.0f} KiB; {verdict_line(report)}")
    if not quiet:
        click.echo(f"replay anywhere with: envbuild doctor --root {out}")
    return 0


# A bundle must stay small enough to mail or attach. Kernel logs of long-running hosts reach megabytes; past this
# size only the lines node.kernel_log can act on are kept (node_parse.is_gpu_kernel_line), so verdicts replay.
KERNEL_LOG_KEEP_BYTES = 256 * 1024


def trim_kernel_logs(rec: "RecordingSource", limit: int = KERNEL_LOG_KEEP_BYTES) -> Dict[str, Any]:
    """Cut recorded kernel logs over `limit` bytes down to their GPU lines; returns what was cut, per command."""
    from envbuild.facts.node_parse import is_gpu_kernel_line

    trimmed: Dict[str, Any] = {}
    for name in ("journalctl-kernel", "dmesg"):
        cmd = rec.commands.get(name) or {}
        stdout = cmd.get("stdout") or ""
        if len(stdout) <= limit:
            continue
        lines = stdout.splitlines(keepends=True)
        kept = [ln for ln in lines if is_gpu_kernel_line(ln)]
        cmd["stdout"] = "".join(kept)
        trimmed[name] = {"lines_total": len(lines), "lines_kept": len(kept), "bytes_total": len(stdout)}
    return trimmed
