"""Start `envbuild record` in a Python process that a Ray worker started (sglang's scheduler and TP workers,
multiprocessing spawn children): they inherit ENVBUILD_RECORD_DIR and a PYTHONPATH with this folder first, so
Python imports this file at start. Then the next sitecustomize on sys.path is loaded, as if this one were not
there (the chain-loading ddtrace's bootstrap does), so a site's own sitecustomize keeps working."""
import os
import sys


def _record() -> None:
    if not os.environ.get("ENVBUILD_RECORD_DIR"):
        return
    try:
        from envbuild.record import hook
    except Exception:  # envbuild not importable by this interpreter: record nothing, break nothing
        return
    hook.setup(origin="sitecustomize")


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    own = sys.modules.pop("sitecustomize", None)
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        import importlib

        importlib.import_module("sitecustomize")
    except ImportError as exc:
        if exc.name != "sitecustomize":
            raise
        if own is not None:
            sys.modules["sitecustomize"] = own
    finally:
        sys.path[:] = saved


try:
    _record()
except Exception:
    pass
_chain()
