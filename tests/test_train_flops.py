"""FLOPs per token and MFU against a hand calculation, and the peak table lookup."""
import pytest

from envbuild.train.flops import forward_flops_per_token, mfu, train_flops_per_token
from envbuild.train.peaks import peak_for
from envbuild.train.presets import get_preset

QWEN = get_preset("qwen3-30b-a3b")


def test_flops_per_token_by_hand_full_qwen3_30b_a3b():
    # h=2048, q=32*128=4096, k=4*128=512, E=128, f=768, top-8, V=151936, L=48, s=4096
    qkv = 2 * 2048 * (4096 + 2 * 512)     # 20,971,520
    attention = 4 * 4096 * 4096           # 67,108,864  (scores + values, full s)
    out_proj = 2 * 4096 * 2048            # 16,777,216
    router = 2 * 2048 * 128               # 524,288
    experts = 8 * 3 * 2 * 2048 * 768      # 75,497,472
    per_layer = 180_879_360
    assert qkv + attention + out_proj + router + experts == per_layer
    lm_head = 2 * 2048 * 151936           # 622,329,856
    forward = 48 * per_layer + lm_head    # 9,304,539,136
    assert forward == 9_304_539_136
    assert sum(forward_flops_per_token(QWEN, 48, 4096).values()) == forward
    assert train_flops_per_token(QWEN, 48, 4096) == 3 * forward == 27_913_617_408


def test_flops_use_the_padded_vocab_when_given():
    assert train_flops_per_token(QWEN, 4, 4096, vocab=152064) - train_flops_per_token(QWEN, 4, 4096) \
        == 3 * 2 * 2048 * (152064 - 151936)


def test_mfu_by_hand():
    # 10,000 tokens/s on 8 GPUs of 989 TFLOP/s at 27.9136 GFLOP/token:
    # 1e4 * 27,913,617,408 / (8 * 989e12) = 2.7913617408e14 / 7.912e15 = 0.0352801...
    got = mfu(10_000, 27_913_617_408, 8, 989e12)
    assert got == pytest.approx(0.03528010, rel=1e-6)
    with pytest.raises(ValueError):
        mfu(1, 1, 0, 989e12)


@pytest.mark.parametrize("name, sku, tflops", [
    ("NVIDIA H200", "H200 SXM", 989.0),          # what NVML reports on the lent machine
    ("NVIDIA H100 80GB HBM3", "H100 SXM", 989.0),
    ("NVIDIA H100 PCIe", "H100 PCIe", 756.0),
    ("NVIDIA H100 NVL", "H100 NVL", 835.0),
    ("NVIDIA H800", "H800 SXM", 989.0),
    ("NVIDIA A100-SXM4-80GB", "A100", 312.0),
    ("NVIDIA H20", "H20", 148.0),
])
def test_peak_by_nvml_name(name, sku, tflops):
    peak = peak_for(name)
    assert (peak.sku, peak.bf16_dense_tflops) == (sku, tflops)
    assert "datasheet" in peak.source or "brief" in peak.source


def test_unknown_gpu_has_no_peak():
    assert peak_for("NVIDIA GeForce RTX 4090") is None
    assert peak_for(None) is None
