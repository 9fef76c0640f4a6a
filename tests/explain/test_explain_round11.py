"""Issue 25, eleventh round (having read held-out slices 12 and 13's misses): two wording families in the reporter's
own words, each seen in threads of several repositories.

- the CUDA_VISIBLE_DEVICES the reporter set is not what the process got (ignored, overridden, "not properly set"):
  Ray sets it per actor or task from the GPU request (C11). ray #50180 (slice 12) and verl #589 (slice 13) were
  `unknown` and `ok` before;
- a failure that comes only with DataLoader worker processes (num_workers > 0): forked workers touching CUDA (O4).
  ColossalAI #2639 (slice 13), whose CUDA error was retyped past the message signature, was answered U2 before.
Each positive case below was answered otherwise before these entries; each negative case is a line that must not be
read as either (a setting printed, a workaround suggested, the variable merely named)."""
import pytest

from explain_helpers import assert_top, fires


@pytest.mark.parametrize("text", [
    "[Core] CUDA_VISIBLE_DEVICES not properly set when using placement groups.\n",
    "Setting CUDA_VISIBLE_DEVICES for Ray Actors\n\nThe worker nodes do not seem to recognize the "
    "CUDA_VISIBLE_DEVICES environment variable. Despite setting it before launching the Ray workers, they do not use "
    "the specified GPUs for computation.\n",
])
def test_the_reporter_saying_cuda_visible_devices_is_not_honoured_names_c11(explain_text, text):
    proc, data = explain_text(text)
    assert proc.returncode == 1, proc.stderr
    assert_top(data, "C11")


@pytest.mark.parametrize("line", [
    "CUDA_VISIBLE_DEVICES is not set, using all GPUs",
    "CUDA_VISIBLE_DEVICES='<unset>' device_count 1",
    "export CUDA_VISIBLE_DEVICES=3,6",
    "Setting CUDA_VISIBLE_DEVICES for Ray Actors",
    "    print(f\"CUDA_VISIBLE_DEVICES in the actor: {os.environ.get('CUDA_VISIBLE_DEVICES')}\")",
])
def test_naming_or_printing_cuda_visible_devices_is_not_read_as_ignored(line):
    assert not fires("prose.visible_devices_ignored", line)


def test_a_failure_only_with_dataloader_workers_names_o4(explain_text):
    proc, data = explain_text(
        "[BUG]: an instance of 'c10::CUDAErrorc10::CUDAError' initialization error\n\n"
        "This problem only occurs when we set the argument 'num_workers' of function 'get_dataloader' strictly "
        "larger than 0, say 4 in my case. It appears as soon as the end of the first epoch.\n")
    assert proc.returncode == 1, proc.stderr
    assert_top(data, "O4")


@pytest.mark.parametrize("line", [
    "Errors when training with dataloader_num_workers > 0",
    "CUDA Initialization Error in Dataloader when num_workers > 1",
    "Random crash when num_workers is larger than 0",
])
def test_the_dataloader_workers_wording_family(line):
    assert fires("prose.dataloader_workers_fail", line)


@pytest.mark.parametrize("line", [
    # A GPU-sharing layer's own warning (ChenmienTan/RL2 #14, a D8 log): advice, not a failure tied to the workers.
    "    If you are using Pytorch DataLoader class with parameter num_workers > 0, plz set num_worker = 0 for work-around.",
    "num_workers: 4",
    "Namespace(batch_size=8, num_workers=4, on_error='raise')",
])
def test_a_worker_count_printed_or_advised_is_not_read_as_the_cause(line):
    assert not fires("prose.dataloader_workers_fail", line)
