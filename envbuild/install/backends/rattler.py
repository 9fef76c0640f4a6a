"""py-rattler, embedded (the default): links verified archives straight into the staging prefix.

`alternative_target_prefix` makes every file already name the final target, so nothing is relocated
afterwards. No executable is needed: py-rattler is one of envbuild's own dependencies.
"""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Callable, List, Optional

from envbuild.errors import EnvbuildError
from envbuild.install.backends import BaseRequest

HELP = "py-rattler, embedded in envbuild (no executable needed)"
USES_CONDA_LOCK = True
PER_PACKAGE_PROGRESS = True


def health_check() -> Optional[str]:
    try:
        import rattler  # noqa: F401
    except ImportError as exc:
        return f"py-rattler cannot be imported ({exc}); reinstall envbuild"
    return None


def install(request: BaseRequest, advance: Optional[Callable[[], None]] = None) -> None:
    error = asyncio.run(_link(list(request.archives), request.staging, request.target, request.cache, advance))
    if error:
        raise EnvbuildError(f"conda layer: {error}")


class _LinkReporter:
    """py-rattler InstallerReporter (structural): one `advance()` per finished transaction operation."""

    def __init__(self, advance: Callable[[], None]):
        self.advance = advance

    def on_transaction_operation_complete(self, operation: int) -> None:
        self.advance()


async def _link(verified: List[Path], staging: Path, target: Path, cache: Path,
                advance: Optional[Callable[[], None]]) -> Optional[str]:
    """Link with py-rattler; returns the error text (rattler's cause chain, one line) or None."""
    from rattler import RepoDataRecord, install as rattler_install

    try:
        records = [await RepoDataRecord.from_package_archive(p) for p in verified]
        await rattler_install(records, target_prefix=staging, cache_dir=cache / "rattler-pkgs",
                              alternative_target_prefix=target, show_progress=False,
                              reporter=_LinkReporter(advance) if advance else None)
    except Exception as exc:  # rattler's InstallerError/LinkError carry a "Caused by:" chain
        return " <- ".join(line.strip() for line in str(exc).splitlines() if line.strip()) or type(exc).__name__
    return None
