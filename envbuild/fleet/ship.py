"""Ship the driver's envbuild to Ray nodes whose workers cannot import it, in the job's runtime_env.

`envbuild doctor --ray` runs its agents in the Ray workers of every node. A node whose Python environment has Ray
but not envbuild (an admin installed Ray on the nodes and envbuild only where they type commands) would give no
report. Ray's own answer for code the nodes lack is the runtime_env's `py_modules`: the driver zips a package,
Ray stores it in the cluster (content-addressed, so a second sweep uploads nothing) and each node's runtime-env
agent unpacks it onto its workers' sys.path. The sweep does that only for the nodes that need it, after their
first agent failed on `No module named 'envbuild'`, and says so on each of those nodes (fleet.envbuild_shipped):
their report is the driver's envbuild's, and envbuild still has to be installed there for runs outside Ray.

What ships: the envbuild package with its payloads (checks/ as envbuild/data/checks, where a wheel has them), and
the pure-Python packages the doctor imports in a worker that Ray itself does not bring (rich and its
dependencies). Everything else envbuild imports there (click, packaging, PyYAML) is a dependency of Ray; pynvml is
optional (without it NVML facts are unavailable, said per check).
"""
from __future__ import annotations

import importlib
import shutil
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

# imported by the doctor in a worker, not a dependency of Ray (rich's own dependencies with it)
WORKER_PACKAGES = ("rich", "markdown_it", "mdurl", "pygments")
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc")


def stage(folder: str) -> List[str]:
    """Copy the driver's envbuild (payloads inside) into `folder`; the py_modules entries to ship."""
    import envbuild
    from envbuild.paths import payload_dir

    dest = Path(folder) / "envbuild"
    shutil.copytree(Path(envbuild.__file__).resolve().parent, dest, ignore=_IGNORE)
    checks = dest / "data" / "checks"
    if not checks.is_dir():  # a source checkout keeps the payloads beside the package, not in it
        shutil.copytree(payload_dir(), checks, ignore=_IGNORE)
    modules = [str(dest)]
    for name in WORKER_PACKAGES:
        try:
            module = importlib.import_module(name)
        except ImportError:  # the driver itself lacks it: the node's own copy, if any, is used
            continue
        modules.append(str(Path(module.__file__).resolve().parent))
    return modules


def _upload(env: Dict[str, Any], scratch: str) -> Dict[str, Any]:
    """Local py_modules paths uploaded to the cluster and replaced by their gcs:// URIs. Ray takes local paths
    only in ray.init's job-wide runtime_env, and shipping to every node would cost each of them a runtime-env
    setup; this is the function ray.init calls for them (private: its arguments changed across versions)."""
    import inspect
    import logging

    from ray._private.runtime_env.py_modules import upload_py_modules_if_needed

    params = inspect.signature(upload_py_modules_if_needed).parameters
    kwargs: Dict[str, Any] = {"scratch_dir": scratch, "logger": logging.getLogger("envbuild.fleet.ship")}
    if "include_gitignore" in params:
        kwargs["include_gitignore"] = False
    return upload_py_modules_if_needed(env, **{k: v for k, v in kwargs.items() if k in params})


def shipping_env(job_env: Optional[Dict[str, Any]]) -> Tuple[Dict[str, Any], str]:
    """(the runtime_env of an agent that brings envbuild along, the temp folder to remove after the sweep).

    The job's runtime_env is kept (an actor's runtime_env replaces the job's field by field): its env_vars and
    the rest reach the agent as they reach the job's actors, its own py_modules stay ahead of envbuild's.
    Raises RuntimeError when this Ray cannot take the upload."""
    folder = tempfile.mkdtemp(prefix="envbuild-ship-")
    env = dict(job_env or {})
    try:
        ours = _upload({"py_modules": stage(folder)}, folder)["py_modules"]
    except Exception as exc:  # ImportError/TypeError from another Ray's internals, OSError from the copy
        shutil.rmtree(folder, ignore_errors=True)
        raise RuntimeError(f"{type(exc).__name__}: {exc}") from None
    env["py_modules"] = list(env.get("py_modules") or []) + list(ours)
    return env, folder
