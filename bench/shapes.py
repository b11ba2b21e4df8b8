"""Layer shapes for the benchmark (batch 1, 224×224 input images).

ConvShape holds one conv2d as torch's nn.Conv2d sees it (input before padding); the
benchmark pads the input itself and calls ocl_conv2d with padding 0, as the patched
layers do. MatmulShape is one (M, K) @ (K, N) product.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List

from grading.library import geometry


@dataclass(frozen=True)
class ConvShape:
    name: str
    c_in: int
    h: int
    w: int
    c_out: int
    k: int
    stride: int = 1
    padding: int = 0
    dilation: int = 1
    groups: int = 1
    count: int = 1  # how many layers of the network have this shape

    @property
    def geometry(self) -> geometry.Conv2dGeometry:
        """The convolution of one padded image (geometry.Conv2dGeometry)."""
        padded = (1, self.c_in, self.h + 2 * self.padding, self.w + 2 * self.padding)
        weight = (self.c_out, self.c_in // self.groups, self.k, self.k)
        return geometry.conv2d_geometry(padded, weight, self.stride, self.dilation, self.groups)

    @property
    def flops(self) -> int:
        return 2 * self.geometry.macs

    def label(self) -> str:
        return f"{self.c_in}x{self.h}x{self.w}->{self.c_out} k{self.k} s{self.stride}" + (
            f" g{self.groups}" if self.groups > 1 else ""
        )


@dataclass(frozen=True)
class MatmulShape:
    name: str
    m: int
    k: int
    n: int

    @property
    def flops(self) -> int:
        return 2 * self.m * self.k * self.n

    def label(self) -> str:
        return f"{self.m}x{self.k} @ {self.k}x{self.n}"


def _conv(name, c_in, hw, c_out, k, stride=1, padding=0, groups=1, count=1):
    return ConvShape(name, c_in, hw, hw, c_out, k, stride, padding, 1, groups, count)


# The 23 distinct conv layers of torchvision's resnet50 at 224×224 (count: how often each occurs).
RESNET50: List[ConvShape] = [
    _conv("conv1", 3, 224, 64, 7, 2, 3),
    _conv("l1.c1a", 64, 56, 64, 1),
    _conv("l1.c2", 64, 56, 64, 3, 1, 1, count=3),
    _conv("l1.c3", 64, 56, 256, 1, count=4),
    _conv("l1.c1", 256, 56, 64, 1, count=2),
    _conv("l2.c1a", 256, 56, 128, 1),
    _conv("l2.c2s", 128, 56, 128, 3, 2, 1),
    _conv("l2.c3", 128, 28, 512, 1, count=4),
    _conv("l2.down", 256, 56, 512, 1, 2),
    _conv("l2.c1", 512, 28, 128, 1, count=3),
    _conv("l2.c2", 128, 28, 128, 3, 1, 1, count=3),
    _conv("l3.c1a", 512, 28, 256, 1),
    _conv("l3.c2s", 256, 28, 256, 3, 2, 1),
    _conv("l3.c3", 256, 14, 1024, 1, count=6),
    _conv("l3.down", 512, 28, 1024, 1, 2),
    _conv("l3.c1", 1024, 14, 256, 1, count=5),
    _conv("l3.c2", 256, 14, 256, 3, 1, 1, count=5),
    _conv("l4.c1a", 1024, 14, 512, 1),
    _conv("l4.c2s", 512, 14, 512, 3, 2, 1),
    _conv("l4.c3", 512, 7, 2048, 1, count=3),
    _conv("l4.down", 1024, 14, 2048, 1, 2),
    _conv("l4.c1", 2048, 7, 512, 1, count=2),
    _conv("l4.c2", 512, 7, 512, 3, 1, 1, count=2),
]

# Depthwise layers: the nine distinct 3×3 ones of torchvision's mobilenet_v2 and the 5×5
# ones of EfficientNet-B0/Lite0.
DEPTHWISE: List[ConvShape] = [
    _conv("mbv2.dw32", 32, 112, 32, 3, 1, 1, groups=32),
    _conv("mbv2.dw96s", 96, 112, 96, 3, 2, 1, groups=96),
    _conv("mbv2.dw144", 144, 56, 144, 3, 1, 1, groups=144),
    _conv("mbv2.dw144s", 144, 56, 144, 3, 2, 1, groups=144),
    _conv("mbv2.dw192", 192, 28, 192, 3, 1, 1, groups=192, count=2),
    _conv("mbv2.dw192s", 192, 28, 192, 3, 2, 1, groups=192),
    _conv("mbv2.dw384", 384, 14, 384, 3, 1, 1, groups=384, count=4),
    _conv("mbv2.dw576", 576, 14, 576, 3, 1, 1, groups=576, count=2),
    _conv("mbv2.dw960", 960, 7, 960, 3, 1, 1, groups=960, count=3),
    _conv("effnet.dw144s5", 144, 56, 144, 5, 2, 2, groups=144),
    _conv("effnet.dw240k5", 240, 28, 240, 5, 1, 2, groups=240),
    _conv("effnet.dw480k5", 480, 14, 480, 5, 1, 2, groups=480, count=2),
    _conv("effnet.dw672s5", 672, 14, 672, 5, 2, 2, groups=672),
    _conv("effnet.dw1152k5", 1152, 7, 1152, 5, 1, 2, groups=1152, count=3),
]

# GPT-2 (124M) products for 1 (a decoding step), 8 and 64 tokens: attention in/out, MLP
# up/down, the LM head.
GPT2: List[MatmulShape] = [
    MatmulShape(f"{name}.t{m}", m, k, n)
    for m in (1, 8, 64)
    for name, k, n in (("c_attn", 768, 2304), ("attn.c_proj", 768, 768), ("c_fc", 768, 3072),
                       ("mlp.c_proj", 3072, 768), ("lm_head", 768, 50257))
]

# A few shapes for --quick (tests).
QUICK_CONV = [RESNET50[1], RESNET50[22]]
QUICK_DEPTHWISE = [DEPTHWISE[8]]
QUICK_GPT2 = [GPT2[1], GPT2[6]]


def _graded() -> List[ConvShape]:
    """The layers the grader times (grading.cases.PERF_LAYERS), as benchmark shapes."""
    from grading.cases import PERF_LAYERS

    shapes = []
    for name, _batch, c_in, h, _w, c_out, k, stride in PERF_LAYERS:
        pad = (k - 1) // 2
        shapes.append(ConvShape(name, c_in, h - 2 * pad, h - 2 * pad, c_out, k, stride, pad))
    return shapes


# The grader's timed layers (make bench ARGS="--only graded").
GRADED: List[ConvShape] = _graded()
