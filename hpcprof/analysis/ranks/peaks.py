"""Dense peak throughput of common data-centre GPUs per dtype, and their memory bandwidth, for the
"share of peak" of operator efficiency (ranks/op_efficiency.py).

Figures are the vendors' datasheet numbers WITHOUT structured sparsity (the datasheets print the
sparse figure, twice the dense one, for the tensor-core rows of A100 and later), in TFLOP/s; memory
bandwidth in TB/s. fp32 is the CUDA-core (non-tensor) rate; tf32/fp16/bf16/fp8 the tensor-core rate.
A device is matched by its CUDA/ROCm name (the trace's `deviceProperties[].name`); a device not
listed, or a variant whose figures differ from the listed one (H100 NVL, H200 NVL), gets no peak:
the share of peak is then None with a reason, never a guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Peak:
    label: str
    tflops: dict[str, float]
    """dtype class (fp32, tf32, fp16, bf16, fp8) -> dense TFLOP/s."""
    tbps: float | None
    """Memory bandwidth in TB/s (None: the variant's bandwidth is not known from its name)."""
    source: str


_V100 = "NVIDIA Tesla V100 datasheet (Jan 2020)"
_A100 = "NVIDIA A100 Tensor Core GPU datasheet (2021), dense figures"
_H100 = "NVIDIA H100 Tensor Core GPU datasheet (2023), dense (half the with-sparsity figures)"
_H200 = "NVIDIA H200 Tensor Core GPU datasheet (2024), dense (half the with-sparsity figures)"
_B200 = "NVIDIA HGX B200 / DGX B200 datasheet (2024), per GPU, dense (half the with-sparsity figures)"
_MI300X = "AMD Instinct MI300X accelerator datasheet (2023), dense"

_A100_TF = {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0}
_H100_SXM_TF = {"fp32": 67.0, "tf32": 494.5, "fp16": 989.5, "bf16": 989.5, "fp8": 1979.0}

# (regex on the device name, case-insensitive, first match wins; peak)
PEAKS: tuple[tuple[str, Peak], ...] = (
    (r"V100S", Peak("V100S PCIe", {"fp32": 16.4, "fp16": 130.0}, 1.134, _V100)),
    (r"V100.*PCIE", Peak("V100 PCIe", {"fp32": 14.0, "fp16": 112.0}, 0.9, _V100)),
    (r"V100.*(SXM2|DGXS)", Peak("V100 SXM2", {"fp32": 15.7, "fp16": 125.0}, 0.9, _V100)),
    (r"A100.*SXM4-80GB", Peak("A100 SXM 80GB", _A100_TF, 2.039, _A100)),
    (r"A100.*80GB.*PCIe", Peak("A100 PCIe 80GB", _A100_TF, 1.935, _A100)),
    (r"A100.*(SXM4-40GB|PCIE-40GB)", Peak("A100 40GB", _A100_TF, 1.555, _A100)),
    (r"A100", Peak("A100 (memory variant not named)", _A100_TF, None, _A100)),
    (r"H100.*NVL", None),
    (r"H100.*PCIe", Peak("H100 PCIe", {"fp32": 51.0, "tf32": 378.0, "fp16": 756.0, "bf16": 756.0, "fp8": 1513.0}, 2.0, _H100)),
    (r"H100.*(SXM|HBM3)", Peak("H100 SXM", _H100_SXM_TF, 3.35, _H100)),
    (r"H200.*NVL", None),
    (r"H200", Peak("H200 SXM", _H100_SXM_TF, 4.8, _H200)),
    (r"B200", Peak("B200", {"tf32": 1100.0, "fp16": 2250.0, "bf16": 2250.0, "fp8": 4500.0}, 8.0, _B200)),
    (r"MI300X", Peak("MI300X", {"fp32": 163.4, "tf32": 653.7, "fp16": 1307.4, "bf16": 1307.4, "fp8": 2614.9}, 5.3, _MI300X)),
)


def device_peak(name: str | None) -> tuple[Peak | None, str | None]:
    """(the device's peaks, None) or (None, why there are none)."""
    if not name:
        return None, "the trace names no device (no deviceProperties)"
    for pat, peak in PEAKS:
        if re.search(pat, name, re.IGNORECASE):
            if peak is None:
                break
            return peak, None
    return None, f"no datasheet peaks for device {name!r} in hpcprof's table (ranks/peaks.py)"


def dtype_peak(peak: Peak | None, dtype: str | None, why: str | None) -> tuple[float | None, str | None]:
    """(peak TFLOP/s for the dtype class, None) or (None, why)."""
    if peak is None:
        return None, why
    v = peak.tflops.get(dtype or "")
    if v is None:
        return None, f"no dense {dtype} peak for {peak.label} in the datasheet table"
    return v, None
