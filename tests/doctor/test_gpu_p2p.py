"""gpu.p2p's judgement (evaluate) without torch or a GPU, against the NVML snapshot captured on the lent
2xH200 machine (tests/fixtures/bundles/h200x2, docs/gpu-runs/README.md), and the recorded run replayed."""
import json
from pathlib import Path

import pytest

H200X2 = Path(__file__).resolve().parents[1] / "fixtures" / "bundles" / "h200x2" / ".envbuild" / "nvml.json"


def h200x2():
    return json.loads(H200X2.read_text())["data"]


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


def test_replay_of_the_recorded_two_gpu_p2p_run():
    """The pair the lent 2xH200 measured (docs/gpu-runs/gpuprobes-h6-2gpu-quick.json), judged again."""
    from envbuild.doctor.checks.gpu_p2p import evaluate

    runs = Path(__file__).resolve().parents[2] / "docs" / "gpu-runs"
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
