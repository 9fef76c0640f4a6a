"""A pre-started payload interpreter: it imports torch, then waits to become one rank of one probe launch.

Why: on an H200 node `import torch` alone takes 3.5-5 s (docs/gpu-runs/s4-summary-call1.txt) and a quick doctor
launches about six payloads one after another, so start-ups were most of its time. The doctor starts these
interpreters while earlier checks run (envbuild/doctor/warm.py); each becomes exactly one rank and then exits
like any rank: no interpreter ever runs two probes, and nothing of one probe's state reaches another.

Protocol: one JSON line on stdin, {"script", "argv", "env", "cwd", "stdout", "stderr"}; EOF instead means the
doctor needs no more ranks (exit 0). The doctor hands a warm interpreter only launches whose start-time
variables (the dynamic loader's, Python's, torch's, CUDA's: envbuild/doctor/warm.py START_PREFIXES) equal the
ones it started with, so importing torch before the launch's environment is set changes nothing.
"""
import builtins
import json
import os
import sys
import time
import types

from _common import WARM_IMPORT_T_VAR


def _redirect(fd: int, path: str, flags: int) -> None:
    new = os.open(path, flags, 0o644)
    os.dup2(new, fd)
    os.close(new)


def main() -> int:
    began = time.time()
    try:
        import torch  # noqa: F401  the start-up this process exists to pay in advance
    except Exception:  # a cold rank would hit the same error; the payload reports it
        pass
    imported = time.time()
    line = sys.stdin.readline()
    if not line.strip():
        return 0
    job = json.loads(line)
    _redirect(0, os.devnull, os.O_RDONLY)
    _redirect(1, job["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    _redirect(2, job["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.environ.clear()
    os.environ.update(job["env"])
    os.environ[WARM_IMPORT_T_VAR] = "%.3f,%.3f" % (began, imported)
    os.chdir(job["cwd"])
    script = job["script"]
    sys.argv = [script] + list(job["argv"])
    sys.path[0] = os.path.dirname(script)
    # A fresh __main__ whose __file__ is the payload: multiprocessing's spawn re-imports the main module by that
    # path in its children, as it would for `python payload.py`.
    module = types.ModuleType("__main__")
    module.__file__ = script
    module.__builtins__ = builtins
    sys.modules["__main__"] = module
    with open(script, "rb") as fh:
        code = compile(fh.read(), script, "exec")
    exec(code, module.__dict__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
