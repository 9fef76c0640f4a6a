"""Activation values the kernel or the scripts cannot hold are refused with one line when the profile is read (a
NUL in a value was dropped silently; a value over 128 KiB made every later command fail with E2BIG), and a prefix
with a byte that is not UTF-8 is refused before any script is written (it failed late in create)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clirun import assert_clean_error, run_cli
from envbuild.errors import EnvbuildError, InputFileError
from envbuild.install.activation import write_scripts
from envbuild.profile.loader import load_profile_file

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "lockfiles" / "slime-v0.3.1-cu129" / "profile.toml"
LINE = re.compile(r"^env = \{.*\}$", re.M)


def profile_with(tmp_path: Path, value_toml: str) -> Path:
    """The shipped profile with one more [recipe.activation] variable, X_VALUE = <value_toml> (a TOML string)."""
    text = SHIPPED.read_text()
    line = LINE.search(text[text.index("[recipe.activation]"):]).group(0)
    out = tmp_path / "slime-v0.3.1-cu129" / "profile.toml"
    out.parent.mkdir(exist_ok=True)
    out.write_text(text.replace(line, line[:-1] + f", X_VALUE = {value_toml} }}"))
    return out


def test_a_nul_in_an_activation_value_is_refused(tmp_path):
    res = run_cli(["profiles", "show", str(profile_with(tmp_path, '"before\\u0000after"'))])
    assert_clean_error(res, "profile.toml:", "X_VALUE", "NUL")
    assert len(res.err.strip().splitlines()) == 1


def test_an_activation_value_over_128_kib_is_refused(tmp_path):
    res = run_cli(["profiles", "show", str(profile_with(tmp_path, '"' + "v" * (128 * 1024) + '"'))])
    assert_clean_error(res, "profile.toml:", "X_VALUE", "Argument list too long")
    assert len(res.err.strip().splitlines()) == 1 and len(res.err) < 500


def test_a_value_just_under_the_limit_is_kept(tmp_path):
    load_profile_file(profile_with(tmp_path, '"' + "v" * (128 * 1024 - len("X_VALUE=") - 2) + '"'))


def test_a_prefix_with_a_byte_that_is_not_utf8_is_refused_before_writing(tmp_path):
    target = Path(os.fsdecode(os.fsencode(str(tmp_path)) + b"/env\xff"))
    with pytest.raises(EnvbuildError, match=r"byte 0xff at position \d+ is not UTF-8"):
        write_scripts(tmp_path / "staging", target, "fx", "12.9", {})
    assert not (tmp_path / "staging").exists()


@settings(max_examples=20, derandomize=True, deadline=None, database=None)
@given(value=st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40),
       pad=st.sampled_from([0, 1000, 131000, 140000]))
def test_generated_values_are_refused_or_activate_exactly(tmp_path_factory, value, pad):
    """Any value: refused with one line naming the variable (NUL, too long), or kept byte for byte by bash."""
    tmp = tmp_path_factory.mktemp("act")
    value = value + "p" * pad
    toml = '"' + "".join(f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08x}" for c in value) + '"'
    path = profile_with(tmp, toml)
    too_long = len(f"X_VALUE={value}".encode()) + 1 >= 128 * 1024
    if "\0" in value or too_long:
        with pytest.raises(InputFileError, match="X_VALUE"):
            load_profile_file(path)
        return
    env = load_profile_file(path).recipe.activation.env
    assert env["X_VALUE"] == value
    target = tmp / "env"
    scripts = write_scripts(target, target, "fx", "12.9", {"X_VALUE": value})
    out = subprocess.run(["bash", "-c", '. "$1" && printf %s "$X_VALUE"', "sh", str(scripts["activate"])],
                         capture_output=True, env={"PATH": os.environ["PATH"], "ENVBUILD_DRIVER_VERSION": ""})
    assert out.returncode == 0 and out.stdout.decode("utf-8") == value, out.stderr[-300:]
