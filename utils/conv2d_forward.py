"""conv2d_forward: a drop-in for nn.Conv2d.forward that runs the convolution on OpenCL.

Padding is applied here in torch, for every form nn.Conv2d accepts (an int, a pair,
'same', 'valid') and every padding_mode (zeros, reflect, replicate, circular); the
padded input then goes to ocl_conv2d through utils.functional.conv2d."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from utils import functional


def conv2d_forward(self: nn.Conv2d, input: torch.Tensor) -> torch.Tensor:
    unbatched = input.dim() == 3  # (C, H, W), as nn.Conv2d allows
    if unbatched:
        input = input.unsqueeze(0)
    # (left, right, top, bottom), already split unevenly for 'same' with even kernels.
    pad = self._reversed_padding_repeated_twice
    if self.padding_mode != "zeros":
        input = F.pad(input, pad, mode=self.padding_mode)
    elif any(pad):
        input = F.pad(input, pad)
    out = functional.conv2d(input, self.weight, self.bias, self.stride, self.dilation, self.groups)
    return out.squeeze(0) if unbatched else out
