"""Real wheels of distributions installed in the test interpreter (pip, setuptools), rebuilt from their files.

A venv env that builds from source pins pip and setuptools in its pip lock (the venv backend seeds
nothing), so a test index must serve them; the tests have no PyPI, but the test interpreter has both
installed. The wheel is their installed files as the RECORD lists them (the package's own code, not a
stub), with the console scripts left for the installer to regenerate from entry_points.txt, a fresh
RECORD and fixed zip dates, so two builds give the same bytes and the same hash in the lock.
"""
from __future__ import annotations

import base64
import hashlib
import zipfile
from importlib import metadata
from pathlib import Path

_ZIP_DATE = (2026, 1, 1, 0, 0, 0)


def wheel_of_installed(dest: Path, name: str) -> Path:
    """`<name>-<version>-py3-none-any.whl` in `dest` from the installed distribution `name`."""
    dist = metadata.distribution(name)
    base = Path(dist.locate_file(""))
    info = next(str(f).split("/")[0] for f in dist.files if str(f).endswith(".dist-info/METADATA"))
    files = {}
    for f in sorted(dist.files, key=str):
        rel = str(f)
        if rel.startswith("..") or "__pycache__" in rel or rel == f"{info}/RECORD" or rel.endswith(".pyc"):
            continue  # scripts in bin/ (regenerated), bytecode, the old RECORD
        if rel in (f"{info}/INSTALLER", f"{info}/REQUESTED", f"{info}/direct_url.json"):
            continue  # written by the installer, not part of a wheel
        path = base / rel
        if path.is_file():
            files[rel] = path.read_bytes()
    record = [f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}"
              for p, d in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / f"{name.replace('-', '_')}-{dist.version}-py3-none-any.whl"
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for rel, data in files.items():
            zf.writestr(zipfile.ZipInfo(rel, date_time=_ZIP_DATE), data)
    return out
