"""Line rates from the NVML snapshot of the real 2xH200 bundle, bandwidth bands, and NCCL log parsing."""
import json
from pathlib import Path

import pytest

from envbuild.doctor import nccl_log
from envbuild.doctor.linerate import line_rate, nvlink_rates_from_smi
from envbuild.doctor.thresholds import collective_band

BUNDLE = Path(__file__).resolve().parents[1] / "fixtures" / "bundles" / "h200x2"
SMI = """GPU 0: NVIDIA H200 (UUID: GPU-aaaa)
\t Link 0: 26.562 GB/s
\t Link 1: 26.562 GB/s
GPU 1: NVIDIA H200 (UUID: GPU-bbbb)
\t Link 0: 26.562 GB/s
\t Link 1: <inactive>
"""


@pytest.fixture
def h200():
    return json.loads((BUNDLE / ".envbuild" / "nvml.json").read_text())["data"]


def test_h200_pair_line_rate_from_nvml_links(h200):
    lr = line_rate(h200, [0, 1])
    # 18 active links each (NVML version enum 6 = NVLink 4.0, 26.5625 GB/s per direction as measured on
    # the lent H200s: 478 GB/s, measured on the lent 2xH200, 2026-11-29)
    assert (lr.link, lr.links, lr.per_link_gbps, lr.gbps) == ("nvlink", 18, 26.5625, 478.125)
    assert "18 links" in lr.describe() and "478 GB/s" in lr.describe()


def test_smi_rates_take_precedence(h200):
    assert nvlink_rates_from_smi(SMI) == {0: [26.562, 26.562], 1: [26.562]}
    lr = line_rate(h200, [0, 1], SMI)
    assert lr.gbps == pytest.approx(18 * 26.562) and "(nvidia-smi nvlink -s)" in lr.detail


def test_inactive_links_fall_back_to_pcie(h200):
    for dev in h200["devices"]:
        for link in dev["nvlink"]:
            link["active"] = False
    lr = line_rate(h200, [0, 1])
    assert lr.link == "pcie" and lr.gbps == pytest.approx(3.938 * 16) and "gen5 x16" in lr.describe()


def test_a_set_is_bounded_by_its_slowest_pair():
    """GPUs 0 and 1 joined by 12 direct NVLink 4 links, GPU 2 only on PCIe gen4 x16: collectives over
    {0, 1} run at the NVLink rate, over {0, 1, 2} at GPU 2's PCIe rate."""
    bus = ["00000000:0A:00.0", "00000000:0B:00.0", "00000000:0C:00.0"]
    devs = [{"index": i, "pci_bus_id": bus[i], "pcie": {"gen_max": 4, "width_max": 16},
             "nvlink": [{"link": k, "active": True, "version": 6, "remote_pci": bus[1 - i]} for k in range(12)]
             if i < 2 else []} for i in range(3)]
    snap = {"devices": devs, "p2p": {}}
    assert line_rate(snap, [0, 1]).gbps == pytest.approx(12 * 26.5625)
    lr = line_rate(snap, [0, 1, 2])
    assert lr.link == "pcie" and lr.gbps == pytest.approx(1.969 * 16)
    assert "slowest of 3 pairs" in lr.describe()


def test_one_gpu_or_unknown_has_no_line_rate(h200):
    assert line_rate(h200, [0]) is None
    assert line_rate({"devices": [{"index": 0}, {"index": 1}]}, [0, 1]) is None


def test_bands_judge_only_sizes_where_bandwidth_has_ramped():
    assert collective_band("all_reduce", 16 << 20, "nvlink") is None
    big = collective_band("all_reduce", 1 << 30, "nvlink")
    # the lent H200's own anchor (326 GB/s of 478 at 1 GiB = 0.68) passes with margin
    assert 326 / 478 > big.warn_below > big.fail_below
    assert collective_band("all_gather", 256 << 20, "nvlink").warn_below < big.warn_below


LOG = """\
host:11:11 [0] NCCL INFO NCCL version 2.28.9+cuda13.0
host:11:11 [0] NCCL INFO cudaDriverVersion 13000
host:11:11 [0] NCCL INFO NCCL_CUMEM_ENABLE set by environment to 1.
host:11:20 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
host:11:20 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read
host:11:20 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read
host:12:21 [1] NCCL INFO Channel 07/0 : 3[1] -> 1[1] [send] via NET/IB/2/GDRDMA
host:12:21 [1] NCCL INFO Channel 02/0 : 1[1] -> 0[0] via P2P/IPC
host:12:21 [1] NCCL INFO Channel 03/0 : 1[1] -> 0[0] via SHM/direct/direct
host:12:21 [1] NCCL WARN Cuda failure 999 'unknown error' include/alloc.h:112
"""


def test_nccl_log_digest():
    log = nccl_log.parse_text(LOG)
    assert log.version == "2.28.9+cuda13.0" and log.cuda_driver_version == 13000
    assert dict(log.transports) == {"P2P/CUMEM": 2, "NET": 1, "P2P/IPC": 1, "SHM": 1}  # repeat counted once
    assert log.env_overrides == {"NCCL_CUMEM_ENABLE": "1"}
    assert nccl_log.fallback_kinds(log) == ["NET", "SHM"]
    from envbuild.doctor.checks.comm_nccl_collectives import warn_causes

    assert warn_causes(log.warnings) == ["M1"]


def test_parse_files_merges_ranks_and_skips_missing(tmp_path):
    (tmp_path / "a.log").write_text(LOG.splitlines()[0] + "\n")
    (tmp_path / "b.log").write_text(LOG.splitlines()[0].replace("2.28.9", "2.27.3") + "\n")
    log = nccl_log.parse_files([tmp_path / "a.log", tmp_path / "b.log", tmp_path / "missing.log"])
    assert log.versions == ["2.28.9+cuda13.0", "2.27.3+cuda13.0"]


# --- replays of the recorded 2xH200 run (docs/gpu-runs/h5-*.json, NCCL_DEBUG logs in tests/fixtures/nccl) ---
REPO = Path(__file__).resolve().parents[2]
NCCL_LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "nccl"


def recorded_outcome(json_name, subject):
    """A LaunchOutcome whose ranks carry the rows that the GPU run measured (what the payload emitted)."""
    from envbuild.doctor.launcher import LaunchOutcome, RankOutcome

    report = json.loads((REPO / "docs" / "gpu-runs" / json_name).read_text())
    res = next(r for r in report["results"] if r["check_id"] == "comm.nccl_collectives" and r["subject"] == subject)
    rows = [{k: v for k, v in row.items() if k != "fraction_of_line_rate"} for row in res["evidence"]["rows"]]
    data = {"status": "pass", "summary": "exact", "evidence": {"rows": rows, "measure_s": 1.0},
            "metrics": [{"name": m["name"], "value": m["value"], "unit": m["unit"]} for m in res["metrics"]]}
    ranks = [RankOutcome(k, 0, data, "broadcast 256MiB", "", "", "") for k in range(2)]
    return LaunchOutcome(ranks=ranks, timed_out=False, hung_ranks=[], crashed_ranks=[], wall_s=8.0)


def test_recorded_nccl_logs_name_the_transport_each_setting_used():
    cumem1 = nccl_log.parse_files([NCCL_LOGS / "h200x2-cumem1.rank0.log"])
    cumem0 = nccl_log.parse_files([NCCL_LOGS / "h200x2-cumem0.rank0.log"])
    shm = nccl_log.parse_files([NCCL_LOGS / "h200x2-p2p-disable.rank0.log"])
    assert set(cumem1.transports) == {"P2P/CUMEM"} and set(cumem0.transports) == {"P2P/IPC"}
    assert set(shm.transports) == {"SHM"} and shm.env_overrides["NCCL_P2P_DISABLE"] == "1"
    assert cumem1.version == "2.28.9+cuda13.0" and cumem1.cuda_driver_version == 13000


def test_replayed_healthy_run_passes_and_p2p_disabled_run_fails_with_c4(h200):
    from envbuild.doctor.checks.comm_nccl_collectives import judge_collectives
    from envbuild.report.model import Status

    lr = line_rate(h200, [0, 1])
    good = judge_collectives(recorded_outcome("h5-probes-2gpu-full.json", "NCCL_CUMEM_ENABLE=1"),
                             nccl_log.parse_files([NCCL_LOGS / "h200x2-cumem1.rank0.log"]), lr, cumem="1", gpus=[0, 1])
    assert good.status is Status.PASS, good.summary
    assert "via P2P/CUMEM" in good.summary and all(m.source for m in good.metrics if m.expect)
    bad = judge_collectives(recorded_outcome("h5-fault-p2p-disable.json", "NCCL_CUMEM_ENABLE=0"),
                            nccl_log.parse_files([NCCL_LOGS / "h200x2-p2p-disable.rank0.log"]), lr, cumem="0",
                            gpus=[0, 1])
    assert bad.status is Status.FAIL and bad.causes[:2] == ["C4", "N3"]
    assert "via SHM because the environment sets NCCL_P2P_DISABLE=1" in bad.summary
    assert "busbw below the fail band" in bad.summary
