"""envbuild.facts.nvml.take_snapshot against a fake pynvml (CI has no driver): per-field errors never crash
the snapshot, and a missing driver becomes FactUnavailable with NVML's own reason."""
from __future__ import annotations

import json
import sys

import pytest

from envbuild.facts.source import FactUnavailable
from fakenode import NO_PERMISSION, NOT_SUPPORTED, Raise, fake_pynvml, h200_like_device


def snapshot(monkeypatch, nv):
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    from envbuild.facts.nvml import take_snapshot

    return take_snapshot()


def test_healthy_two_gpu_snapshot_is_plain_json(monkeypatch):
    snap = snapshot(monkeypatch, fake_pynvml([h200_like_device(0), h200_like_device(1)]))
    assert json.loads(json.dumps(snap)) == snap
    assert snap["driver_version"] == "580.159.04" and snap["cuda_driver_version"] == 13000
    assert snap["device_count"] == 2
    d0 = snap["devices"][0]
    assert d0["pci_bus_id"] == "00000000:18:00.0" and d0["memory_total_mib"] == 143771
    assert len(d0["nvlink"]) == 18 and all(lk["active"] for lk in d0["nvlink"])
    assert d0["pcie"] == {"gen_current": 1, "gen_max": 5, "gen_gpu_max": 5, "width_current": 16,
                          "width_max": 16, "replay_counter": 0}
    assert d0["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
    assert d0["processes"] == [] and d0["compute_mode"] == "default"
    assert d0["virtualization_mode"] == "passthrough"
    assert set(snap["p2p"]) == {"0-1", "1-0"} and snap["p2p"]["0-1"] == {"read": "ok", "write": "ok", "nvlink": "ok"}


def test_not_supported_and_no_permission_are_recorded_per_field(monkeypatch):
    dev = h200_like_device(0)
    dev["nvmlDeviceGetRemappedRows"] = Raise(NOT_SUPPORTED)
    dev["nvmlDeviceGetPersistenceMode"] = Raise(NO_PERMISSION)
    dev["nvmlDeviceGetNvLinkState"] = Raise(NOT_SUPPORTED)  # a PCIe card
    snap = snapshot(monkeypatch, fake_pynvml([dev]))
    d = snap["devices"][0]
    assert d["remapped_rows"] is None and d["errors"]["remapped_rows"] == "Not Supported"
    assert d["persistence_mode"] is None and d["errors"]["persistence_mode"] == "Insufficient Permissions"
    assert d["serial"] is None and d["errors"]["serial"] == "Insufficient Permissions"
    assert d["nvlink"] == [] and d["errors"]["nvlink"] == "Not Supported"
    assert d["ecc_mode"] == {"current": True, "pending": True}  # the rest still read
    assert snap["p2p"] == {}


@pytest.mark.parametrize("code, words", [(12, "libnvidia-ml.so.1 is not installed"),
                                         (9, "kernel module is not loaded"),
                                         (18, "Driver/library version mismatch")])
def test_no_driver_raises_fact_unavailable_with_the_reason(monkeypatch, code, words):
    with pytest.raises(FactUnavailable) as err:
        snapshot(monkeypatch, fake_pynvml([], init_error=code))
    assert str(err.value).startswith("no NVIDIA driver: ") and words in str(err.value)
