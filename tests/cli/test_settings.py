"""Bounded values of `envbuild doctor` resolved before any work (issue 23): a deadline, a GPU list, a message
size or a flag without its launcher out of range is one line, exit 2, naming the bound, and no report is written
(the run never started). Before, `--deadline 0` meant the default and `--deadline -5` blamed every healthy node."""
import pytest

from clirun import assert_clean_error

DOCTOR = ["doctor", "-q", "--check", "node.ulimits"]


@pytest.mark.parametrize("args, words", [
    (["--ray", "127.0.0.1:9", "--deadline", "0"], "must be greater than 0 seconds"),
    (["--ray", "127.0.0.1:9", "--deadline", "-5"], "must be greater than 0 seconds"),
    (["--ray", "127.0.0.1:9", "--deadline", "inf"], "must be a finite number of seconds"),
    (["--ray", "127.0.0.1:9", "--deadline", "nan"], "must be a finite number of seconds"),
    (["--ray", "127.0.0.1:9", "--deadline", "1e9"], "must be at most 604800 seconds"),
    (["--health-check", "--deadline", "0"], "must be greater than 0 seconds"),
    (["--health-check", "--deadline", "-5"], "must be greater than 0 seconds"),
    (["--health-check", "--deadline", "100"], "must be at most 50 seconds with --health-check"),
    (["--deadline", "30"], "--deadline goes with --ray or --health-check"),
    (["--drain"], "--drain goes with --health-check"),
    (["--audit"], "--audit goes with --ray"),
    (["--ray", "127.0.0.1:9", "--collective-mb", "0"], "must be greater than 0 and at most 16384"),
    (["--ray", "127.0.0.1:9", "--collective-mb", "nan"], "must be greater than 0 and at most 16384"),
    (["--gpus", "-1"], "GPU index -1 is out of range 0 to 1023"),
    (["--gpus", "1" * 30], "is out of range 0 to 1023"),
    (["--gpus", "0,0"], "GPU 0 is named twice"),
    (["--gpus", "0,x"], "'x' is not a GPU index"),
    (["--gpus", ","], "expected GPU indices like 0,1"),
    (["--soak", "0"], "--soak"),
    (["--soak", "1000000"], "--soak"),
])
def test_an_out_of_range_value_is_refused_before_any_work(cli, tmp_path, args, words):
    report = tmp_path / "r.json"
    res = cli([*DOCTOR, *args, "--json", str(report)])
    assert_clean_error(res, words)
    assert not report.exists()


def test_a_misspelt_check_names_the_closest_not_all_of_them(cli):
    res = cli(["doctor", "--check", "node.ulimit"])
    assert_clean_error(res, "no check matches 'node.ulimit'; did you mean node.ulimits?", "envbuild doctor --list")
    assert "node.wsl" not in res.err and "stack.torch" not in res.err


def test_an_old_check_id_still_selects_its_check(cli, tmp_path):
    res = cli(["doctor", "-q", "--check", "weight.sync", "--json", str(tmp_path / "r.json")])
    assert res.code in (0, 1), res.err
    assert "renamed to comm.weight_sync" in res.err
