"""Line rate from the NVML snapshot (envbuild/doctor/linerate.py) and the bandwidth bands (thresholds.py), on
the snapshot captured on the lent 2xH200 machine (tests/fixtures/bundles/h200x2)."""
import json
from pathlib import Path

import pytest

from envbuild.doctor.linerate import pair_line_rate
from envbuild.doctor.thresholds import P2P_BIDIR_BAND, P2P_UNI_BAND, band_verdict

H200X2 = Path(__file__).resolve().parents[1] / "fixtures" / "bundles" / "h200x2" / ".envbuild" / "nvml.json"


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
    assert rate.gbps == pytest.approx(18 * 26.5625, abs=0.01)  # 478 GB/s, measured on the lent 2xH200, 2026-11-29
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
