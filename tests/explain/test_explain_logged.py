"""An exception the program logged (an error-level record with the traceback directly under it) and then went on from,
logging on at INFO in the same format to its last line, is one the run got past (envbuild/explain/logged.py); a
traceback that ends the program, or one no record announced, is not."""
import pytest

_ERROR = ("2026-12-07 08:21:14,423 ERROR warmup: rmsnorm hidden=5120 BLOCK=5120: compilation failed\n"
          "Traceback (most recent call last):\n"
          '  File "/srv/app/kernels.py", line 63, in build\n'
          "    raise ValueError(\"arange's range must be a power of 2\")\n"
          "ValueError: arange's range must be a power of 2\n")
_CHAINED = ("\nThe above exception was the direct cause of the following exception:\n\n"
            "Traceback (most recent call last):\n"
            '  File "/srv/app/server.py", line 20, in <module>\n'
            "    build(5120)\n"
            '  File "/srv/app/kernels.py", line 70, in build\n'
            "    raise RuntimeError(\"kernel build failed\") from e\n"
            "RuntimeError: kernel build failed\n")
_START = "2026-12-07 08:21:12,163 INFO warmup: triton 3.6.0 available\n"
_ON = ("2026-12-07 08:21:14,561 INFO warmup: rmsnorm hidden=5120 BLOCK=8192: compiled in 0.14 s\n"
       "2026-12-07 08:21:14,576 INFO warmup: rmsnorm hidden=8192 BLOCK=8192: compiled in 0.01 s\n")


def _went_on(data) -> bool:
    return any(r["completion_signature"] == "log.went_on" for r in data["recovered"]["shown"])


_SERVED = "".join(f"2026-12-07 08:21:15,{i:03d} INFO warmup: served request {i}\n" for i in range(14))


@pytest.mark.parametrize("text", [
    _START + _ERROR + _ON,
    _START + _ERROR + _CHAINED + _ON,
    _START + _ERROR + _SERVED + "2026-12-07 08:21:16,000 INFO warmup: shutdown complete\n",
    _START + _ERROR + _SERVED + "2026-12-07 08:21:16,000 INFO warmup: evaluator exited with 0; best kept\n",
], ids=["one-traceback", "chained-tracebacks", "stops-after-serving", "exits-0-after-serving"])
def test_a_logged_exception_the_program_went_on_from_names_no_cause(explain_text, text):
    proc, data = explain_text(text)
    assert proc.returncode == 0
    assert data["verdict"] == "ok" and _went_on(data), data["causes"][:2]


@pytest.mark.parametrize("text", [
    _START + _ERROR,  # the traceback is the log's end
    _START + _ERROR + "2026-12-07 08:21:14,600 INFO warmup: shutting down after the failed build\n",  # says it ends
    _START + _ERROR + _SERVED + "2026-12-07 08:21:16,000 INFO warmup: worker exited with code 1\n",  # says it failed
    _START + _ERROR + _ON.splitlines()[0] + "\n" + _ERROR.split("\n", 1)[1] + _ON,  # then a traceback no record announced
    _START + _ERROR + "[08:21:14] INFO warmup: rmsnorm hidden=8192 BLOCK=8192: compiled in 0.01 s\n",  # another logger's format
    _START + _ERROR.replace(" ERROR ", " DEBUG ") + _ON,  # not logged at an error level
    _START + _ERROR + _ON + "2026-12-07 08:21:15,001 INFO warmup: serving\nRuntimeError: CUDA error: an illegal memory access\n"
    "2026-12-07 08:21:15,002 INFO warmup: serving\n",  # something louder after it
], ids=["ends-with-it", "logs-its-end", "exits-1", "then-a-crash", "other-format", "debug-record", "louder-after"])
def test_a_traceback_the_program_did_not_go_on_from_stays_open(explain_text, text):
    proc, data = explain_text(text)
    assert proc.returncode == 1
    assert data["verdict"] != "ok" and not _went_on(data), data["recovered"]
