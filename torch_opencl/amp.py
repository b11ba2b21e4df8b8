"""Mixed precision on the opencl device: what torch.amp asks of a PrivateUse1 backend.

    with torch.autocast("opencl", dtype=torch.float16):       # or torch.bfloat16; float16 by default
        loss = loss_fn(model(x), y)                           # products in float16, softmax/losses in float32
    scaler = torch.amp.GradScaler("opencl")
    scaler.scale(loss).backward()
    scaler.step(optimizer)                                    # skipped where a gradient is inf or NaN
    scaler.update()

The cast policy (which operators run in 16 bits, which in float32, which promote) is CUDA's,
registered for the AutocastPrivateUse1 dispatch key in csrc/aten/autocast.cpp; the scaler's
inf check, unscaling and scale update run as device kernels (csrc/aten/amp_scale.cpp,
kernels/amp.cl), so found_inf and the scale stay on the device. torch.autocast checks the
dtype against get_amp_supported_dtype() of torch.opencl, and falls back to no autocast
(with a warning) for any other.
"""
from __future__ import annotations

import torch

__all__ = ["get_amp_supported_dtype", "is_bf16_supported"]


def get_amp_supported_dtype() -> list[torch.dtype]:
    """The dtypes torch.autocast("opencl", dtype=...) accepts: the device stores both in 16
    bits and computes them in float32 inside its kernels."""
    return [torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """bfloat16 is always supported: stored in 16 bits, computed in float32 (as torch.cuda's
    answer for a device of that kind)."""
    return True
