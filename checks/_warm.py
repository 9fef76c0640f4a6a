"""A rank interpreter started before its probe: it imports torch, then waits to be told which probe to be.

Why: every GPU probe is a fresh `python checks/<probe>.py`, and on the lent 2xH200 machine python plus
`import torch` is most of each probe's few seconds (doctor --quick launches about ten of them). The
doctor's warm pool (envbuild/doctor/warmpool.py) starts these interpreters while the previous probe
still runs; they import torch (no CUDA call: no context, no GPU memory, nothing a running measurement
could see) and block on stdin. A launch then writes one JSON line:

    {"argv": [script, arg...], "env": {...}, "cwd": run_dir, "stdout": path, "stderr": path}

and this process becomes that rank: the same environment (the pool hands out an interpreter only when
every variable read before `import torch` finished - LD_*, PYTHON*, TORCH_*, PYTORCH_* ... - is the
same), run directory, log files and argv as a cold start. End of input (the pool closing) exits 0.
ENVBUILD_WARM_IMPORTS (comma-separated, default "torch,torch.distributed") names what to import ahead;
a module that fails to import is left for the payload, whose own import then reports the error as a
cold start would.
"""
from __future__ import annotations

import importlib
import json
import os
import runpy
import sys
from typing import Any, Dict


def become(spec: Dict[str, Any]) -> None:
    """Turn this interpreter into the rank `spec` describes, then run its script as __main__."""
    os.chdir(spec["cwd"])
    for fd, path in ((1, spec["stdout"]), (2, spec["stderr"])):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.environ.clear()  # putenv/unsetenv underneath: CUDA and NCCL getenv() see the rank's variables
    os.environ.update(spec["env"])
    script = os.path.abspath(spec["argv"][0])
    sys.argv = [script] + list(spec["argv"][1:])
    # A cold `python script` puts the script's folder first, then PYTHONPATH's entries.
    first = [os.path.dirname(script)] + [p for p in spec["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    rest = [p for p in sys.path[1:] if p not in first]
    sys.path[:] = list(dict.fromkeys(first)) + rest
    runpy.run_path(script, run_name="__main__")


def main() -> int:
    for name in os.environ.get("ENVBUILD_WARM_IMPORTS", "torch,torch.distributed").split(","):
        if name.strip():
            try:
                importlib.import_module(name.strip())
            except Exception:  # the payload's own import reports it, as in a cold start
                pass
    line = sys.stdin.readline()
    if not line.strip():
        return 0
    become(json.loads(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
