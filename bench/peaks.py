"""What a GPU could do at most, and what a workload does: the benchmarks' rows as a share of
the device's peak.

Peaks are the makers' spec-sheet figures (NVIDIA's H100 whitepaper and the H100, H200 and A100
datasheets), dense (the datasheets' tensor-core figures "with sparsity" halved), at boost
clock, in TFLOP/s (a multiply-add counts 2) and TB/s:

    fp32   the CUDA cores' float32 (what float32 runs on with TF32 off, and our float32 kernels)
    tf32   tensor cores on float32 inputs rounded to TF32
    fp16, bf16   tensor cores on 16-bit inputs, float32 accumulation
    bw     device memory bandwidth

A device is looked up by its name (torch.cuda.get_device_name, or the OpenCL device's: both
read "NVIDIA H200" there), word by word, so "GH200" is not taken for "H200". OCLF_PEAKS
overrides or completes the entry, e.g. OCLF_PEAKS="fp32=60,fp16=835.5,bw=4.8"; a device in no
entry and without the setting has no peak, and its share reads n/a.

FLOPs are counted by torch.utils.flop_counter.FlopCounterMode (products and convolutions,
forward and backward; elementwise work is not counted, as MFU figures usually do), on the CPU,
with one formula added: torch's CPU attention kernel, which the counter's own table lacks.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

from opencl_functions import settings

FIELDS = ("fp32", "tf32", "fp16", "bf16", "bw")
# A benchmark's dtype -> the peak it is held against.
PRECISION = {"float32": "fp32", "tf32": "tf32", "float16": "fp16", "bfloat16": "bf16"}


@dataclass(frozen=True)
class Peaks:
    name: str
    fp32: Optional[float] = None  # TFLOP/s
    tf32: Optional[float] = None
    fp16: Optional[float] = None
    bf16: Optional[float] = None
    bw: Optional[float] = None  # TB/s

    def flops(self, dtype: str) -> Optional[float]:
        """The peak in FLOP/s for a benchmark's dtype (float32, tf32, float16, bfloat16)."""
        value = getattr(self, PRECISION[dtype])
        return None if value is None else value * 1e12

    def bytes_per_s(self) -> Optional[float]:
        return None if self.bw is None else self.bw * 1e12


def _sxm(name: str, bw: float) -> Peaks:  # GH100 at the SXM5 boost clock (H100 SXM5, H200)
    return Peaks(name, fp32=66.9, tf32=494.7, fp16=989.4, bf16=989.4, bw=bw)


def _nvl(name: str, bw: float) -> Peaks:  # GH100 in the NVL cards' power envelope
    return Peaks(name, fp32=60.0, tf32=417.5, fp16=835.5, bf16=835.5, bw=bw)


def _a100(name: str, bw: float) -> Peaks:
    return Peaks(name, fp32=19.5, tf32=156.0, fp16=312.0, bf16=312.0, bw=bw)


# (words the name must hold, entry), first match wins: the narrower names first.
TABLE: Tuple[Tuple[Tuple[str, ...], Peaks], ...] = (
    (("H100", "PCIE"), Peaks("H100 PCIe", fp32=51.2, tf32=378.0, fp16=756.0, bf16=756.0, bw=2.0)),
    (("H100", "NVL"), _nvl("H100 NVL", 3.9)),
    (("H100",), _sxm("H100 SXM", 3.35)),
    (("H200", "NVL"), _nvl("H200 NVL", 4.8)),
    (("H200",), _sxm("H200 SXM", 4.8)),
    (("A100", "80GB", "PCIE"), _a100("A100 80GB PCIe", 1.935)),
    (("A100", "PCIE"), _a100("A100 40GB PCIe", 1.555)),
    (("A100", "40GB"), _a100("A100 SXM4 40GB", 1.555)),
    (("A100",), _a100("A100 SXM4 80GB", 2.039)),
)


def _words(name: str) -> set:
    return set(re.split(r"[^A-Z0-9]+", name.upper()))


def parse_override(text: str) -> dict:
    """OCLF_PEAKS's "key=value,..." as {field: float}; a bad item raises ValueError naming it."""
    values = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        key = key.strip().lower()
        if not sep or key not in FIELDS:
            raise ValueError(f"OCLF_PEAKS: {item!r} is not one of {', '.join(f + '=NUMBER' for f in FIELDS)}")
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"OCLF_PEAKS: {item!r}: {value.strip()!r} is not a number") from None
        if not number > 0:
            raise ValueError(f"OCLF_PEAKS: {item!r}: a peak must be positive")
        values[key] = number
    return values


def lookup(device_name: str, override: Optional[str] = None) -> Optional[Peaks]:
    """The peaks of the device named `device_name`, completed or replaced by `override`
    (OCLF_PEAKS's syntax; the setting itself when None); None when neither knows it."""
    words = _words(device_name)
    found = next((peaks for needed, peaks in TABLE if words.issuperset(needed)), None)
    extra = parse_override(settings.get("PEAKS") if override is None else override)
    if not extra:
        return found
    base = found or Peaks(device_name)
    return dataclasses.replace(base, name=f"{base.name}, OCLF_PEAKS", **extra)


def fraction(flops: Optional[float], seconds: Optional[float], peaks: Optional[Peaks], dtype: str) -> Optional[float]:
    """flops / seconds as a share of the device's peak for dtype; None where a part is missing."""
    peak = peaks.flops(dtype) if peaks else None
    if not flops or not seconds or not peak:
        return None
    return flops / seconds / peak


def percent(share: Optional[float]) -> str:
    """A share as the tables print it: "12.3 %", "0.41 %", or n/a."""
    if share is None:
        return "n/a"
    return f"{share * 100:.1f} %" if share >= 0.01 else f"{share * 100:.2f} %"


def gemm_flops(m: int, k: int, n: int) -> int:
    """(M, K) @ (K, N): a multiply-add per term."""
    return 2 * m * k * n


def attention_flops(batch: int, heads: int, seq_q: int, seq_k: int, dim: int, causal: bool) -> int:
    """Scaled dot-product attention: Q·Kᵀ and P·V, 2·2·B·H·Sq·Sk·D; a causal mask does about
    half (the convention of FlashAttention's own benchmarks); softmax not counted."""
    full = 4 * batch * heads * seq_q * seq_k * dim
    return full // 2 if causal else full


def _cpu_attention_flops(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    """torch's CPU attention kernel, counted as the counter counts the CUDA ones (no mask)."""
    from torch.utils.flop_counter import sdpa_flop_count

    return sdpa_flop_count(query_shape, key_shape, value_shape)


def count_flops(fn: Callable[[], object]) -> int:
    """The FLOPs of one fn() (CPU tensors inside), by torch's FlopCounterMode."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    extra = {}
    cpu_attention = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    if cpu_attention is not None:
        extra[cpu_attention] = _cpu_attention_flops
    with FlopCounterMode(display=False, custom_mapping=extra) as counter:
        fn()
    return int(counter.get_total_flops())
