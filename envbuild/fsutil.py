"""Writing files so that a reader, or a rerun after a kill, never sees half of one."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Union


def atomic_write_text(path: Union[str, Path], text: str, durable: bool = False) -> None:
    """Write via a unique temp file in the same folder, then rename over `path`.

    Why: reports are collected by other programs while nodes write them, and create's phase state must
    survive a SIGKILL at any instant (a rerun resumes from it). `durable` also fsyncs the data before
    the rename, for state that a power cut or kill must not leave empty.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=str(path.parent), prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
