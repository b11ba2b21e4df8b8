"""Every conv2d kernel path (OCLF_CONV_KERNEL=tiled|cpu|gpu and the automatic choice,
which takes the depthwise kernel where it applies) against torch.nn.functional.conv2d on
random awkward shapes: 1, 7 and 33 channels, odd and non-square sizes, strides,
dilations, groups, depthwise, batches."""
import random

import pytest
import torch
import torch.nn.functional as F

PATHS = ["", "tiled", "cpu", "gpu"]


def random_case(rng: random.Random):
    groups = rng.choice([1, 1, 1, 2, 3, "dw"])
    cin_g = rng.choice([1, 2, 7, 33]) if groups != "dw" else 1
    cout_g = rng.choice([1, 5, 16, 17, 33]) if groups != "dw" else 1
    if groups == "dw":
        groups = rng.choice([1, 7, 33])
    k_h, k_w = rng.choice([1, 2, 3, 5]), rng.choice([1, 3, 4])
    stride = (rng.choice([1, 2, 3]), rng.choice([1, 2]))
    dilation = (rng.choice([1, 2]), rng.choice([1, 3]))
    h = dilation[0] * (k_h - 1) + 1 + rng.randrange(0, 12)
    w = dilation[1] * (k_w - 1) + 1 + rng.randrange(0, 14)
    batch = rng.choice([1, 2, 3])
    x = torch.randn(batch, cin_g * groups, h, w)
    weight = torch.randn(cout_g * groups, cin_g, k_h, k_w)
    bias = torch.randn(cout_g * groups) if rng.random() < 0.5 else None
    return x, weight, bias, stride, dilation, groups


@pytest.mark.parametrize("path", PATHS)
def test_conv_path_random(ocl, path, monkeypatch):
    monkeypatch.setenv("OCLF_CONV_KERNEL", path)
    rng = random.Random(1234)
    torch.manual_seed(0)
    for _ in range(40):
        x, weight, bias, stride, dilation, groups = random_case(rng)
        ref = F.conv2d(x, weight, bias, stride, 0, dilation, groups)
        out = ocl.ocl_conv2d(x, weight, bias, stride, dilation, groups)
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4,
                                   msg=lambda m: f"{m}\nx {tuple(x.shape)} w {tuple(weight.shape)} "
                                   f"s {stride} d {dilation} g {groups} bias {bias is not None}")


@pytest.mark.parametrize("path", PATHS)
def test_conv_path_resnet_like(ocl, path, monkeypatch):
    """Deep reductions (K of thousands) and split-K on a GPU: 256 channels, 3×3."""
    monkeypatch.setenv("OCLF_CONV_KERNEL", path)
    torch.manual_seed(0)
    x, w, b = torch.randn(1, 256, 9, 9), torch.randn(70, 256, 3, 3) / 48, torch.randn(70)
    torch.testing.assert_close(ocl.ocl_conv2d(x, w, b), F.conv2d(x, w, b), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("stride, dilation", [((1, 1), (1, 1)), ((2, 2), (1, 2)), ((1, 3), (2, 1)), ((2, 1), (1, 1))])
def test_depthwise_wide_rows(ocl, stride, dilation):
    """Rows wider than one vector of outputs (the vector path of the CPU depthwise kernel)."""
    torch.manual_seed(0)
    x, w, b = torch.randn(2, 7, 9, 71), torch.randn(7, 1, 3, 5), torch.randn(7)
    ref = F.conv2d(x, w, b, stride, 0, dilation, 7)
    torch.testing.assert_close(ocl.ocl_conv2d(x, w, b, stride, dilation, 7), ref, atol=1e-4, rtol=1e-4)
