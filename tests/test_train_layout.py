"""Train-step arithmetic without torch: shapes, parallel layout, vocabulary padding, parameters per rank."""
import pytest

from envbuild.train.layout import LayoutError, derive_layout, padded_vocab
from envbuild.train.memory import GIB, depth_that_fits, estimate_bytes, params_per_rank
from envbuild.train.presets import get_preset

QWEN = get_preset("qwen3-30b-a3b")


def test_qwen3_30b_a3b_shapes():
    assert (QWEN.hidden, QWEN.heads, QWEN.query_groups, QWEN.head_dim) == (2048, 32, 4, 128)
    assert (QWEN.experts, QWEN.topk, QWEN.expert_ffn, QWEN.vocab) == (128, 8, 768, 151936)
    assert QWEN.q_width == 4096 and QWEN.kv_width == 512  # q projection is wider than hidden
    assert QWEN.rope_base == 1e6 and not QWEN.tied_embeddings and QWEN.qk_layernorm
    with pytest.raises(ValueError, match="unknown model preset 'llama'"):
        get_preset("llama")


@pytest.mark.parametrize("world, expect", [
    (8, (4, True, 8, 1, 1)),   # slime's run-qwen3-30B-A3B.sh on 8 GPUs: TP 4 + SP, EP 8, PP 1
    (2, (2, True, 2, 1, 1)),
    (1, (1, False, 1, 1, 1)),
])
def test_default_layout_follows_slime_scaled_to_the_gpus(world, expect):
    lay = derive_layout(world, QWEN, layers=4, seq=4096)
    assert (lay.tp, lay.sp, lay.ep, lay.pp, lay.cp) == expect
    assert lay.dp == world // lay.tp and lay.edp == world // lay.ep


def test_explicit_flags_win_and_dp_is_derived():
    lay = derive_layout(2, QWEN, layers=4, seq=4096, tp=1)
    assert (lay.tp, lay.sp, lay.ep, lay.dp, lay.edp) == (1, False, 2, 2, 1)
    assert lay.describe() == "TP 1, EP 2, PP 1, CP 1, DP 2 on 2 GPUs"


@pytest.mark.parametrize("kwargs, world, message", [
    (dict(tp=3), 2, "TP 3 x PP 1 x CP 1 = 3 does not divide the 2 GPUs"),
    (dict(ep=3), 6, "train.ep=3 does not divide the 128 experts"),
    (dict(ep=4, tp=1), 2, "EP 4 x PP 1 = 4 does not divide the 2 GPUs"),
    (dict(tp=8), 8, "train.tp=8 does not divide the 4 query groups"),
    (dict(tp=1, sp=True), 2, "train.sp=1 needs train.tp > 1"),
    (dict(tp=2, sp=False), 2, "without sequence parallel; set train.sp=1"),
    (dict(pp=2, tp=1, ep=1), 2, "train.pp=2 does not divide train.layers=3"),
    (dict(cp=2, tp=1, ep=1), 2, "train.seq=4095 is not a multiple of 2 x CP = 4"),
])
def test_layout_errors_name_the_flag(kwargs, world, message):
    layers = 3 if "pp" in kwargs else 4
    seq = 4095 if "cp" in kwargs else 4096
    with pytest.raises(LayoutError) as exc:
        derive_layout(world, QWEN, layers=layers, seq=seq, **kwargs)
    assert message in str(exc.value)


def test_vocab_padding_as_megatron():
    assert padded_vocab(151936, 1) == 151936  # already a multiple of 128
    assert padded_vocab(151936, 2) == 152064  # next multiple of 256
    assert padded_vocab(151936, 4) == 152064


def test_params_per_rank_match_the_smoke_run_by_hand():
    # measured on the lent 2xH200, 2026-11-29: 2 layers, EP 2 on two GPUs -> 1.27 B parameters per rank. By hand:
    embed = 151936 * 2048                       # 311,164,928 (and the same again for the untied output layer)
    attn = 2048 * (4096 + 2 * 512) + 4096 * 2048  # 18,874,368
    norms = 2 * 2048 + 2 * 128                  # input/pre-MLP RMSNorm + q/k layernorm
    router = 2048 * 128                          # 262,144
    experts = 64 * 3 * 2048 * 768                # 64 of 128 experts on this rank: 301,989,888
    final_norm = 2048
    want = 2 * embed + 2 * (attn + norms + router + experts) + final_norm
    lay = derive_layout(2, QWEN, layers=2, seq=2048, tp=1, ep=2)
    got = params_per_rank(QWEN, lay, 2)
    assert got.total == want == 1_264_593_408
    assert got.expert == 2 * experts


def test_depth_that_fits_is_the_deepest_estimate_under_the_capacity():
    lay = derive_layout(1, QWEN, layers=4, seq=4096)
    cap = 141 * GIB
    fits = depth_that_fits(QWEN, lay, 4096, 1, cap)
    assert 1 <= fits < QWEN.full_layers
    assert estimate_bytes(QWEN, lay, fits, 4096, 1)["total"] <= 0.9 * cap
    assert estimate_bytes(QWEN, lay, fits + 1, 4096, 1)["total"] > 0.9 * cap
    # more experts per rank (EP 1 vs EP 8) fit fewer layers
    wide = derive_layout(8, QWEN, layers=4, seq=4096, tp=1, ep=8)
    assert depth_that_fits(QWEN, wide, 4096, 1, cap) > fits
    assert depth_that_fits(QWEN, lay, 4096, 1, 4 * GIB) == 0


@pytest.mark.parametrize("run, flags", [
    ("train-moe-ep2-tms.json", dict(tp=1, ep=2)),
    ("train-moe-pp2.json", dict(pp=2, tp=1, ep=1)),
])
def test_the_estimate_matches_the_peaks_measured_on_the_lent_h200s(run, flags):
    """The forward/backward peak torch measured (2 layers, both ranks) against the estimate without its
    context/NCCL overhead, which torch's allocator does not see."""
    import json
    from pathlib import Path

    from envbuild.train.memory import OVERHEAD_BYTES

    ev = json.loads((Path(__file__).resolve().parent.parent / "docs" / "gpu-runs" / run).read_text())[
        "results"][0]["evidence"]
    measured = max(s["peak_fwd_bwd_bytes"] for s in ev["steps"])
    lay = derive_layout(2, QWEN, 2, 4096, **flags)
    estimate = estimate_bytes(QWEN, lay, 2, 4096, 1)["total"] - OVERHEAD_BYTES
    assert abs(estimate - measured) < 0.6 * GIB, (estimate / GIB, measured / GIB)
