"""Processes a test (or benchmark) started, found by a marker variable every child inherits.

A test sets ENVBUILD_TEST_MARK=<uuid> in the environment of what it starts; after a kill, /proc tells whether
anything that inherited it survived. Zombies do not count: they hold no memory, no GPU and no port.

Use:  from procmark import marked, cmdline
"""
import os
from typing import List


def marked(marker: str) -> List[int]:
    """PIDs (not zombies, not this process) whose environment carries ENVBUILD_TEST_MARK=marker."""
    entry = f"ENVBUILD_TEST_MARK={marker}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                if entry not in fh.read().split(b"\0"):
                    continue
            with open(f"/proc/{name}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue
        found.append(int(name))
    return found


def cmdline(pid: int) -> str:
    """The process's command line, "?" once it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"
