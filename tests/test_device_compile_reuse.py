"""Compiled graphs whose buffers Inductor reuses for new values: the device keeps buffers
derived from a tensor (a convolution's packed weights, csrc/aten/derived.h) while its version
and its storage's writes are unchanged, so a generated kernel's write must count as one.

ResNet's bottleneck in inference: each 1×1 convolution's batch norm folds into its weights,
computed in the graph (compile/passes.py); the first one's folded weights (64×256) are dead
when the third one's (256×64, as many bytes) are made, and Inductor writes those into the
same buffer under a new tensor, whose version counter starts again. The third convolution
then found the packing of the first one's weights: 150 % off, in every call and replay."""
import copy

import pytest
import torch
from torch import nn

from compile_checks import fresh_compile


@pytest.fixture
def device(opencl_device, monkeypatch):
    yield from fresh_compile(opencl_device, monkeypatch)


def bottleneck(channels: int, inner: int) -> nn.Module:
    torch.manual_seed(0)
    block = nn.Sequential(nn.Conv2d(channels, inner, 1, bias=False), nn.BatchNorm2d(inner), nn.ReLU(),
                          nn.Conv2d(inner, inner, 3, padding=1, bias=False), nn.BatchNorm2d(inner), nn.ReLU(),
                          nn.Conv2d(inner, channels, 1, bias=False), nn.BatchNorm2d(channels))
    for bn in (block[1], block[4], block[7]):  # statistics of a trained network, not 0 and 1
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
        bn.weight.data.uniform_(0.5, 1.5)
        bn.bias.data.uniform_(-1, 1)
    return block.eval()


@pytest.mark.parametrize("channels, inner, size", [(256, 64, 16), (64, 16, 20)])
def test_folded_weights_in_a_reused_buffer(device, channels, inner, size):
    block = bottleneck(channels, inner)
    x = torch.randn(2, channels, size, size)
    with torch.no_grad():
        ref = copy.deepcopy(block).double()(x.double())
        compiled = torch.compile(copy.deepcopy(block).to("opencl"))
        for call in range(3):  # as written, recorded, replayed
            out = compiled(x.to("opencl")).cpu().double()
            error = ((out - ref).abs().max() / ref.abs().max()).item()
            assert error < 1e-5, f"call {call}: {error:.2e} off float64"
