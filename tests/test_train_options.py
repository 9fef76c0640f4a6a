"""`--set train.*` as the doctor's settings resolve them: the registry's typed, bounded values (the one parser)
gathered into TrainOptions, with the defaults by mode; every bad value is exit 2 naming the key and the bound."""
import pytest

from envbuild.doctor.registry import OptionError, validate_options
from envbuild.train.options import train_options


def test_defaults_by_mode_and_foreign_keys_ignored():
    quick = train_options(validate_options({"offload.backend": "tms"}), "quick")
    full = train_options({}, "full")
    assert (quick.steps, full.steps) == (3, 3)  # --full: 3 cycles; --soak N for more
    assert (full.layers, full.seq, full.mbs, full.tp, full.sp, full.ep) == (4, 4096, 1, None, None, None)


def test_values_arrive_typed_from_the_registry():
    o = train_options(validate_options({"train.layers": "8", "train.sp": "on", "train.tp": "2",
                                        "train.offload": "move", "train.lr": "1e-3", "train.plain_steps": "0",
                                        "train.deadline": "200"}), "full")
    assert (o.layers, o.sp, o.tp, o.offload, o.lr, o.plain_steps, o.deadline) == (8, True, 2, "move", 1e-3, 0, 200)


@pytest.mark.parametrize("key, value, message", [
    ("train.layer", "4", "--set train.layer: no check takes this option; did you mean train.layers?"),
    ("train.layers", "four", "--set train.layers='four': expected int"),
    ("train.layers", "0", "--set train.layers=0: must be at least 1"),
    ("train.layers", "-1", "--set train.layers=-1: must be at least 1"),
    ("train.steps", "0", "--set train.steps=0: must be at least 1"),
    ("train.layers", "1" * 30, "must be at most 1024"),
    ("train.sp", "maybe", "--set train.sp='maybe': expected bool"),
    ("train.offload", "disk", "--set train.offload='disk': expected auto|tms|move|none"),
    ("train.lr", "-1", "--set train.lr=-1: must be greater than 0"),
    ("train.lr", "0", "--set train.lr=0: must be greater than 0"),
    ("train.lr", "nan", "--set train.lr=nan: must be a finite number"),
    ("train.deadline", "0", "--set train.deadline=0: must be at least 1"),
])
def test_bad_values_name_the_key_and_the_bound(key, value, message):
    with pytest.raises(OptionError) as exc:
        validate_options({key: value})
    assert message in str(exc.value)
