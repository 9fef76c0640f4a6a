"""Dense (no sparsity) bf16 tensor-core peak and HBM bandwidth per GPU, matched from the NVML device name.

NVIDIA datasheets quote bf16 "with sparsity"; the dense number is half of it (fp16 dense is the same figure on
these tensor cores). Each row names its datasheet. MFU (train.moe_step) and gpu.compute are held against these
numbers; a GPU that matches no row is not judged (the check says so) rather than against a guessed peak.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Tuple


@dataclass(frozen=True)
class Peak:
    sku: str
    bf16_dense_tflops: float
    source: str
    hbm_gbps: float = 0.0  # memory bandwidth, datasheet (1 TB/s = 1000 GB/s); 0 = not known


# Order matters: the first pattern that matches the NVML name wins (PCIe/NVL before the SXM default).
_TABLE: Tuple[Tuple[str, Peak], ...] = (
    (r"H100.*PCIe", Peak("H100 PCIe", 756.0, "NVIDIA H100 Tensor Core GPU datasheet (BF16 1,513 TFLOPS with sparsity; 2.0 TB/s HBM2e)", 2000.0)),
    (r"H100.*NVL", Peak("H100 NVL", 835.0, "NVIDIA H100 Tensor Core GPU datasheet (BF16 1,671 TFLOPS with sparsity; 3.9 TB/s HBM3)", 3900.0)),
    (r"H100", Peak("H100 SXM", 989.0, "NVIDIA H100 Tensor Core GPU datasheet (BF16 1,979 TFLOPS with sparsity; 3.35 TB/s HBM3)", 3350.0)),
    (r"H200.*NVL", Peak("H200 NVL", 835.0, "NVIDIA H200 Tensor Core GPU datasheet (BF16 1,671 TFLOPS with sparsity; 4.8 TB/s HBM3e)", 4800.0)),
    (r"H200", Peak("H200 SXM", 989.0, "NVIDIA H200 Tensor Core GPU datasheet (BF16 1,979 TFLOPS with sparsity; 4.8 TB/s HBM3e)", 4800.0)),
    (r"H800.*PCIe", Peak("H800 PCIe", 756.0, "NVIDIA H800 PCIe datasheet (BF16 1,513 TFLOPS with sparsity; 2.0 TB/s HBM2e)", 2000.0)),
    (r"H800", Peak("H800 SXM", 989.0, "NVIDIA H800 SXM datasheet (BF16 1,979 TFLOPS with sparsity; NVLink cut, compute as H100 SXM; 3.35 TB/s HBM3)", 3350.0)),
    (r"H20\b", Peak("H20", 148.0, "NVIDIA H20 product brief (BF16 148 TFLOPS dense; 4.0 TB/s HBM3)", 4000.0)),
    (r"A100", Peak("A100", 312.0, "NVIDIA A100 Tensor Core GPU datasheet (BF16 312 TFLOPS dense, 624 with sparsity; 2,039 GB/s HBM2e, 80GB SXM)", 2039.0)),
    (r"A800", Peak("A800", 312.0, "NVIDIA A800 datasheet (BF16 312 TFLOPS dense, as A100; 2,039 GB/s HBM2e, 80GB SXM)", 2039.0)),
    (r"L40S", Peak("L40S", 362.0, "NVIDIA L40S datasheet (BF16 362.05 TFLOPS dense, 733 with sparsity; 864 GB/s GDDR6)", 864.0)),
    (r"B200", Peak("B200", 2250.0, "NVIDIA DGX B200 datasheet (BF16 2.25 PFLOPS dense per GPU; 8 TB/s HBM3e)", 8000.0)),
)


def peak_for(nvml_name: Optional[str]) -> Optional[Peak]:
    """The peak row for an NVML device name such as 'NVIDIA H200' or 'NVIDIA H100 80GB HBM3'; None if unknown."""
    if not nvml_name:
        return None
    for pattern, peak in _TABLE:
        if re.search(pattern, nvml_name, flags=re.IGNORECASE):
            return peak
    return None
