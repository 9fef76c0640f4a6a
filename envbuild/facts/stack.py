"""Stack facts: run checks/stack_probe.py with the python of the environment under test, read its JSON.

envbuild itself never imports torch; the probe runs in the env's own interpreter so that it sees that
env's RPATHs, LD_LIBRARY_PATH and wheels. LiveSource.stack() calls collect(); a bundle stores the
result under .envbuild/stack.json as {"data": <this dict>}.

The probe's JSON (payload_version 1). Every part may be missing or null when it could not be read;
`errors` then says why, keyed by part.

- payload: "stack_probe"; payload_version: 1; elapsed_s: float; probe_exit_code: int (added by collect():
  0, or 3 when the probe's watchdog ended a hung CUDA/NCCL initialisation)
- errors: {part: message} for each part that failed (e.g. "init", "ldconfig", "maps", "reachable")
- python: {executable, version, prefix, base_prefix, sys_path_dirs[], platform}
- env: {NAME: value} for NCCL_*, CUDA_*, PYTORCH_*, TORCH_NCCL_*, TORCH_SYMM_MEM_*, TMS_*, SGLANG_*,
  NVTE_*, RAY_EXPERIMENTAL_NOSET_*, VLLM_NCCL_*, CUBLAS_*, NVSHMEM_*, LD_PRELOAD, LD_LIBRARY_PATH,
  CONDA_PREFIX, VIRTUAL_ENV, RAY_USE_UVLOOP, recorded before the probe changes anything
- torch: {present, error?, version, cuda (torch.version.cuda), cuda_tag ("cu129"|"cpu"|None),
  git_version, file, nccl_version ("2.28.9", torch.cuda.nccl.version()), nccl_error?,
  cudnn_version ("9.19.0"), cudnn_version_code (91900), cuda_available, device_count, arch_list}
- init: {cuda_tensor: bool, nccl_group: bool, method: str, dlopen_errors?: {soname: msg},
  nccl_get_version?}: what was initialised before the maps were read (a 1-rank NCCL group over a
  FileStore when a GPU exists; otherwise libraries loaded by `import torch`, or by name without torch)
- mapped: [{family, path, realpath, stub, compat, version?, version_string?, version_method?,
  file_version?, api_version?, api_version_code?, api_error?}] for every libnccl / libcudart /
  libcudnn* / libcuda / libnvidia-ml mapped in /proc/self/maps after the initialisation, in map order.
  family is one of libnccl, libcudart, libcudnn, libcuda, libnvidia-ml; api_* come from the library's
  own C API (ncclGetVersion, cudaRuntimeGetVersion, cuDriverGetVersion, cudnnGetVersion);
  version_string is NCCL's compiled-in "2.28.9+cuda12.9"; file_version is the version in the real
  file name (libcuda.so.580.159.04 -> "580.159.04")
- cuda_runtime / cuda_driver: {mapped: bool, path, version ("12.9"), version_code (12090), error}
  from the first mapped libcudart / libcuda
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

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional

from envbuild.facts.errors import FactUnavailable
from envbuild.paths import payload_dir

DEFAULT_TIMEOUT_S = 180.0
# The probe's own watchdog for CUDA/NCCL init fires first, so it still prints what it gathered.
INIT_TIMEOUT_S = 120.0


def _tail(text: str, lines: int = 8) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


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


def collect(python: str, timeout_s: float = DEFAULT_TIMEOUT_S,
            patches: Optional[List[Dict[str, str]]] = None,
            env: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """Run the stack probe with `python` (default: this interpreter) and return its JSON object.

    Raises FactUnavailable with the reason (and the probe's stderr tail) when the interpreter cannot
    run, the probe crashes before printing, or it does not answer within `timeout_s`."""
    python = python or sys.executable
    probe = payload_dir() / "stack_probe.py"
    if not probe.is_file():
        raise FactUnavailable(f"the stack probe {probe} is missing from this envbuild installation")
    if not os.path.exists(python):
        raise FactUnavailable(f"python of the environment under test not found: {python}")
    argv = [python, str(probe), "--init-timeout", str(min(INIT_TIMEOUT_S, max(timeout_s - 30.0, 5.0)))]
    patch_file = None
    try:
        if patches:
            fd, patch_file = tempfile.mkstemp(prefix="envbuild-patches-", suffix=".json")
            with os.fdopen(fd, "w") as fh:
                json.dump(patches, fh)
            argv += ["--patches", patch_file]
        try:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                    env=env, start_new_session=True)
        except OSError as exc:
            raise FactUnavailable(f"cannot run {python}: {exc.strerror or exc}") from exc
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            # Its own session: kill the probe and anything it started, so no process keeps a GPU context.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            out, err = proc.communicate()
            err_text = err.decode("utf-8", "replace")
            raise FactUnavailable(f"the stack probe ({python}) did not answer within {timeout_s:.0f} s"
                                  + (f"; stderr tail:\n{_tail(err_text)}" if err_text.strip() else "")) from exc
    finally:
        if patch_file and os.path.exists(patch_file):
            os.unlink(patch_file)
    stdout = out.decode("utf-8", "replace")
    stderr = err.decode("utf-8", "replace")
    data = None
    for line in reversed(stdout.strip().splitlines()):
        try:
            data = json.loads(line)
            break
        except ValueError:
            continue
    if not isinstance(data, dict) or data.get("payload") != "stack_probe":
        raise FactUnavailable(
            f"the stack probe ({python}) exited {proc.returncode} without its JSON"
            + (f"; stderr tail:\n{_tail(stderr)}" if stderr.strip() else ""))
    data["probe_exit_code"] = proc.returncode
    if proc.returncode != 0 and stderr.strip():
        data.setdefault("errors", {})["stderr_tail"] = _tail(stderr)
    return data
