"""Stack facts: what checks/stack_probe.py reports when run with the python of the environment under test.

envbuild itself never imports torch; the probe runs in the env's own interpreter so that it sees that
env's RPATHs, LD_LIBRARY_PATH and wheels. It runs under the doctor's launcher like every payload
(envbuild/doctor/stack_reader.py, handed to LiveSource as its stack reader, so facts/ never imports doctor/);
a bundle stores the result under .envbuild/stack.json as {"data": <this dict>}. This module holds the format
and what the probe is given.

The probe's JSON (payload_version 1). Every part may be missing or null when it could not be read;
`errors` then says why, keyed by part.

- payload: "stack_probe"; payload_version: 1; elapsed_s: float; probe_exit_code: int (added by the reader:
  0, or 3 when the probe's watchdog ended a hung CUDA/NCCL initialisation); phase_s: {phase: seconds} of the
  main thread (loading torch's libraries, CUDA, NCCL, then "inventory": the wait for the inventory thread);
  inventory_s: the inventory thread's own seconds (it runs beside the rest)
- errors: {part: message} for each part that failed (e.g. "init", "ldconfig", "maps", "reachable")
- python: {executable, version, prefix, base_prefix, sys_path_dirs[], platform}
- env: {NAME: value} for NCCL_*, CUDA_*, PYTORCH_*, TORCH_NCCL_*, TORCH_SYMM_MEM_*, TMS_*, SGLANG_*,
  NVTE_*, RAY_EXPERIMENTAL_NOSET_*, VLLM_NCCL_*, CUBLAS_*, NVSHMEM_*, LD_PRELOAD, LD_LIBRARY_PATH,
  CONDA_PREFIX, VIRTUAL_ENV, RAY_USE_UVLOOP, recorded before the probe changes anything, as the user launched
  the doctor: what the launcher set (NVLS pinned off, ENVBUILD_*, rank variables) is not in it
- torch: {present, error?, method, native_path?, version, cuda (torch.version.cuda), cuda_tag
  ("cu129"|"cpu"|None), git_version, file, nccl_version ("2.28.9", torch.cuda.nccl.version(): the NCCL torch was
  built with), nccl_version_suffix?, nccl_error?, cudnn_version ("9.19.0"), cudnn_version_code (91900),
  cuda_available, device_count, cuda_error? (why CUDA reports no device, in CUDA's words), arch_list? (only
  when torch was imported)}. method: "torch's native libraries, without `import torch`" (checks/_torch_native.py:
  the libraries loaded as torch's package loads them, CUDA and NCCL called through the copies the linker bound)
  or "import torch" (the fallback; native_path then says why the fast path was not used), or, with
  `--resolve-only` (create's gate), "loader trace: torch's libraries resolved by the dynamic loader
  (LD_TRACE_LOADED_OBJECTS), not loaded" (checks/_loader_trace.py: nccl_version then read from libtorch_cuda's
  code; no cuda_available, device_count or cuda_error, since nothing is initialised); resolve_path? says why the
  trace could not stand in (or failed) when the libraries were loaded after all
- init: {cuda_tensor: bool, nccl_group: bool, method: str, source?, nccl_banner?, nccl_banner_version?,
  dlopen_errors?: {soname: msg}, nccl_get_version?}: what was initialised before the maps were read (a
  1-rank NCCL communicator and one all_reduce when a GPU exists; otherwise the libraries torch loads, or by
  name without torch). source: "loader trace" (LOADER_TRACE, checks/_common.py) when `mapped` comes from the
  loader's trace (--resolve-only): nothing was loaded or initialised; method then starts with it too
- mapped: [{family, path, realpath, stub, compat, version?, version_string?, version_method?,
  file_version?, api_version?, api_version_code?, api_error?}] for every libnccl / libcudart /
  libcudnn* / libcuda / libnvidia-ml mapped in /proc/self/maps after the initialisation, in map order (with
  init.source "loader trace": the real paths the loader's trace resolved, in load order, libcuda.so.1 being the copy
  the CUDA runtime would open by name; api_* then come from a child process).
  family is one of libnccl, libcudart, libcudnn, libcuda, libnvidia-ml; api_* come from the library's
  own C API (ncclGetVersion, cudaRuntimeGetVersion, cuDriverGetVersion, cudnnGetVersion);
  version_string is NCCL's compiled-in "2.28.9+cuda12.9"; file_version is the version in the real
  file name (libcuda.so.580.159.04 -> "580.159.04")
- cuda_runtime / cuda_driver: {mapped: bool, path, version ("12.9"), version_code (12090), error}
  of the mapped libcudart / libcuda the CUDA calls bind to: the first in load order (the loader hands a request by
  soname the first copy loaded under it), for the runtime the first of torch's CUDA major; not the first in map
  order, which is by address (checks/stack_probe.py bound_cuda_versions)
- reachable: [{family, path, realpath, origins[], stub, compat, version?, version_string?,
  file_version?, api_version?, api_version_code?, api_error?}] for every libnccl/libcudart/libcudnn*/
  libcuda found on LD_LIBRARY_PATH, site-packages/nvidia/*/lib, torch/lib, PREFIX/lib (+stubs,
  cuda-compat, targets/*/lib) and in `ldconfig -p`; origins among "LD_LIBRARY_PATH", "site-packages",
  "torch/lib", "prefix", "ldconfig". Versions of copies that are not mapped are read in a child process
- resolution: {soname: [{path, origin, stub, compat}]} for libcuda.so.1, libnccl.so.2,
  libcudart.so.12/13, libcudnn.so.9: candidates in the loader's order (LD_LIBRARY_PATH, then the
  ld.so cache); the first is what a library asking by name (not through an RPATH) gets
- distributions: [{name, version, location, url?, commit?, editable?}] from importlib.metadata, sorted by
  name; url/commit/editable come from PEP 610 direct_url.json (pip install git+URL@commit, -e checkouts)
- torch_memory_saver: null | {location, version?, hook_files[]} (the native hook .so files)
- sglang / megatron: null | {import_name, location, version?, distribution?, git?: {root, commit,
  dirty, changed_files, patches?: [{file, state: applied|not-applied|conflicts|missing-patch-file,
  detail}]}}
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional

DEFAULT_TIMEOUT_S = 180.0
# The probe's own watchdog for CUDA/NCCL init fires first, so it still prints what it gathered.
INIT_TIMEOUT_S = 120.0


def init_timeout_s(timeout_s: float) -> float:
    """The probe's --init-timeout for a whole-run deadline of `timeout_s`: its watchdog answers well before."""
    return min(INIT_TIMEOUT_S, max(timeout_s - 30.0, 5.0))


def patch_specs(profile: Any, patch_dir: Optional[Path]) -> List[Dict[str, str]]:
    """The profile's [[patches]] resolved against a local directory holding slime's docker/patch tree.

    `patch_dir` is the root the profile's `file` paths are relative to (a slime checkout), or a folder
    holding the patch files by base name."""
    if profile is None or patch_dir is None:
        return []
    out = []
    for p in profile.patches:
        rel = p.get("file", "")
        cand = Path(patch_dir) / rel
        if not cand.is_file():
            cand = Path(patch_dir) / Path(rel).name
        out.append({"target": p.get("target", ""), "file": rel, "path": str(cand)})
    return out
