"""The libcuda evidence both libcuda checks show (stack.libcuda_stub, stack.libcuda_compat): which libcuda files
the probe mapped, the loader's search order for libcuda.so.1 and the LD_LIBRARY_PATH it searched."""
from __future__ import annotations

from typing import Any, Dict

from envbuild.facts import stack_view as sv


def libcuda_rows(stack: Dict[str, Any]) -> Dict[str, Any]:
    mapped = sv.mapped(stack, "libcuda")
    order = (stack.get("resolution") or {}).get("libcuda.so.1", [])
    return {"mapped": [{k: m.get(k) for k in ("path", "file_version", "api_version", "api_error", "stub", "compat")}
                       for m in mapped],
            "search_order_libcuda.so.1": order,
            "LD_LIBRARY_PATH": (stack.get("env") or {}).get("LD_LIBRARY_PATH")}
