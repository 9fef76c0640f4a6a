"""Running the pinned `uv` (the PyPI wheel ships the binary) for the pip layer: one place that finds it,
builds its environment and turns its errors into one line.

Why one place: lock, install, pack and the benchmark all call uv, and each must (a) never let a user's
stray configuration change what a lock resolves to, yet (b) keep what the user set up to *reach* an index:
credentials and network settings. So the environment keeps netrc, keyring (UV_KEYRING_PROVIDER), index
credentials (UV_INDEX_<NAME>_USERNAME/PASSWORD, for the profile's index names), proxies, certificates and
timeouts, and drops the variables that select packages (extra indexes, find-links, strategies, cutoffs,
constraints): the profile declares those. uv.toml files are ignored (--no-config) for the same reason.
uv never downloads a Python here (UV_PYTHON_DOWNLOADS=never): it resolves for a target version and installs
into an interpreter it is given.
"""
from __future__ import annotations

import os
import sys
import re
import subprocess
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from envbuild.errors import EnvbuildError

# Variables that change WHAT is resolved or installed; the profile and envbuild set these, not the caller.
_SELECTING = ("UV_INDEX", "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS", "UV_NO_INDEX", "UV_INDEX_STRATEGY",
              "UV_EXCLUDE_NEWER", "UV_PRERELEASE", "UV_RESOLUTION", "UV_CONSTRAINT", "UV_OVERRIDE",
              "UV_BUILD_CONSTRAINT", "UV_NO_BINARY", "UV_ONLY_BINARY", "UV_TORCH_BACKEND", "UV_PYTHON",
              "UV_SYSTEM_PYTHON", "UV_BREAK_SYSTEM_PACKAGES", "UV_REQUIRE_HASHES", "UV_NO_SOURCES",
              "UV_CONFIG_FILE", "UV_OFFLINE", "UV_NO_CACHE", "UV_LINK_MODE", "VIRTUAL_ENV", "CONDA_PREFIX")
# A user's mirror of the default index (a company PyPI proxy), first match wins.
MIRROR_VARS = ("UV_DEFAULT_INDEX", "UV_INDEX_URL", "PIP_INDEX_URL")


def uv_bin() -> str:
    """Path of the uv binary of the `uv` package envbuild depends on."""
    try:
        import uv  # the PyPI wheel: the binary plus find_uv_bin()
    except ImportError as exc:
        raise EnvbuildError(f"the `uv` package is not installed in {sys.prefix} "
                            f"(pip install 'uv' as pyproject.toml pins it): {exc}") from exc
    return uv.find_uv_bin()


def uv_env(cache_dir: Optional[Path] = None) -> Dict[str, str]:
    """The environment uv runs in (see the module docstring); `cache_dir` overrides UV_CACHE_DIR."""
    env = {k: v for k, v in os.environ.items() if k not in _SELECTING and k not in MIRROR_VARS}
    env["UV_PYTHON_DOWNLOADS"] = "never"
    env["UV_NO_PROGRESS"] = "1"  # no spinners into a pipe; its progress lines are read by run_uv(on_line=)
    env.setdefault("NO_COLOR", "1")
    no_proxy = ",".join(x for x in (env.get("NO_PROXY", ""), "127.0.0.1,localhost") if x)
    env["NO_PROXY"] = env["no_proxy"] = no_proxy
    if cache_dir is not None:
        env["UV_CACHE_DIR"] = str(cache_dir)
    elif os.environ.get("ENVBUILD_CACHE_DIR"):  # envbuild keeps every cache of its own under this one
        env["UV_CACHE_DIR"] = str(Path(os.environ["ENVBUILD_CACHE_DIR"]) / "uv")
    return env


def user_mirror() -> Optional[str]:
    """The default-index mirror the user configured (UV_DEFAULT_INDEX, UV_INDEX_URL, PIP_INDEX_URL), if any."""
    for var in MIRROR_VARS:
        if os.environ.get(var):
            return os.environ[var].strip()
    return None


def redact(url: str) -> str:
    """`url` without user:password@ (envbuild.redact holds the rule; lock code calls it by this name)."""
    from envbuild.redact import url_without_credentials

    return url_without_credentials(url)


# uv's own progress lines (without --quiet, with UV_NO_PROGRESS): what it resolved, fetched and installed
SUMMARY = re.compile(r"^(Resolved|Prepared|Installed|Uninstalled|Audited|Built|Downloading|Downloaded|Using Python) ")
_NOISE = re.compile(r"^(warning: |hint: |help: |\s*$)")
_BOX = re.compile(r"^[\s×╰─▶│├┬╭╮╯]+")


def one_line(stderr: str, limit: int = 700) -> str:
    """uv's error report as one line: the error and its causes, box drawing and hints left out."""
    parts: List[str] = []
    for raw in stderr.splitlines():
        line = _BOX.sub("", raw).strip()
        if (not line or _NOISE.match(raw.strip()) or line.startswith(("warning:", "hint:", "help:"))
                or SUMMARY.match(line) or raw.startswith((" + ", " - ", " ~ "))):
            continue
        line = re.sub(r"^(error: |Caused by: |caused by: )", "", line)
        if line not in parts:
            parts.append(line)
    text = "; ".join(parts) or "uv failed without a message"
    return redact_all(text if len(text) <= limit else text[:limit] + " ...")


def redact_all(text: str) -> str:
    """Every URL in `text` with its credentials removed."""
    return re.sub(r"(https?://)[^/\s@]+@", r"\1", text)


def run_uv(args: Sequence[str], cwd: Optional[Path] = None, cache_dir: Optional[Path] = None,
           env: Optional[Dict[str, str]] = None,
           on_line: Optional[Callable[[str], None]] = None) -> subprocess.CompletedProcess:
    """Run `uv <args>` (with --no-config) and return the finished process; never raises on its exit code.

    `on_line` sees each line uv writes to stderr as it comes (uv's progress: `Resolved 12 packages in 2.1s`,
    ` + torch==2.8.0`), so a long resolve or install is not silent; all of stderr is still returned."""
    cmd = [uv_bin(), *args[:2], "--no-config", *args[2:]] if len(args) >= 2 else [uv_bin(), *args]
    run_env = env if env is not None else uv_env(cache_dir)
    if on_line is None:
        return _said_how_it_ended(subprocess.run(cmd, cwd=str(cwd) if cwd else None, capture_output=True, text=True,
                                                 env=run_env))
    import threading

    proc = subprocess.Popen(cmd, cwd=str(cwd) if cwd else None, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=run_env)
    out: List[str] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True)  # never blocks uv
    reader.start()
    err: List[str] = []
    try:
        for line in proc.stderr:
            err.append(line)
            text = line.rstrip()
            if text:
                try:
                    on_line(text)
                except Exception:  # progress is cosmetic: uv's run must not depend on it
                    pass
        proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        reader.join(timeout=5)
        proc.stdout.close()
        proc.stderr.close()
    return _said_how_it_ended(subprocess.CompletedProcess(cmd, proc.returncode, "".join(out), "".join(err)))


def _said_how_it_ended(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """A uv killed by a signal prints nothing; its stderr then says which signal, so the one line the user gets
    is "uv was killed by SIGXFSZ (file size limit exceeded)", not "uv failed without a message"."""
    if proc.returncode is not None and proc.returncode < 0:
        import signal

        try:
            sig = signal.Signals(-proc.returncode)
            name = f"{sig.name} ({signal.strsignal(sig)})"
        except ValueError:
            name = f"signal {-proc.returncode}"
        proc.stderr = (proc.stderr or "") + f"error: uv was killed by {name}\n"
    return proc


def progress_lines(phase) -> Optional[Callable[[str], None]]:
    """An `on_line` for run_uv that shows uv's progress on an envbuild.progress.Phase: every line as what
    the phase is on now, uv's summary lines (Resolved/Prepared/Installed ...) as lines of their own."""
    if phase is None:
        return None

    def on_line(text: str) -> None:
        phase.detail(f"uv: {text.strip()}")
        if SUMMARY.match(text.strip()):
            phase.log(f"uv: {redact_all(text.strip())}")
    return on_line
