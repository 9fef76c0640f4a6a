"""stack_probe.loaded_objects (the loader's own order of what the probe loaded) beside a thread that imports C
extensions, as the probe's inventory thread does: the two must never wait on each other."""
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

CHECKS = Path(__file__).resolve().parents[2] / "checks"

RACE = r"""
import importlib.util, os, shutil, sys, tempfile, threading
sys.path.insert(0, sys.argv[1])
import stack_probe as sp
src, tmp = sys.argv[2], tempfile.mkdtemp()
name = os.path.basename(src).split(".")[0]
def importer():  # each copy is a new object for dlopen, which runs with the GIL held, as an import does
    for i in range(400):
        path = os.path.join(tmp, "%s_%d.so" % (name, i))
        shutil.copy(src, path)
        spec = importlib.util.spec_from_file_location(name, path)
        importlib.util.module_from_spec(spec)
t = threading.Thread(target=importer, daemon=True)
t.start()
rounds = 0
while t.is_alive():
    order = sp.loaded_objects()
    rounds += 1
t.join()
shutil.rmtree(tmp)
assert any(p.endswith("_399.so") for p in sp.loaded_objects())
print("rounds", rounds)
"""


def _extension_module() -> str:
    for name in ("mmap", "array", "_json", "_csv", "_bisect"):
        spec = importlib.util.find_spec(name)
        if spec and spec.origin and spec.origin.endswith(".so"):
            return spec.origin
    pytest.skip("this Python has its extension modules built in")


def test_the_loader_order_is_read_beside_a_thread_importing_c_extensions():
    """dl_iterate_phdr's callback needs the GIL while the loader's lock is held, and an import's dlopen holds the GIL
    while it waits for that lock: the probe hung for good about once in 300 runs. The walk of the loader's list
    takes neither."""
    proc = subprocess.run([sys.executable, "-c", RACE, str(CHECKS), _extension_module()], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("rounds"), proc.stderr[-2000:]


def test_the_order_is_the_loaders():
    """What loaded_objects lists: this process's objects in load order, the interpreter's libc before an extension
    imported later, and each one once."""
    sys.path.insert(0, str(CHECKS))
    try:
        import stack_probe
    finally:
        sys.path.remove(str(CHECKS))
    order = stack_probe.loaded_objects()
    libc = next(i for i, p in enumerate(order) if Path(p).name.startswith("libc.so"))
    ext = _extension_module()
    __import__(Path(ext).name.split(".")[0])
    order = stack_probe.loaded_objects()
    assert len(order) == len(set(order)), order
    assert libc < order.index(str(Path(ext).resolve())), order
