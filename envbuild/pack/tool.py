"""envbuild's own wheels in a bundle (`tool/`), so build_conda.sh can bootstrap envbuild on a node with no PyPI.

An air-gapped node has a system python3 and the bundle, nothing else; the bundle's env needs envbuild to be
created, and envbuild needs click, py-rattler, conda-lock and the rest. So pack locks envbuild's
dependencies (pyproject.toml's, plus its build backend for the editable install) with the same resolver
and hashes as the env's pip layer, for the node's bootstrap Python and glibc, and puts the wheels and that
lock in tool/. build_conda.sh installs them with `--no-index --require-hashes`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, List

from envbuild.errors import EnvbuildError

PYPI = "https://pypi.org/simple/"


def tool_requirements(repo: Path) -> List[str]:
    """envbuild's runtime dependencies and build backend, read from the checkout's pyproject.toml."""
    from envbuild.tomlcompat import toml

    path = repo / "pyproject.toml"
    if not path.is_file():
        raise EnvbuildError(f"--tool-python needs envbuild's source checkout (no {path})")
    data = toml.loads(path.read_text(encoding="utf-8"))
    # pip: build_conda.sh upgrades a venv's pip older than 21.3 (no PEP 660 editable installs) from these wheels
    return list(data["project"]["dependencies"]) + list(data["build-system"]["requires"]) + ["pip>=23.2.1"]


def stage_tool(stage: Path, repo: Path, python_version: str, glibc: str, index_url: str = PYPI,
               phase: Any = None) -> int:
    """Lock and fetch envbuild's dependencies into stage/tool/; returns how many wheels. `phase` (an
    envbuild.progress.Phase) shows uv's resolution and counts the wheels and bytes fetched."""
    from envbuild.install.pip_layer import fetch_locked_wheel
    from envbuild.lock.pip_lock import platform_tags_for, resolve_pip_lock
    from envbuild.lock.pip_lockfile import parse_pip_lock
    from envbuild.profile.recipe import PipIndex

    tool = stage / "tool"
    tool.mkdir(parents=True, exist_ok=True)
    text = resolve_pip_lock(tool_requirements(repo), [PipIndex("tool-index", index_url)], python_version,
                            platform_tags_for("linux-64", glibc), phase=phase)
    (tool / "requirements.lock.txt").write_text(text, encoding="utf-8")
    (tool / "python-version").write_text(python_version + "\n", encoding="utf-8")
    entries = parse_pip_lock(text, tool / "requirements.lock.txt")
    if phase is not None:
        phase.set_total(total=len(entries))
    for entry in entries:
        fetch_locked_wheel(entry, tool, phase)
    return len(entries)
