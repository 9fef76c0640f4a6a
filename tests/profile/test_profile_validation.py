"""One profile model validated once: every error through the CLI is `path:line: [table] key: ...`, exit 2,
no traceback; unknown keys get a 'did you mean'; unreadable encodings and deep nesting are named."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
SHIPPED = REPO / "lockfiles" / "slime-v0.3.1-cu129"


def envbuild(*args, env=None):
    return subprocess.run([sys.executable, "-m", "envbuild", *args], capture_output=True, text=True,
                          env=dict(os.environ, **(env or {})), timeout=120)


@pytest.fixture
def profile(tmp_path):
    folder = tmp_path / "lockfiles" / SHIPPED.name
    shutil.copytree(SHIPPED, folder)
    return folder / "profile.toml"


def edit(path: Path, old: str, new: str) -> int:
    """Replace the first `old` (at the start of a line) by `new`; returns its 1-based line."""
    lines = path.read_text().splitlines()
    i = next(n for n, line in enumerate(lines) if line.startswith(old))
    lines[i] = new + lines[i][len(old):]
    path.write_text("\n".join(lines) + "\n")
    return i + 1


@pytest.mark.parametrize("old,new,message", [
    ("platforms =", "platfroms =", "[recipe] platfroms: unknown field in [recipe]; did you mean 'platforms'?"),
    ("channels =", "chanels =", "[recipe.conda] chanels: unknown field in [recipe.conda]; did you mean 'channels'?"),
    ('commit = "1dcf0daf"', 'comit = "1dcf0daf"', "comit: unknown field in [components.megatron]; did you mean 'commit'?"),
    ('install = "build"', 'instal = "build"', "[recipe.git] instal: unknown field in [recipe.git]; did you mean 'install'?"),
    ('pip_args =', 'pip_arg =', "[recipe.build] pip_arg: unknown field in [recipe.build]; did you mean 'pip_args'?"),
    ('requirements =', 'requirement =', "[recipe.pip] requirement: unknown field in [recipe.pip]; did you mean 'requirements'?"),
])
def test_unknown_key_names_file_line_and_the_closest_key(profile, old, new, message):
    line = edit(profile, old, new)
    r = envbuild("lock", "--check", "--lockfiles", str(profile.parent.parent))
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{profile}:{line}: " in r.stderr and message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_recipe_error_in_an_array_of_tables_points_at_its_item(profile):
    head, _, tail = profile.read_text().rpartition('commit = "10417ace"')  # the [[recipe.git]] one, not the component
    profile.write_text(head + 'commit = "HEAD"' + tail)
    line = next(i + 1 for i, l in enumerate(profile.read_text().splitlines()) if l == 'commit = "HEAD"')
    r = envbuild("profiles", "show", str(profile))
    assert r.returncode == 2
    assert f"{profile}:{line}: [recipe.git] commit: git source 'apex': 'HEAD' is not a hex commit" in r.stderr


def test_activation_variable_that_is_not_a_shell_name_is_refused_at_load(profile, tmp_path):
    """Before: found only after every build phase ran. Now: `create --dry-run` refuses it, nothing written."""
    text = profile.read_text()
    profile.write_text(text.replace('NCCL_NVLS_ENABLE = "0" }', 'NCCL_NVLS_ENABLE = "0", "MY-VAR" = "1" }'))
    line = next(i + 1 for i, l in enumerate(profile.read_text().splitlines()) if '"MY-VAR"' in l)
    envs = tmp_path / "envs"
    r = envbuild("create", "--dry-run", "--lockfiles", str(profile.parent.parent), "--name", "x",
                 env={"ENVBUILD_ENVS_DIR": str(envs)})
    assert r.returncode == 2
    assert f"{profile}:{line}: [recipe.activation] env: 'MY-VAR' is not a shell variable name" in r.stderr
    assert not envs.exists()
    text = profile.read_text().replace('"MY-VAR" = "1"', '"1ST" = "1"')
    profile.write_text(text)
    assert "'1ST' is not a shell variable name" in envbuild("profiles", "show", str(profile)).stderr


@pytest.mark.parametrize("data,needle,line", [
    ("schema = 1\n".encode("utf-16"), "is UTF-16 (it starts with a UTF-16 byte-order mark); save it as UTF-8", 1),
    (b'schema = 1\n[profile]\nname = "caf\xe9"\n', "is not UTF-8 (byte 0xe9 at offset 32); save it as UTF-8", 3),
    (("a = " + "[" * 2000 + "]" * 2000 + "\n").encode(), "malformed TOML: arrays or tables nested too deeply", None),
    (("x = " + "{ y = " * 2000 + "1" + " }" * 2000 + "\n").encode(), "nested too deeply", None),
])
def test_unreadable_profiles_are_named_with_exit_2(tmp_path, data, needle, line):
    path = tmp_path / "p" / "profile.toml"
    path.parent.mkdir()
    path.write_bytes(data)
    for args in (("profiles", "show", str(path)), ("lock", "--check", "--lockfiles", str(tmp_path))):
        r = envbuild(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert needle in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert (f"{path}:{line}: " if line else f"{path}: ") in r.stderr


def test_utf8_byte_order_mark_is_accepted(profile):
    profile.write_bytes(b"\xef\xbb\xbf" + profile.read_bytes())
    r = envbuild("profiles", "show", str(profile))
    assert r.returncode == 0, r.stderr


def test_key_lines_finds_tables_keys_inline_tables_and_array_items():
    from envbuild.profile.toml_lines import key_lines

    text = ('a = 1  # [not.a.table]\ns = """\nb = 2\n"""\n[t.u]\nk = { x = "=[", y = [\n  1,\n  2 ] }\n'
            '[[arr]]\nn = "one"\n[[arr]]\n"quoted.key" = 3\nd.e = 4\n')
    lines = key_lines(text)
    assert lines[("a",)] == 1 and ("b",) not in lines and lines[("s",)] == 2
    assert lines[("t",)] == lines[("t", "u")] == 5
    assert lines[("t", "u", "k", "x")] == 6 and lines[("t", "u", "k", "y", 1)] == 8
    assert lines[("arr", 0, "n")] == 10 and lines[("arr", 1)] == 11 and lines[("arr", 1, "quoted.key")] == 12
    assert lines[("arr", 1, "d", "e")] == 13
