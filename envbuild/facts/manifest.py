"""`envbuild capture --env OUT.toml`: the stack of a real image, written as a profile.

Run inside the Docker image (with the image's python); the stack probe reads what that env really has,
and this writes it as lockfiles/<name>/profile.toml content whose facts all say `verified = true` and
`source = "captured from <where> on <date> by envbuild capture --env"`. A user can then replace the
the written (verified = false) facts of a profile with what their image holds, or diff the two.

The components written are the ones the shipped profiles name (so the manifest lines up with them),
each only when the env has it.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import socket
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from envbuild.facts import stack_view as sv

# Components every manifest reads in a special way (not just a distribution's version).
_SPECIAL = ("cuda", "python", "torch", "nccl", "cudnn", "sglang", "megatron")
# Launch-environment variables that are policy, not paths (paths differ per machine by design).
_POLICY_PREFIXES = ("NCCL_", "PYTORCH_", "TORCH_NCCL_", "TORCH_SYMM_MEM_", "TMS_", "SGLANG_", "NVTE_",
                    "RAY_EXPERIMENTAL_NOSET_", "NVSHMEM_")
_POLICY_NAMES = ("CUDA_DEVICE_MAX_CONNECTIONS", "CUDA_MODULE_LOADING", "RAY_USE_UVLOOP")
_NOT_POLICY = ("NCCL_VERSION",)  # set by NVIDIA base images as information


def _toml_str(value: str) -> str:
    """A TOML basic string (JSON's escapes are a subset of TOML's)."""
    return json.dumps(str(value), ensure_ascii=False)


def _known_pip_names() -> Dict[str, str]:
    """component -> pip distribution name, from every shipped profile (first one wins)."""
    from envbuild.profile import load_profile, profile_names

    out: Dict[str, str] = {}
    for name in profile_names():
        try:
            prof = load_profile(name)
        except Exception:  # a broken shipped profile must not stop a capture
            continue
        for comp in prof.components.values():
            if comp.pip_name and comp.name not in out:
                out[comp.name] = comp.pip_name
    return out


def captured_components(stack: Dict[str, Any]) -> List[Tuple[str, Dict[str, str]]]:
    """(component, {version?, commit?, pip_name?, where}) for everything the env has."""
    out: List[Tuple[str, Dict[str, str]]] = []
    t = sv.torch_info(stack)
    if t.get("cuda"):
        out.append(("cuda", {"version": t["cuda"], "where": "torch.version.cuda"}))
    py = (stack.get("python") or {}).get("version")
    if py:
        out.append(("python", {"version": py, "where": "sys.version_info"}))
    if t.get("present"):
        out.append(("torch", {"version": t["version"], "pip_name": "torch", "where": "torch.__version__"}))
    v, where = sv.nccl_version_in_use(stack)
    if v:
        major = sv.torch_cuda_major(stack)
        nccl = {"version": v, "where": where}
        pip = sv.dist(stack, "nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11")
        if pip:
            nccl["pip_name"] = pip["name"]
        elif major:
            nccl["pip_name"] = f"nvidia-nccl-cu{major}"
        out.append(("nccl", nccl))
    cudnn = sv.dist(stack, "nvidia-cudnn-cu13", "nvidia-cudnn-cu12")
    if cudnn:
        out.append(("cudnn", {"version": cudnn["version"], "pip_name": cudnn["name"], "where": f"pip {cudnn['name']}"}))
    elif t.get("cudnn_version"):
        out.append(("cudnn", {"version": t["cudnn_version"], "where": "torch.backends.cudnn.version()"}))
    for key, pip_default in (("sglang", "sglang"), ("megatron", "megatron-core")):
        src = sv.source_package(stack, key, pip_default)
        git = src.git
        entry: Dict[str, str] = {}
        if src.version:
            entry["version"] = src.version
        if src.commit:
            entry["commit"] = src.commit
        if entry:
            entry["pip_name"] = pip_default
            entry["where"] = f"git checkout {git['root']}" + (" (modified: patches applied?)" if git.get("dirty") else "") \
                if git.get("commit") else f"pip {(src.dist or {}).get('name', pip_default)}"
            out.append((key, entry))
    for comp, pip_name in sorted(_known_pip_names().items()):
        if comp in _SPECIAL:
            continue
        d = sv.dist_any_flavour(stack, pip_name)
        if d is None:
            continue
        entry = {"version": d["version"], "pip_name": d["name"], "where": f"pip {d['name']}"}
        if d.get("commit"):
            entry["commit"] = d["commit"]
        out.append((comp, entry))
    return out


def policy_env(stack: Dict[str, Any]) -> Dict[str, str]:
    env = stack.get("env") or {}
    return {k: v for k, v in sorted(env.items())
            if (k.startswith(_POLICY_PREFIXES) or k in _POLICY_NAMES) and k not in _NOT_POLICY}


def render_manifest(stack: Dict[str, Any], name: str, where: str, when: str, image: Optional[str] = None) -> str:
    """The manifest text: a complete, loadable profile (envbuild.profile.load_profile_file accepts it)."""
    source = f"captured from {where} on {when} by envbuild capture --env"
    t = sv.torch_info(stack)
    cuda = t.get("cuda") or ""
    lines = [
        f"# Stack of {where} on {when}, written by `envbuild capture --env`.",
        "# Every fact here was read from the environment itself (verified = true). To refresh a profile, copy",
        "# the [components.*] values over lockfiles/<profile>/profile.toml (keep its severity and why lines).",
        "schema = 1",
        "",
        "[profile]",
        f"name = {_toml_str(name)}",
        f"description = {_toml_str('captured ' + (image or where))}",
        f"image = {_toml_str(image or where)}",
        f"framework = {_toml_str('captured by envbuild capture --env')}",
        f"cuda = {_toml_str(cuda or '0.0')}",
        f"cuda_major = {int(cuda.split('.')[0]) if cuda else 0}",
        f"python = {_toml_str((stack.get('python') or {}).get('version', ''))}",
    ]
    for comp, entry in captured_components(stack):
        lines += ["", f"[components.{comp}]"]
        if entry.get("version"):
            lines.append(f"version = {_toml_str(entry['version'])}")
        if entry.get("commit"):
            lines.append(f"commit = {_toml_str(entry['commit'])}")
        if entry.get("pip_name"):
            lines.append(f"pip_name = {_toml_str(entry['pip_name'])}")
        lines.append(f"source = {_toml_str(source + '; read from ' + entry['where'])}")
        lines.append("verified = true")
    for var, value in policy_env(stack).items():
        lines += ["", f"[launch_env.{var}]", f"value = {_toml_str(value)}", 'scope = "all"',
                  f"source = {_toml_str(source + '; the environment of the capturing process')}", "verified = true"]
    libs = [(m["family"], m["path"], m.get("version") or m.get("api_version") or m.get("file_version") or "")
            for m in stack.get("mapped") or []]
    if libs:
        lines += ["", "# Libraries the capturing process mapped after CUDA and NCCL initialised:"]
        lines += [f"#   {fam:13s} {ver:12s} {path}" for fam, path, ver in libs]
    return "\n".join(lines) + "\n"


def write_env_manifest(python: str, out_path: Union[str, Path], image: Optional[str] = None, *,
                       read_stack: Callable[[str], Dict[str, Any]]) -> Path:
    """Read the stack of `python` with `read_stack` (the doctor's stack reader, which runs the probe) and write its
    facts to `out_path` as a profile (see module doc).

    The profile's name is the folder `out_path` sits in when it is named profile.toml (so it can be dropped
    into lockfiles/<name>/), else the file's stem."""
    from envbuild.errors import EnvbuildError
    from envbuild.facts.source import FactUnavailable
    from envbuild.fsutil import atomic_write_text

    out = Path(out_path)
    try:
        stack = read_stack(python)
    except FactUnavailable as exc:
        raise EnvbuildError(f"capture --env: cannot read the stack of {python}: {exc}") from exc
    in_container = os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv")
    where = image or os.environ.get("ENVBUILD_IMAGE") or \
        (f"container {socket.gethostname()}" if in_container else f"host {socket.gethostname()}")
    when = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d")
    name = out.parent.name if out.name == "profile.toml" and out.parent.name else out.stem
    atomic_write_text(out, render_manifest(stack, name, where, when, image=image or os.environ.get("ENVBUILD_IMAGE")))
    return out
