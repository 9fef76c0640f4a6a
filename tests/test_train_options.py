"""`--set train.*` parsing: defaults by mode, and an error naming the key for every bad value."""
import pytest

from envbuild.train.options import OptionError, parse_options


def test_defaults_by_mode_and_foreign_keys_ignored():
    quick = parse_options({"offload.backend": "tms"}, "quick")
    full = parse_options({}, "full")
    assert (quick.steps, full.steps) == (3, 3)  # --full: 3 cycles; --soak N for more
    assert (full.layers, full.seq, full.mbs, full.tp, full.sp, full.ep) == (4, 4096, 1, None, None, None)


def test_values_are_parsed():
    o = parse_options({"train.layers": "8", "train.sp": "on", "train.tp": "2", "train.offload": "move",
                       "train.lr": "1e-3", "train.plain_steps": "0", "train.deadline": "200"}, "full")
    assert (o.layers, o.sp, o.tp, o.offload, o.lr, o.plain_steps, o.deadline) == (8, True, 2, "move", 1e-3, 0, 200)


@pytest.mark.parametrize("key, value, message", [
    ("train.layer", "4", "unknown option train.layer; known: train.layers"),
    ("train.layers", "four", "train.layers='four': expected a whole number"),
    ("train.layers", "0", "train.layers=0: must be at least 1"),
    ("train.sp", "maybe", "train.sp='maybe': expected 0 or 1"),
    ("train.offload", "disk", "train.offload='disk': expected one of auto, tms, move, none"),
    ("train.lr", "-1", "train.lr=-1: must be positive"),
])
def test_bad_values_name_the_key(key, value, message):
    with pytest.raises(OptionError) as exc:
        parse_options({key: value})
    assert message in str(exc.value)
