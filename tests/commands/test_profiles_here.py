"""A newcomer's first minutes: `envbuild profiles` (on a terminal) and `profiles show NAME` say which locks
each profile has and what builds from them on this machine, with the command that does; `--python` takes a
command name as the shell would find it; the `--help` examples name a backend that builds from a pip lock
alone.

The profiles are real and locked for real: a conda lock from the fixture channel, pip locks from a
loopback index. The machine is set by PATH (a folder holding `python3.11` -> the test interpreter) and
PYENV_ROOT (empty); the profile `nopython` asks for a Python 3.99, which no machine has.
"""
from __future__ import annotations

import os
import pty
import shutil
import subprocess
import sys

import pytest

from fixturegen.conda_channel import FIXTURE_PROFILE, build_channel
from fixturegen.installed_wheels import wheel_of_installed
from fixturegen.wheels import make_wheel, serve, write_simple_index

PIP = """
[recipe.pip]
indexes = [{{ name = "fixture", url = "{index}" }}]
requirements = {requirements}
exclude_newer = "2026-06-01T00:00:00Z"
"""
GIT = """
[[recipe.git]]
name = "lib"
url = "https://git.invalid/lib"
commit = "0123456789abcdef0123456789abcdef01234567"
install = "none"
"""
BUILD = """
[[recipe.build]]
name = "lib"
git = "lib"

[recipe.toolchain]
cxx = "g++"
"""
PYVER = "%d.%d" % sys.version_info[:2]


def envbuild(*args, env, tty=False):
    full = dict(os.environ, COLUMNS="400", **env)
    cmd = [sys.executable, "-m", "envbuild", *args]
    if not tty:
        return subprocess.run(cmd, capture_output=True, text=True, env=full, timeout=300)
    leader, follower = pty.openpty()  # a terminal on stdout: the table and the per-profile lines
    proc = subprocess.Popen(cmd, stdout=follower, stderr=subprocess.PIPE, env=full, text=True)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    err = proc.stderr.read()
    proc.wait(timeout=60)
    return subprocess.CompletedProcess(cmd, proc.returncode, b"".join(chunks).decode().replace("\r\n", "\n"), err)


@pytest.fixture(scope="module")
def machine(tmp_path_factory):
    """Six profiles: `both` (conda + pip locks), `pyonly` (pip lock), `notools` (pip lock without pip and
    setuptools, but a git source), `nocuda` (a source build and a [recipe.toolchain], no CUDA wheels locked),
    `nolock` (nothing locked yet), `nopython` (pyonly's pip lock, for a Python 3.99); and a PATH with
    python<this version>."""
    root = tmp_path_factory.mktemp("profiles-here")
    build_channel(root / "channel")
    write_simple_index(root / "index", [make_wheel(root / "w", "alpha", "1.0"), wheel_of_installed(root / "w", "pip"),
                                        wheel_of_installed(root / "w", "setuptools")])
    bindir = root / "bin"
    bindir.mkdir()
    (bindir / f"python{PYVER}").symlink_to(sys.executable)
    base = root / "lockfiles"
    env = {"ENVBUILD_LOCKFILES": str(base), "ENVBUILD_CACHE_DIR": str(root / "cache"),
           "PYENV_ROOT": str(root / "no-pyenv"), "PATH": f"{bindir}{os.pathsep}/usr/bin{os.pathsep}/bin"}
    with serve(root / "index") as url:
        for name, tail, only in (("both", PIP.format(index=url, requirements='["alpha"]'), None),
                                 ("pyonly", PIP.format(index=url, requirements='["alpha"]'), "pip"),
                                 ("notools", PIP.format(index=url, requirements='["alpha"]') + GIT, "pip"),
                                 ("nocuda", PIP.format(index=url, requirements='["alpha", "pip", "setuptools"]')
                                  + GIT + BUILD, "pip"),
                                 ("nolock", PIP.format(index=url, requirements='["alpha"]'), "")):
            (base / name).mkdir(parents=True)
            channel = (root / "channel").as_uri() if name == "both" else (root / "nochannel").as_uri()
            (base / name / "profile.toml").write_text(FIXTURE_PROFILE.format(name=name, channel=channel, mark="m")
                                                      + tail)
            if only == "":
                continue
            r = envbuild("lock", "--profile", name, *(["--only", only] if only else []), env=env)
            assert r.returncode == 0, r.stderr
        shutil.copytree(base / "pyonly", base / "nopython")
        toml = base / "nopython" / "profile.toml"
        toml.write_text(toml.read_text().replace('name = "pyonly"', 'name = "nopython"')
                        .replace('python = "3.11"', 'python = "3.99"'))
        yield {"root": root, "env": env, "bindir": bindir}


def _lines(out: str) -> dict:
    return {ln.split(":", 1)[0]: ln for ln in out.splitlines() if ln.split(":", 1)[0] in
            ("both", "pyonly", "notools", "nocuda", "nolock", "nopython")}


def test_profiles_on_a_terminal_say_locks_and_what_builds_here_one_line_each(machine):
    r = envbuild("profiles", env=machine["env"], tty=True)
    assert r.returncode == 0, r.stderr
    assert "On this machine" in r.stdout
    lines = _lines(r.stdout)
    python = machine["bindir"] / f"python{PYVER}"
    assert lines["both"] == (f"both: locks conda-lock.yml, requirements.lock.txt, pylock.toml · venv: builds here "
                             f"with --python {python} · conda backends: build here")
    assert lines["pyonly"] == (f"pyonly: locks requirements.lock.txt, pylock.toml · venv: builds here with --python "
                               f"{python} · conda backends: no conda-lock.yml (`envbuild lock --profile pyonly` "
                               "needs the conda channels)")
    assert "venv: no, its pip lock pins no pip, setuptools, which its git sources and builds need" in lines["notools"]
    assert lines["notools"].endswith(" · git: 1 source(s) from git.invalid, fetched by create (reachable, or through "
                                     "--git-mirror DIR|URL)")
    assert "venv: no, its source builds need nvcc" in lines["nocuda"] and "in neither the pip lock nor the system" \
        in lines["nocuda"]
    assert lines["nolock"].startswith("nolock: locks none · venv: needs the pip lock first: "
                                      "`envbuild lock --profile nolock --only pip` (PyPI only)")


def test_in_a_pipe_the_list_stays_names_only(machine):
    r = envbuild("profiles", env=machine["env"])
    assert r.returncode == 0 and r.stdout.split() == ["both", "nocuda", "nolock", "nopython", "notools", "pyonly"], r.stdout


def test_without_the_python_of_the_profile_it_says_so(machine):
    r = envbuild("profiles", "show", "nopython", env=machine["env"])
    assert r.returncode == 0, r.stderr
    assert ("venv: no working Python 3.99 found here (python3.99 on PATH, pyenv, /usr/bin); give --python PATH"
            in r.stdout)
    assert "build it here:" not in r.stdout


def test_show_prints_the_create_command_that_builds_here(machine):
    r = envbuild("profiles", "show", "both", env=machine["env"])
    assert r.returncode == 0, r.stderr
    python = machine["bindir"] / f"python{PYVER}"
    builds = [ln for ln in r.stdout.splitlines() if ln.startswith("build it here: ")]
    assert builds == [f"build it here: envbuild create --profile both --backend venv --python {python} --prefix DIR",
                      "build it here: envbuild create --profile both --prefix DIR"]


def test_python_given_as_a_command_name_is_found_on_path(machine):
    env = machine["env"]
    target = machine["root"] / "e2"
    r = envbuild("create", "--profile", "pyonly", "--backend", "venv", "--python", f"python{PYVER}", "--prefix",
                 str(target), env=env)  # a bare name is looked up on PATH, as the --help examples write it
    assert r.returncode == 0, r.stderr
    probe = subprocess.run([str(target / "bin" / "python"), "-c", "import alpha; print(alpha.__version__)"],
                           capture_output=True, text=True)
    assert probe.stdout.strip() == "1.0", probe.stderr


def test_help_examples_use_the_venv_backend_on_the_cu130_profile(machine):
    top = envbuild("--help", env=machine["env"])
    assert "envbuild create --profile slime-v0.3.1-cu130 --backend venv --python 3.12" in top.stdout
    for command in ("create", "pack", "lock", "doctor", "profiles"):
        r = envbuild(command, "--help", env=machine["env"])
        assert r.returncode == 0 and "Examples:" in r.stdout and "slime-v0.3.1-cu130" in r.stdout, command
    assert "--backend venv --python 3.12" in envbuild("create", "--help", env=machine["env"]).stdout
