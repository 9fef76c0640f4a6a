"""What the create benchmarks share: running the envbuild CLI as a user does, and reading create's own
per-phase timings from its closing line. One parser, so bench_create and bench_lock_create read the same
numbers the same way."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from typing import Dict, Tuple

# A proxy nobody listens on: anything that tries the network fails at once instead of hanging.
OFFLINE = {k: "http://127.0.0.1:9" for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")}


def run_envbuild(args, env: Dict[str, str], offline: bool = False) -> Tuple[subprocess.CompletedProcess, float]:
    """`python -m envbuild ARGS` with `env` added (and OFFLINE when asked); (process, wall seconds).

    COLUMNS=400 keeps rich from wrapping create's closing line."""
    full = dict(os.environ, **env, **(OFFLINE if offline else {}), COLUMNS="400")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "envbuild", *args], capture_output=True, text=True, env=full)
    return proc, time.monotonic() - t0


def create_phases(text: str) -> Dict[str, float]:
    """create's per-phase seconds from its closing line `created DIR (fetch 0.02s, conda 1.20s, ...)`;
    {} when the line is missing. Whitespace is collapsed first in case a terminal wrapped the line."""
    m = re.search(r"created \S+ \(([^)]*)\)", " ".join(text.split()))
    return {k: float(v) for k, v in re.findall(r"(\w+) ([0-9.]+)s", m.group(1))} if m else {}
