"""Activation scripts of a created env, rendered from templates/ with jinja2.

Writes <prefix>/etc/conda/activate.d/envbuild.sh and deactivate.d/envbuild.sh (run by conda/micromamba
activate) and <prefix>/envbuild/activate (for nodes without conda). They set CUDA_HOME, build a library
path without driver stubs, add cuda-compat only when the host driver is older than the runtime needs and
the GPU supports forward compatibility, and export the profile's [recipe.activation] env.

$CONDA_PREFIX/lib goes first on the library path so that extensions built against this env's toolkit
(cudart, nvrtc, cublas from the conda layer) find it at run time; the env holds no libnccl/libcudnn (those
come from the pip wheels through torch's RPATH), so this cannot shadow the one NCCL.

`compat_needed` is the same decision in Python: the create plan shows what it decides on this node.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

# Minimum Linux x86_64 driver of each CUDA toolkit release (NVIDIA CUDA Toolkit Release Notes, table
# "CUDA Toolkit and Corresponding Driver Versions", GA releases).
MIN_DRIVER = {
    "12.0": "525.60.13", "12.1": "530.30.02", "12.2": "535.54.03", "12.3": "545.23.06", "12.4": "550.54.14",
    "12.5": "555.42.02", "12.6": "560.28.03", "12.8": "570.26", "12.9": "575.51.03", "13.0": "580.65.06",
}
COMPAT_DIR = "cuda-compat"  # where conda-forge/nvidia cuda-compat puts libcuda.so.*
_NO_FORWARD_COMPAT = ("GeForce", "TITAN")


def min_driver(cuda: str) -> str:
    major_minor = ".".join(cuda.split(".")[:2])
    return MIN_DRIVER.get(major_minor, "0")


def _vkey(v: str) -> Tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v))


def compat_needed(driver: Optional[str], cuda: str, gpu_names: Sequence[str]) -> Tuple[bool, str]:
    """(use cuda-compat?, why). Mirrors the shell logic in templates/activate.sh.j2."""
    need = min_driver(cuda)
    if not driver:
        return False, "no NVIDIA driver found"
    if _vkey(driver) >= _vkey(need):
        return False, f"driver {driver} >= {need} needed by CUDA {cuda}"
    if not gpu_names or any(tag in n for n in gpu_names for tag in _NO_FORWARD_COMPAT):
        return False, f"driver {driver} < {need}, but the GPU does not support forward compatibility"
    return True, f"driver {driver} < {need} needed by CUDA {cuda}: using cuda-compat"


def host_decision(cuda: str) -> Tuple[bool, str]:
    """compat_needed for this node: driver from /sys/module/nvidia/version, GPU names from nvidia-smi."""
    import shutil
    import subprocess

    try:
        driver = Path("/sys/module/nvidia/version").read_text().strip() or None
    except OSError:
        driver = None
    names = []
    if driver and shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                 text=True, timeout=10)
            names = [n.strip() for n in out.stdout.splitlines() if n.strip()]
        except (OSError, subprocess.SubprocessError):
            names = []
    return compat_needed(driver, cuda, names)


_CONDA_PREFIX_REF = re.compile(r"\$\{CONDA_PREFIX\}|\$CONDA_PREFIX(?![A-Za-z0-9_])")
# characters a prefix cannot hold: ':' splits PATH and LD_LIBRARY_PATH, control characters (newlines) break
# every line-based tool that reads these paths; everything else is quoted
_BAD_PREFIX = re.compile(r"[:\x00-\x1f\x7f]")


def check_prefix(target: Path) -> None:
    """Refuse, before anything is built, a prefix the activation scripts cannot put on PATH."""
    from envbuild.errors import EnvbuildError

    from envbuild.envvalues import prefix_problem

    problem = prefix_problem(str(target))
    if problem:
        raise EnvbuildError(problem)
    bad = _BAD_PREFIX.search(str(target))
    if bad:
        raise EnvbuildError(f"prefix {str(target)!r}: contains {bad.group(0)!r}, which PATH and LD_LIBRARY_PATH "
                            f"cannot hold; choose a prefix without ':' or control characters")


def shell_value(value: str) -> str:
    """`value` as one sh word: literal text single-quoted (shlex.quote), `$CONDA_PREFIX` / `${CONDA_PREFIX}`
    expanded to the env's prefix (the only reference profiles use); nothing else is ever expanded or run."""
    import shlex

    parts = []
    pos = 0
    for m in _CONDA_PREFIX_REF.finditer(value):
        if m.start() > pos:
            parts.append(shlex.quote(value[pos:m.start()]))
        parts.append('"$_envbuild_prefix"')
        pos = m.end()
    if pos < len(value) or not parts:
        parts.append(shlex.quote(value[pos:]))
    return "".join(parts)


def _comment(text: str) -> str:
    """`text` safe inside a one-line shell comment."""
    return re.sub(r"[\x00-\x1f\x7f]", "?", text)


def write_scripts(staging: Path, target: Path, profile_name: str, cuda: str, env: Dict[str, str]) -> Dict[str, Path]:
    """Render the scripts into `staging`, naming `target` as the prefix; returns role -> path."""
    from envbuild.lock.spec import template_env

    for name in env:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"activation variable {name!r} is not a shell name")
    import shlex

    check_prefix(target)
    jenv = template_env()
    ctx = dict(profile=_comment(profile_name), prefix_q=shlex.quote(str(target)), prefix_comment=_comment(str(target)),
               cuda=_comment(cuda), min_driver=min_driver(cuda), compat_dir=COMPAT_DIR,
               env={k: shell_value(v) for k, v in env.items()})
    out = {
        "activate.d": staging / "etc" / "conda" / "activate.d" / "envbuild.sh",
        "deactivate.d": staging / "etc" / "conda" / "deactivate.d" / "envbuild.sh",
        "activate": staging / "envbuild" / "activate",
    }
    templates = {"activate.d": "activate.sh.j2", "deactivate.d": "deactivate.sh.j2", "activate": "activate.j2"}
    for role, path in out.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(jenv.get_template(templates[role]).render(**ctx), encoding="utf-8")
    return out
