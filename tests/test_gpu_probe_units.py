"""Pure logic of the gpu.p2p / cumem.ipc / offload.cycle / weight.sync probes, without torch or a GPU.

Payload helpers (checks/_rankfacts.py, checks/_ipc.py) are imported from the payload folder the way the
payloads import them; the NVML snapshot is the one captured on the lent 2xH200 machine
(tests/fixtures/bundles/h200x2, docs/gpu-runs/README.md).
"""
import json
import sys
from pathlib import Path

import pytest

from envbuild.doctor.linerate import pair_line_rate
from envbuild.doctor.thresholds import P2P_BIDIR_BAND, P2P_UNI_BAND, band_verdict
from envbuild.paths import payload_dir

sys.path.insert(0, str(payload_dir()))
import _rankfacts  # noqa: E402  (payload helper, stdlib only)

H200X2 = Path(__file__).resolve().parent / "fixtures" / "bundles" / "h200x2" / ".envbuild" / "nvml.json"


def h200x2():
    return json.loads(H200X2.read_text())["data"]


def pcie_box():
    """Two GPUs with no NVLink and P2P over PCIe: gen4 x16 (31.5 GB/s) and gen5 x4 (15.75 GB/s)."""
    return {"devices": [
        {"index": 0, "pci_bus_id": "00000000:17:00.0", "nvlink": [],
         "pcie": {"gen_max": 4, "width_max": 16, "gen_current": 1, "width_current": 16}},
        {"index": 1, "pci_bus_id": "00000000:65:00.0", "nvlink": [],
         "pcie": {"gen_max": 5, "width_max": 4, "gen_current": 5, "width_current": 4}}],
        "p2p": {"0-1": {"read": "ok", "write": "ok", "nvlink": "not_supported"}}}


def direct_links(n_active, version=6, total=18):
    bus = ["00000000:0A:00.0", "00000000:0B:00.0"]
    devs = []
    for i in range(2):
        links = [{"link": k, "active": k < n_active, "version": version, "remote_pci": bus[1 - i]}
                 for k in range(total)]
        devs.append({"index": i, "pci_bus_id": bus[i], "nvlink": links, "pcie": {"gen_max": 5, "width_max": 16}})
    return {"devices": devs, "p2p": {"0-1": {"nvlink": "ok"}, "1-0": {"nvlink": "ok"}}}


def test_line_rate_of_the_recorded_h200_pair_is_18_nvlink4_links():
    rate = pair_line_rate(h200x2(), 0, 1)
    assert rate.link == "nvlink"
    assert rate.gbps == pytest.approx(18 * 26.5625, abs=0.01)  # 478 GB/s, research/gpu-machine.md
    assert "18 links" in rate.detail and "NVLink 4.0" in rate.detail


def test_line_rate_counts_only_active_direct_links_and_scales_with_version():
    assert pair_line_rate(direct_links(12), 0, 1).gbps == pytest.approx(12 * 26.5625, abs=0.01)
    assert pair_line_rate(direct_links(18, version=7), 0, 1).gbps == pytest.approx(900.0)
    unknown = pair_line_rate(direct_links(18, version=8), 0, 1)
    assert unknown.gbps is None and "no known rate" in unknown.detail


def test_line_rate_falls_back_to_the_slower_pcie_link_at_max_generation():
    rate = pair_line_rate(pcie_box(), 0, 1)
    assert rate.link == "pcie"
    assert rate.gbps == pytest.approx(3.938 * 4, abs=0.01)
    assert "now gen1" in rate.detail  # the idle link speed is shown, not used


def test_band_verdicts_follow_the_documented_fractions():
    assert band_verdict(0.82, P2P_UNI_BAND) == "pass"  # 391/478 measured on the lent pair
    assert band_verdict(0.60, P2P_UNI_BAND) == "warn"
    assert band_verdict(0.40, P2P_UNI_BAND) == "fail"
    assert band_verdict(0.79, P2P_BIDIR_BAND) == "pass"
    assert band_verdict(0.25, P2P_BIDIR_BAND) == "fail"


def p2p_evidence(uni=(391.0, 391.0), bidir=756.0, bad=0, can_access=True, peer="already enabled"):
    return {"devices": [{"cuda_index": 0, "pci_bus_id": "00000000:00:06.0"},
                        {"cuda_index": 1, "pci_bus_id": "00000000:00:07.0"}],
            "pairs": [{"src": 0, "dst": 1, "can_access": can_access, "peer_access": peer, "verify_bytes": 256 << 20,
                       "mismatched_words": bad, "uni_gbps": uni[0]},
                      {"src": 1, "dst": 0, "can_access": True, "peer_access": "enabled", "verify_bytes": 256 << 20,
                       "mismatched_words": 0, "uni_gbps": uni[1]}],
            "bidirectional": [{"a": 0, "b": 1, "bidir_gbps": bidir}]}


def test_p2p_verdicts_against_the_recorded_topology():
    from envbuild.doctor.checks.gpu_p2p import evaluate

    ok = evaluate(p2p_evidence(), h200x2(), [0, 1])
    assert [r.status.value for r in ok] == ["pass"] and ok[0].subject == "gpu0<->gpu1"
    assert "478 GB/s" in ok[0].summary
    fracs = {m.name: m.value for m in ok[0].metrics}
    assert fracs["gpu0->gpu1.uni_fraction"] == pytest.approx(391 / 478.125, abs=0.001)

    slow = evaluate(p2p_evidence(uni=(200.0, 391.0)), h200x2(), [0, 1])[0]
    assert slow.status.value == "fail" and "0.42 of the 478 GB/s" in slow.summary and "N3" in slow.causes
    assert evaluate(p2p_evidence(uni=(300.0, 391.0)), h200x2(), [0, 1])[0].status.value == "warn"
    corrupt = evaluate(p2p_evidence(bad=17), h200x2(), [0, 1])[0]
    assert corrupt.status.value == "fail" and "17 words corrupted" in corrupt.summary
    blocked = evaluate(p2p_evidence(can_access=False), h200x2(), [0, 1])[0]
    assert blocked.status.value == "fail" and "NVML reports P2P ok" in blocked.summary
    refused = evaluate(p2p_evidence(peer="failed: 217 CUDA_ERROR_PEER_ACCESS_UNSUPPORTED"), h200x2(), [0, 1])[0]
    assert refused.status.value == "fail"


MAPS = """\
7f00-7f10 r-xp 00000000 08:01 1 /opt/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2
7f10-7f20 r--p 00100000 08:01 1 /opt/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2
7f20-7f30 r-xp 00000000 08:01 2 /usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3
7f30-7f40 r-xp 00000000 08:01 3 /usr/lib/x86_64-linux-gnu/libnccl-net.so
7f40-7f50 r-xp 00000000 08:01 4 /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04
7f50-7f60 r-xp 00000000 08:01 5 /opt/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcudart.so.13 (deleted)
7f60-7f70 rw-p 00000000 00:00 0 [heap]
"""


def test_mapped_libs_lists_each_copy_once_and_skips_plugins():
    libs = _rankfacts.mapped_libs(MAPS)
    assert libs["libnccl"] == ["/opt/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2",
                               "/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3"]
    assert libs["libcuda"] == ["/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04"]
    assert libs["libcudart"][0].endswith("libcudart.so.13 (deleted)")
    assert _rankfacts.format_nccl_version(22809) == "2.28.9"
    assert _rankfacts.format_nccl_version(2708) == "2.7.8"


@pytest.mark.parametrize("payload", ["p2p.py", "cumem_ipc.py", "weight_sync.py", "offload_cycle.py"])
def test_a_mode_typo_is_a_one_line_usage_error(payload, tmp_path):
    """argparse's message and exit 2 (what the launcher shows as the rank's crash), before torch is
    imported and without a traceback; a bad --mode used to end in KeyError: 'quik'."""
    import os
    import subprocess

    proc = subprocess.run([sys.executable, str(payload_dir() / payload), "--mode", "quik"], capture_output=True,
                          text=True, timeout=60, env=dict(os.environ, ENVBUILD_RUN_DIR=str(tmp_path)))
    assert proc.returncode == 2, proc.stderr
    assert "argument --mode: invalid choice: 'quik' (choose from 'quick', 'full')" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_privileges_and_alloc_conf_parsing():
    status = "Name:\tpython3\nUid:\t1000\t1000\t1000\t1000\nSeccomp:\t2\nCapEff:\t0000000000080000\n"
    priv = _rankfacts.process_privileges(status, "1\n")
    assert priv == {"uid": 1000, "seccomp": "filter", "cap_sys_ptrace": True, "ptrace_scope": 1}
    assert _rankfacts.process_privileges("CapEff:\t0\n", None)["ptrace_scope"] is None
    assert _rankfacts.expandable_segments_on("max_split_size_mb:64,expandable_segments:True")
    assert not _rankfacts.expandable_segments_on("expandable_segments:False")
    assert not _rankfacts.expandable_segments_on(None)


def test_replay_of_the_recorded_two_gpu_p2p_run():
    """The pair the lent 2xH200 measured (docs/gpu-runs/gpuprobes-h6-2gpu-quick.json), judged again."""
    from envbuild.doctor.checks.gpu_p2p import evaluate

    runs = Path(__file__).resolve().parents[1] / "docs" / "gpu-runs"
    rec = next(r for r in json.loads((runs / "gpuprobes-h6-2gpu-quick.json").read_text())["results"]
               if r["check_id"] == "gpu.p2p")
    probe = {"pairs": rec["evidence"]["directions"], "bidirectional": [rec["evidence"]["bidirectional"]]}
    again = evaluate(probe, h200x2(), [0, 1])
    assert len(again) == 1 and again[0].status.value == rec["status"] == "pass"
    assert {m.name: m.value for m in again[0].metrics} == {m["name"]: m["value"] for m in rec["metrics"]}
    slower = json.loads(json.dumps(probe))
    for q in slower["pairs"]:
        q["uni_gbps"] = q["uni_gbps"] / 2  # half the links gone: 0.41 of the line rate
    assert evaluate(slower, h200x2(), [0, 1])[0].status.value == "fail"
