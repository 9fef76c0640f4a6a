"""The PyPI-only backend: the env is a virtual environment on an interpreter the user names
(`create --backend venv --python PATH`), no conda channel involved; everything else comes from the pip
lock, including the CUDA toolkit pieces source builds need (NVIDIA's PyPI wheels: nvidia-cuda-nvcc-cuXX,
nvidia-cuda-runtime-cuXX, nvidia-cuda-cccl-cuXX, ... with headers and libraries under site-packages/nvidia/).

Why: many clusters reach no conda channel (companies block Anaconda's, this project's own machines reach
PyPI only), while a Python of the right version is usually there (a module, pyenv, the OS). The base is
`uv venv --relocatable` on that interpreter (no pip seeded from the network: pip/setuptools, when source
builds need them, are pinned in the pip lock like everything else). The venv links to the interpreter, so
unlike a conda env it is not self-contained: the interpreter must stay where it is, on every node.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Callable, List, Optional, Sequence

from envbuild.errors import EnvbuildError
from envbuild.install.backends import BaseRequest

HELP = "a venv on --python PATH, everything from the pip lock (no conda channel; CUDA toolkit from NVIDIA's wheels)"
USES_CONDA_LOCK = False
PER_PACKAGE_PROGRESS = False
# What `pip install -e` / `pip wheel` of the git sources and source builds run inside the env.
BUILD_TOOLS = ("pip", "setuptools")


def health_check() -> Optional[str]:
    try:
        from envbuild.lock.uv_cli import uv_bin

        uv_bin()
    except EnvbuildError as exc:
        return str(exc)
    return None


def interpreter_version(python: Path) -> str:
    """`major.minor` of the interpreter at `python` (EnvbuildError naming it when it cannot run)."""
    try:
        proc = subprocess.run([str(python), "-E", "-S", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                              capture_output=True, text=True, timeout=60)
    except OSError as exc:
        raise EnvbuildError(f"--python {python}: cannot run it ({exc.strerror or exc})") from exc
    if proc.returncode != 0 or not re.fullmatch(r"\d+\.\d+", proc.stdout.strip()):
        raise EnvbuildError(f"--python {python}: not a Python interpreter ({(proc.stderr or proc.stdout).strip()[:200]})")
    return proc.stdout.strip()


def find_interpreter(version: str) -> Optional[Path]:
    """A working Python `version` ("3.12") on this machine: `python3.12` on PATH, else the newest pyenv
    install of it ($PYENV_ROOT or ~/.pyenv), else the system's /usr/bin and /usr/local/bin. Each candidate is
    run: a pyenv shim of a version that is installed but not selected fails and is passed over."""
    import os
    import shutil

    names = [f"python{version}"]
    found = [shutil.which(n) for n in names]
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    def release(p: Path) -> tuple:
        return tuple(int(x) if x.isdigit() else -1 for x in p.name.split("."))
    installs = sorted(pyenv.glob(f"{version}.*"), key=release, reverse=True) if pyenv.is_dir() else []
    found += [str(d / "bin" / f"python{version}") for d in installs]
    found += [f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"]
    for cand in found:
        if not cand or not Path(cand).is_file():
            continue
        try:
            if interpreter_version(Path(cand)) == version:
                return Path(cand)
        except EnvbuildError:
            continue
    return None


def missing_build_tools(locked_names: Sequence[str], builds_from_source: bool) -> List[str]:
    """Which of BUILD_TOOLS the pip lock lacks although the recipe's git sources or builds need them."""
    return [t for t in BUILD_TOOLS if t not in set(locked_names)] if builds_from_source else []


def check_request(python: Optional[str], want: str, profile: str, locked_names: Sequence[str],
                  builds_from_source: bool) -> Path:
    """The interpreter for a venv create, checked before anything is written: it must be Python `want`
    (the profile's), and the pip lock must hold pip/setuptools when the recipe builds from source. `python`
    is a path, a command, a version ("3.12"), or None for the profile's version (find_interpreter)."""
    if not python or re.fullmatch(r"\d+\.\d+", python):
        version = python or want
        found = find_interpreter(version)
        if found is None:
            raise EnvbuildError(f"--backend venv: no working Python {version} found (python{version} on PATH, "
                                f"pyenv, /usr/bin); give --python PATH to a Python {want} interpreter for {profile}")
        python = str(found)
    path = Path(python).expanduser()
    if "/" not in python and shutil.which(python):  # a command (python3.12): where the shell would find it
        path = Path(shutil.which(python))
    got = interpreter_version(path)
    if got != want:
        raise EnvbuildError(f"--python {path} is Python {got}, but profile {profile} needs Python {want}; "
                            f"nothing was built")
    missing = missing_build_tools(locked_names, builds_from_source)
    if missing:
        raise EnvbuildError(f"--backend venv: profile {profile} installs git sources/source builds with pip, but its "
                            f"pip lock pins no {', '.join(missing)}; add them to [recipe.toolchain] pip or [recipe.pip] "
                            f"requirements, and re-lock")
    return path.absolute()


def install(request: BaseRequest, advance: Optional[Callable[[], None]] = None) -> None:
    from envbuild.lock.uv_cli import one_line, run_uv

    if request.interpreter is None:
        raise EnvbuildError("--backend venv needs --python PATH")
    proc = run_uv(["venv", str(request.staging), "--python", str(request.interpreter), "--relocatable",
                   "--allow-existing", "--no-project", "--quiet"])
    if proc.returncode != 0:
        raise EnvbuildError(f"venv on {request.interpreter}: {one_line(proc.stderr)}")
    # `source <prefix>/bin/activate` also runs envbuild's activation (CUDA_HOME, library path, launch env)
    activate = request.staging / "bin" / "activate"
    hook = '\n# envbuild: the profile\'s activation (CONDA_PREFIX = this env, as its values expect)\n' \
           '[ -f "$VIRTUAL_ENV/envbuild/activate" ] && . "$VIRTUAL_ENV/envbuild/activate"\n'
    if activate.is_file() and "envbuild" not in activate.read_text(encoding="utf-8"):
        with open(activate, "a", encoding="utf-8") as fh:
            fh.write(hook)
