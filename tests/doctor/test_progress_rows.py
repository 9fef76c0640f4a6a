"""The doctor's live counter numbers the rows of the table it prints (issue 26: "[i/32]" over a table of 41):
per-GPU checks print a row per GPU, the checks a mode leaves out a skip row each. Through the CLI on the real
2xH200 bundle, output to a pipe (one plain line per row)."""
import json
import os
import re
import subprocess
import sys

from fakenode import H200X2

COUNTER = re.compile(r"^\[\s*(\d+)/(\d+)\] ", re.M)


def doctor(tmp_path, cache, *args):
    out = tmp_path / "r.json"
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    proc = subprocess.run([sys.executable, "-m", "envbuild", "doctor", "--root", str(H200X2), "--json", str(out),
                           *args], capture_output=True, text=True, timeout=180, env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode in (0, 1), proc.stderr
    rows = len(json.loads(out.read_text())["results"])
    return [(int(i), int(n)) for i, n in COUNTER.findall(proc.stderr)], rows


def test_the_counter_ends_at_the_tables_row_count_and_knows_it_from_the_start_next_time(tmp_path):
    cache = tmp_path / "cache"
    lines, rows = doctor(tmp_path, cache)  # every check of a static run, the GPU probes as mode skips
    assert rows > 40  # per-GPU rows (ecc, pcie_link, nvlink on 2 GPUs) and the probes' skip rows
    assert [i for i, _ in lines] == list(range(1, rows + 1))  # one line per row, numbered in order
    assert lines[-1] == (rows, rows)
    lines, rows_again = doctor(tmp_path, cache)  # the last run's rows per check: right from the first line
    assert rows_again == rows and {n for _, n in lines} == {rows}


def test_with_check_selection_the_counter_counts_only_the_selected_rows(tmp_path):
    lines, rows = doctor(tmp_path, tmp_path / "cache", "--check", "node.ecc", "--check", "node.ulimits")
    assert rows == 3 and lines[-1] == (3, 3)  # node.ecc on two GPUs, node.ulimits once
