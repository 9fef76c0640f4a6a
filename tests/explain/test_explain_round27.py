"""Issue 25, session 27: readings written from the first-sight misses of held-out slice 82 (in-sample there)."""
import pytest

from explain_helpers import fires


@pytest.mark.parametrize("line", [
    'killhost.sh: line 6:  1411 Killed                  "$@"',  # bash pads the PID and keeps the command's quotes
    "./train.sh: line 12: 48211 Killed                  python train.py",
    "Killed",
])
def test_the_shells_report_of_a_sigkilled_child_is_read(line):
    assert fires("node.shell_killed", line)


@pytest.mark.parametrize("line", [
    "run.sh: line 3: the job was Killed? no, it timed out",
])
def test_killed_in_a_sentence_is_not_the_shells_report(line):
    assert not fires("node.shell_killed", line)
