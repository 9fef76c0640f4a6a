"""stack.libcuda_stub: no stub libcuda (the toolkit's link-time library) is loaded or first on the library path (C7)."""
from __future__ import annotations

from envbuild.doctor.checks._libcuda import libcuda_rows
from envbuild.doctor.registry import check, verdict
from envbuild.facts import stack_view as sv
from envbuild.report.model import Result, Status

# What every CUDA call of this env then reports (doctor/fold.py folds those failures, stack.torch's included,
# under this check): CUDA_ERROR_STUB_LIBRARY / cudaErrorStubLibrary, 34.
EXPLAINS = [r"[Ss]tub library", r"STUB_LIBRARY", r"cudaErrorStubLibrary", r"Error 34\b"]


@check("stack.libcuda_stub", "stack", "no stub libcuda is loaded or first on the library path", causes=("C7",))
def libcuda_stub(ctx) -> Result:
    """The toolkit's stub libcuda only exists for linking; loaded at run time every call returns
    CUDA_ERROR_STUB_LIBRARY (34)."""
    stack = ctx.facts.stack()
    ev = libcuda_rows(stack)
    fix = ("remove the stubs directory from LD_LIBRARY_PATH and /etc/ld.so.conf.d (then `ldconfig`); link against "
           "stubs only at build time")
    for m in sv.mapped(stack, "libcuda"):
        if m.get("stub") or "returned 34" in (m.get("api_error") or ""):
            return verdict(Status.FAIL,
                          f"the stub libcuda {m['path']} is loaded: every driver call returns CUDA_ERROR_STUB_LIBRARY",
                          evidence={**ev, "explains": EXPLAINS}, causes=["C7"], remediation=fix)
    order = ev["search_order_libcuda.so.1"]
    if order and order[0].get("stub"):
        return verdict(Status.FAIL,
                      f"the stub {order[0]['path']} is first in the loader's search for libcuda.so.1 (via "
                      f"{order[0]['origin']}): a process that loads the driver by name gets the stub",
                      evidence={**ev, "explains": EXPLAINS}, causes=["C7"], remediation=fix)
    where = ev["mapped"][0]["path"] if ev["mapped"] else (order[0]["path"] if order else None)
    return verdict(Status.PASS,
                  f"libcuda is the driver's ({where})" if where else "no libcuda loaded or on the search path; no stubs",
                  evidence=ev)
