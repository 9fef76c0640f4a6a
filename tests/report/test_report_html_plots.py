"""The plot readers and plots on shapes the recorded 2-GPU runs do not have: an 8-GPU node (56 ordered pairs,
one pair without P2P), evidence written by older v1 writers (line rate as text only), a train step that stopped
before its first step. Built from the result model, as gpu.p2p and comm.nccl_collectives write it."""
import json
import re
from pathlib import Path

from envbuild.report.html import render_nodes
from envbuild.report.html_data import nccl_run, p2p_matrix, size_text
from envbuild.report.html_input import NodeReport
from envbuild.report.json_report import report_from_dict
from envbuild.report.model import Metric, Report, Result, Status

RUNS = Path(__file__).resolve().parents[2] / "docs" / "gpu-runs"


def eight_gpu_report(broken=(2, 5)):
    results = []
    for a in range(8):
        for b in range(a + 1, 8):
            metrics, status, summary = [], Status.PASS, f"GPU {a}<->{b}: copies exact"
            if (a, b) == broken:
                status, summary = Status.FAIL, f"GPU {a}->{b}: NVML reports P2P ok but CUDA cannot access the peer"
            else:
                for s, d in ((a, b), (b, a)):
                    gbps = 390.0 - 3 * (s + d)
                    metrics += [Metric(f"gpu{s}->gpu{d}.uni_gbps", gbps, "GB/s", ">= 0.74 x 478 GB/s (nvlink)"),
                                Metric(f"gpu{s}->gpu{d}.uni_fraction", round(gbps / 478.12, 3), "ratio")]
            results.append(Result("gpu.p2p", "gpu", status, summary, metrics=metrics, subject=f"gpu{a}<->gpu{b}",
                                  evidence={"line_rate": {"gbps": 478.12, "link": "nvlink"}},
                                  causes=["N3"] if status is Status.FAIL else []))
    return Report(host={"hostname": "h200x8-01", "source": "live node (root /)"},
                  gpus=[{"index": i, "name": "NVIDIA H200", "memory_total_mib": 143771} for i in range(8)],
                  results=results, options={"mode": "quick"})


def test_eight_gpus_give_56_cells_and_the_broken_pair_is_marked():
    rep = eight_gpu_report()
    m = p2p_matrix(rep)
    assert m.gpus == list(range(8)) and len(m.cells) == 56 and m.line_rate_gbps == 478.12
    assert m.cells[(2, 5)].gbps is None and m.cells[(5, 2)].status is Status.FAIL
    page = render_nodes([NodeReport("h200x8-01", "test", rep)])
    assert len(re.findall(r'id="p2p-cell-\d-\d"', page)) == 56
    assert page.count(">FAIL</text>") == 2  # both directions of the broken pair, in the heat map
    assert "N3 · " in page and "NVML reports P2P ok but CUDA cannot access the peer" in page


def test_line_rate_read_from_text_when_rows_carry_no_fraction():
    """An older collectives result: line rate only as a sentence, no fraction_of_line_rate in the rows."""
    data = json.loads((RUNS / "doctor-full-2gpu.json").read_text())
    rep = report_from_dict(data)
    for r in rep.results:
        if r.check_id == "comm.nccl_collectives":
            r.evidence["line_rate"] = "478 GB/s per direction: 18 NVLink x 26.562 GB/s"
            for row in r.evidence["rows"]:
                row.pop("fraction_of_line_rate")
    run = nccl_run(rep)
    assert run.line_rate_gbps == 478.0 and len(run.series) == 10
    assert [size_text(z) for z in run.series[0].sizes] == ["1MiB", "4MiB", "16MiB", "64MiB", "256MiB", "1GiB"]


def test_malformed_evidence_is_skipped_not_a_crash():
    """Rows without numbers, a matrix metric with a string value: the page says there is nothing to plot."""
    rep = Report(host={"hostname": "n1"}, gpus=[], results=[
        Result("comm.nccl_collectives", "comm", Status.PASS, "ok", evidence={"rows": [{"op": "all_reduce"}, "x"]}),
        Result("gpu.p2p", "gpu", Status.PASS, "ok", metrics=[Metric("gpu0->gpu1.uni_gbps", "fast", "GB/s")]),
        Result("train.moe_step", "train", Status.PASS, "ok", evidence={"steps": "none", "layout": [1]}),
    ])
    assert nccl_run(rep) is None
    page = render_nodes([NodeReport("n1", "test", rep)])
    assert "<svg" not in page
    assert "comm.nccl_collectives has no data for this plot" in page
    assert "train.moe_step has no data for this plot" in page
