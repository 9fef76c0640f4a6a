"""What the four GPU probe checks report, without a GPU: verdict logic on probe output, replays of the
fault runs recorded on the lent 2xH200 (docs/gpu-runs/weightsync-fault-*.json), and the CLI's skip."""
import json
from collections import Counter
from pathlib import Path

import pytest

from envbuild.doctor.checks.comm_weight_sync import compare_comm_env, compare_libnccl, parse_env_list, rank_views
from envbuild.doctor.nccl_log import NcclLog, parse_files, rank_log_env, rank_log_paths
from envbuild.errors import EnvbuildError

RUNS = Path(__file__).resolve().parents[2] / "docs" / "gpu-runs"
WHEEL = "/venv/site-packages/nvidia/nccl/lib/libnccl.so.2"
SYSTEM = "/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3"


def reported(cumem=None, libs=None, transports=None, preload=None):
    """A rank's result as checks/comm_weight_sync.py writes it, and its NCCL log as nccl_log parses it."""
    facts = {"comm_env": {"NCCL_CUMEM_ENABLE": cumem, "NCCL_P2P_DISABLE": None}, "ld_preload": preload,
             "libnccl_versions": libs if libs is not None else {WHEEL: "2.28.9"}}
    return {"status": "pass", "evidence": {"facts_after": facts}}, NcclLog(transports=Counter(transports or {}))


def views(*ranks, per_rank=None, base=None):
    """rank_views of (result, log) pairs; None for a rank that died before writing either."""
    roles = ["train"] + ["rollout"] * (len(ranks) - 1)
    results = [r[0] if r else None for r in ranks]
    logs = [r[1] if r else NcclLog() for r in ranks]
    return rank_views(results, per_rank or [{} for _ in ranks], base or {}, roles, logs)


def test_cumem_mismatch_is_c5_whether_or_not_nccl_said_anything():
    r = compare_comm_env(views(reported("0"), reported("1")))
    assert r.status.value == "fail" and r.causes == ["C5"] and r.subject == "nccl_env"
    assert "rank 0 (train)=0, rank 1 (rollout)=1" in r.summary
    both = compare_comm_env(views(reported("0", transports={"P2P/IPC": 8}), reported("1", transports={"P2P/CUMEM": 8})))
    assert "NCCL confirms" in both.summary and "rank 1 (rollout) connected via P2P/CUMEM" in both.summary


def test_transports_alone_reveal_a_mismatch_the_env_hides():
    r = compare_comm_env(views(reported(transports={"P2P/IPC": 4}), reported(transports={"P2P/CUMEM": 4})))
    assert r.status.value == "fail" and "different P2P transports" in r.summary


def test_agreeing_partial_and_single_rank_env():
    ok = compare_comm_env(views(reported("0", transports={"P2P/IPC": 8}), reported("0", transports={"P2P/IPC": 8})))
    assert ok.status.value == "pass" and "agrees on all 2 ranks (0)" in ok.summary
    partial = compare_comm_env(views(reported("0"), reported(None)))
    assert partial.status.value == "warn" and "some ranks only" in partial.summary
    assert compare_comm_env(views(reported("0"))).status.value == "skip"


def test_a_rank_that_died_before_reporting_is_judged_by_its_launch_env():
    v = views(reported("0"), None, per_rank=[{}, {"NCCL_CUMEM_ENABLE": "1"}])
    assert v[1]["source"].startswith("launch environment")
    assert compare_comm_env(v).status.value == "fail"
    died = views(reported(), None, per_rank=[{}, {"LD_PRELOAD": SYSTEM}])
    r = compare_libnccl(died)
    assert r.status.value == "fail" and "died before reporting" in r.summary


NCCL_LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "nccl"


def test_weight_sync_reads_each_ranks_nccl_log_with_the_one_parser(tmp_path):
    """The file names rank_log_env gives NCCL (one per pid) are the ones rank_log_paths finds; fed the logs
    the 2xH200 recorded under NCCL_CUMEM_ENABLE=0 and =1, the transports alone show the C5 mismatch."""
    for rank, (pid, recorded) in enumerate([(4242, "h200x2-cumem0"), (77, "h200x2-cumem1")]):
        path = rank_log_env(str(tmp_path), rank)["NCCL_DEBUG_FILE"].replace("%p", str(pid))
        Path(path).write_text((NCCL_LOGS / f"{recorded}.rank0.log").read_text())
    (tmp_path / "rank1.json").write_text("{}")  # not a log
    logs = [parse_files(rank_log_paths(str(tmp_path), k)) for k in range(2)]
    assert [len(rank_log_paths(str(tmp_path), k)) for k in range(3)] == [1, 1, 0]
    v = rank_views([reported()[0], reported()[0]], [{}, {}], {}, ["train", "rollout"], logs)
    assert set(v[0]["transports"]) == {"P2P/IPC"} and set(v[1]["transports"]) == {"P2P/CUMEM"}
    r = compare_comm_env(v)
    assert r.status.value == "fail" and r.causes == ["C5"] and "different P2P transports" in r.summary


def test_libnccl_two_copies_or_different_builds_is_c3():
    two = compare_libnccl(views(reported(), reported(libs={WHEEL: "2.28.9", SYSTEM: "2.28.3"})))
    assert two.status.value == "fail" and two.causes == ["C3"]
    assert "maps 2 libnccl copies" in two.summary and "ranks run different NCCL builds" in two.summary
    other = compare_libnccl(views(reported(), reported(libs={SYSTEM: "2.28.3"})))
    assert other.status.value == "fail" and "2.28.3" in other.summary
    same = compare_libnccl(views(reported(), reported()))
    assert same.status.value == "pass" and "(2.28.9)" in same.summary


def test_env_option_parsing():
    assert parse_env_list("NCCL_CUMEM_ENABLE=1, LD_PRELOAD=/x/libnccl.so.2") == {
        "NCCL_CUMEM_ENABLE": "1", "LD_PRELOAD": "/x/libnccl.so.2"}
    assert parse_env_list("") == {}
    with pytest.raises(EnvbuildError, match="expected NAME=VALUE"):
        parse_env_list("NCCL_CUMEM_ENABLE")


def _result(path, subject):
    data = json.loads((RUNS / path).read_text())
    return next(r for r in data["results"] if r.get("subject") == subject)


def test_replay_of_the_recorded_c5_fault_run():
    """The per-rank views the GPU run recorded, judged again: still C5, and NCCL's own failure beside it."""
    rec = _result("weightsync-fault-c5-cumem-mismatch.json", "nccl_env")
    again = compare_comm_env(rec["evidence"]["ranks"])
    assert again.status.value == "fail" and again.causes == ["C5"] and again.summary == rec["summary"]
    crash = _result("weightsync-fault-c5-cumem-mismatch.json", "transfer")
    assert "invalid argument" in crash["summary"] and crash["causes"][0] == "C5"


def test_replay_of_the_recorded_c3_fault_run():
    rec = _result("weightsync-fault-c3-second-libnccl.json", "libnccl")
    again = compare_libnccl([dict(v, comm_env={}) for v in rec["evidence"]["ranks"]])
    assert again.status.value == "fail" and again.summary == rec["summary"]
    assert "2.28.3" in again.summary and "2.28.9" in again.summary
    crash = _result("weightsync-fault-c3-second-libnccl.json", "transfer")
    assert "Mismatched NCCL version" in json.dumps(crash)




def test_the_recorded_c5_runs_transfer_failure_folds_under_the_finding_that_explains_it():
    """The recorded 2xH200 C5 run: the nccl_env row (judged again, it now names what it explains) is the root and
    the transfer's NCCL error ('invalid argument' at init) its consequence (envbuild/doctor/fold.py)."""
    from envbuild.doctor.fold import fold_consequences, root_causes
    from envbuild.report.json_report import report_from_dict

    data = json.loads((RUNS / "weightsync-fault-c5-cumem-mismatch.json").read_text())
    recorded = {r.subject: r for r in report_from_dict(data).results if r.check_id == "weight.sync"}
    root = compare_comm_env(recorded["nccl_env"].evidence["ranks"])
    root.check_id, root.category = "comm.weight_sync", "comm"
    transfer = recorded["transfer"]
    fold_consequences([root, transfer])
    assert root_causes([root]) == [("comm.weight_sync", ["C5"], ["weight.sync [transfer]"])]
    assert transfer.summary.startswith("consequence of comm.weight_sync (C5): ") and transfer.causes == ["C5"]


def test_the_root_cause_line_names_a_root_with_a_subject_and_its_own_fix():
    """The terminal's `root cause:` line for a root that has a subject (comm.weight_sync [nccl_env]) beside a later
    result of the same check that passed: the line names the root's subject and gives the root's own fix (a review
    found it looked the root up by check id alone and printed the passing row's missing fix)."""
    from envbuild.doctor.fold import fold_consequences
    from envbuild.report.json_report import report_from_dict
    from envbuild.report.model import Result, Status
    from envbuild.report.terminal import root_cause_lines

    data = json.loads((RUNS / "weightsync-fault-c5-cumem-mismatch.json").read_text())
    recorded = {r.subject: r for r in report_from_dict(data).results if r.check_id == "weight.sync"}
    root = compare_comm_env(recorded["nccl_env"].evidence["ranks"])
    root.check_id, root.category, root.subject = "comm.weight_sync", "comm", "nccl_env"
    later = Result("comm.weight_sync", "comm", Status.PASS, "timing ok", subject="timing")
    results = fold_consequences([root, recorded["transfer"], later])
    lines = root_cause_lines(results)
    assert len(lines) == 1 and lines[0].startswith("root cause: comm.weight_sync [nccl_env] (C5); 1 other result(s)")
    assert root.remediation and lines[0].endswith(f"fix it first: {root.remediation}"), lines
