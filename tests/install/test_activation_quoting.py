"""Activation scripts under hostile prefixes: each one is sourced by a real shell, which must end with the env's
paths exactly (CONDA_PREFIX, PATH, CUDA_HOME, LD_LIBRARY_PATH, the profile's variables) and run nothing the
prefix spells; prefixes PATH cannot hold (':' or control characters) are refused before any script is written."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from envbuild.errors import EnvbuildError
from envbuild.install.activation import write_scripts

HOSTILE = [
    "with space",
    "$(touch PWNED)",
    "`touch PWNED`",
    "it's",
    'say "hi"',
    "$HOME",
    "}brace{${x}",
    "uni-ñ-日本-🙂",
    "*star?[ab]",
    "back\\slash\\n",
    "semi;colon&amp|pipe>redir",
    "-dash --opt",
    "~tilde",
    "'; touch PWNED; '",
]
REFUSED = ["new\nline", "co:lon", "tab\there", "cr\rhere"]
ENV = {"FOO_HOME": "$CONDA_PREFIX/share/foo", "BAR": "${CONDA_PREFIX}", "RAW": "$(touch PWNED) `id` $HOME 'q' \"d\"",
       "NCCL_NVLS_ENABLE": "0"}
SHELLS = [s for s in ("bash", "dash") if shutil.which(s)]


def _activate(shell: str, target: Path, script: str, workdir: Path) -> dict:
    probe = ('printf "%s\\0" "$CONDA_PREFIX" "${PATH%%:*}" "$CUDA_HOME" "${LD_LIBRARY_PATH%%:*}" '
             '"$FOO_HOME" "$BAR" "$RAW" "$NCCL_NVLS_ENABLE"')
    out = subprocess.run([shell, "-c", f'. "$1"; {probe}', "sh", str(script)], capture_output=True, cwd=str(workdir),
                         env={"PATH": "/usr/bin:/bin", "HOME": "/home/nobody", "LD_LIBRARY_PATH": "/opt/x",
                              "ENVBUILD_DRIVER_VERSION": ""}, timeout=30)
    assert out.returncode == 0, out.stderr.decode()
    keys = ["CONDA_PREFIX", "PATH0", "CUDA_HOME", "LD0", "FOO_HOME", "BAR", "RAW", "NCCL_NVLS_ENABLE"]
    return dict(zip(keys, out.stdout.decode().split("\0")))


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_prefix_activates_exactly_and_runs_nothing(tmp_path, name, shell):
    target = tmp_path / name
    target.mkdir()
    scripts = write_scripts(target, target, "fx", "12.9", ENV)
    got = _activate(shell, target, scripts["activate"], tmp_path)
    want = {"CONDA_PREFIX": str(target), "PATH0": f"{target}/bin", "CUDA_HOME": str(target), "LD0": f"{target}/lib",
            "FOO_HOME": f"{target}/share/foo", "BAR": str(target), "RAW": ENV["RAW"], "NCCL_NVLS_ENABLE": "0"}
    assert got == want
    assert not list(tmp_path.rglob("PWNED")), "a prefix or value was executed"

    # conda's own route: activate.d then deactivate.d restore what was there
    out = subprocess.run([shell, "-c", '. "$1"; . "$2"; printf "%s|%s|%s" "$LD_LIBRARY_PATH" "${CUDA_HOME-unset}" '
                                       '"${FOO_HOME-unset}"', "sh", str(scripts["activate.d"]), str(scripts["deactivate.d"])],
                         capture_output=True, text=True, cwd=str(tmp_path), timeout=30,
                         env={"PATH": "/usr/bin:/bin", "CONDA_PREFIX": str(target), "LD_LIBRARY_PATH": "/opt/x",
                              "ENVBUILD_DRIVER_VERSION": ""})
    assert out.returncode == 0 and out.stdout == "/opt/x|unset|unset", out
    assert not list(tmp_path.rglob("PWNED"))


@pytest.mark.parametrize("name", REFUSED)
def test_prefix_path_cannot_hold_is_refused_before_writing(tmp_path, name):
    target = tmp_path / name
    with pytest.raises(EnvbuildError, match="PATH and LD_LIBRARY_PATH"):
        write_scripts(tmp_path / "staging", target, "fx", "12.9", ENV)
    assert not (tmp_path / "staging").exists()


def test_library_path_entries_are_not_globbed(tmp_path):
    """An LD_LIBRARY_PATH entry with a glob character stays literal (an unquoted `for` loop would expand it)."""
    target = tmp_path / "env"
    target.mkdir()
    (tmp_path / "gx1").mkdir()
    scripts = write_scripts(target, target, "fx", "12.9", {})
    out = subprocess.run(["bash", "-c", '. "$1"; printf %s "$LD_LIBRARY_PATH"', "sh", str(scripts["activate"])],
                         capture_output=True, text=True, cwd=str(tmp_path),
                         env={"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "gx*:/usr/local/cuda/lib64/stubs:/a b",
                              "ENVBUILD_DRIVER_VERSION": ""})
    assert out.stdout == f"{target}/lib:gx*:/a b", out
