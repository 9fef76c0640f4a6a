"""Helpers of the fuzz suite, imported by name: a plain module rather than conftest.py, whose name Python shares
among every folder's conftest."""
import os
import shutil
from contextlib import contextmanager


@contextmanager
def env_vars(**values):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def fresh_copy(src, dest):
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(src, dest)
    return dest
