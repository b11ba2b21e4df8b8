"""Every conv2d kernel path (OCLF_CONV_KERNEL=tiled|cpu|gpu and the automatic choice,
which takes the depthwise kernel where it applies) against torch.nn.functional.conv2d on
random awkward shapes: 1, 7 and 33 channels, odd and non-square sizes, strides,
dilations, groups, depthwise, batches."""
import random

import pytest
import torch
import torch.nn.functional as F
from sweeps import first_of_each_kind

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


DEPTHWISE_CONFIGS = ["dw_rows VW=16 RY=4", "dw_rows VW=8 RY=7", "dw_rows VW=4 RY=1", "dw_rows VW=16 RY=2",
                     "dw_tiled TX=16 TY=8 TZ=1 RY=2", "dw_tiled TX=8 TY=4 TZ=4 RY=1", "dw_tiled TX=32 TY=4 TZ=1 RY=4",
                     "depthwise", "depthwise_cpu"]


@pytest.mark.parametrize("config", first_of_each_kind(DEPTHWISE_CONFIGS))
def test_depthwise_configurations(ocl, monkeypatch, config):
    """Every depthwise kernel and block (reference/depthwise.cl's compiled-in taps, strides and
    dilations; partial vectors and tiles; the end of the input) against torch."""
    monkeypatch.setenv("OCLF_CONV_KERNEL", config)
    rng = random.Random(7)
    torch.manual_seed(0)
    for _ in range(24):
        c, batch = rng.choice([1, 3, 17]), rng.choice([1, 2])
        k_h, k_w = rng.choice([1, 3, 5, 7]), rng.choice([1, 2, 3, 5])
        stride = (rng.choice([1, 2, 3]), rng.choice([1, 2, 3]))
        dilation = (rng.choice([1, 2]), rng.choice([1, 2]))
        h = dilation[0] * (k_h - 1) + 1 + rng.randrange(0, 20)
        w = dilation[1] * (k_w - 1) + 1 + rng.randrange(0, 40)
        x, weight = torch.randn(batch, c, h, w), torch.randn(c, 1, k_h, k_w)
        bias = torch.randn(c) if rng.random() < 0.5 else None
        ref = F.conv2d(x, weight, bias, stride, 0, dilation, c)
        out = ocl.ocl_conv2d(x, weight, bias, stride, dilation, c)
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4,
                                   msg=lambda m: f"{m}\nx {tuple(x.shape)} w {tuple(weight.shape)} s {stride} "
                                   f"d {dilation}")
    # A kernel larger than 7x7 takes the v2 kernels whatever the configuration.
    x, weight = torch.randn(1, 3, 12, 11), torch.randn(3, 1, 9, 8)
    torch.testing.assert_close(ocl.ocl_conv2d(x, weight, None, 1, 1, 3), F.conv2d(x, weight, None, 1, 0, 1, 3),
                               atol=1e-4, rtol=1e-4)


CPU_CONFIGS = ["cpu COV=16 PX=4 KC=7 NS=3", "cpu COV=16 PX=8", "cpu COV=8 PX=12", "cpu COV=4 PX=3",
               "gpu TM=32 TN=32 WM=4 WN=4 TK=16", "gpu TM=128 TN=64 WM=8 WN=4 TK=16",
               "gpu TM=64 TN=64 WM=4 WN=4 TK=32", "wino", "wino TM=32 TN=32 WM=4 WN=4 TK=16"]


@pytest.mark.parametrize("config", first_of_each_kind(CPU_CONFIGS))
def test_block_configurations(ocl, monkeypatch, config):
    """The blocks the tuning candidates of conv2d_cpu and conv2d_gpu use, on awkward shapes."""
    monkeypatch.setenv("OCLF_CONV_KERNEL", config)
    rng = random.Random(99)
    torch.manual_seed(0)
    for _ in range(12):
        x, weight, bias, stride, dilation, groups = random_case(rng)
        if groups == x.shape[1] and weight.shape[0] == groups:
            continue  # depthwise: its own kernels
        ref = F.conv2d(x, weight, bias, stride, 0, dilation, groups)
        torch.testing.assert_close(ocl.ocl_conv2d(x, weight, bias, stride, dilation, groups), ref, atol=1e-4,
                                   rtol=1e-4)


@pytest.mark.parametrize("batch, c_in, h, w, c_out", [(1, 1, 3, 3, 1), (2, 7, 9, 12, 5), (1, 33, 15, 8, 17),
                                                    (1, 64, 30, 30, 70)])
def test_winograd(ocl, monkeypatch, batch, c_in, h, w, c_out):
    """Winograd F(2x2, 3x3): odd output sizes (partial tiles), batches, resident weights, bias."""
    monkeypatch.setenv("OCLF_CONV_KERNEL", "wino")
    torch.manual_seed(0)
    x, weight = torch.randn(batch, c_in, h, w), torch.randn(c_out, c_in, 3, 3) / (9 * c_in) ** 0.5
    bias = torch.randn(c_out)
    ref = F.conv2d(x, weight, bias)
    torch.testing.assert_close(ocl.ocl_conv2d(x, weight, bias), ref, atol=1e-4, rtol=1e-4)
    param = torch.nn.Parameter(weight, requires_grad=False)
    torch.testing.assert_close(ocl.ocl_conv2d(x, param, bias), ref, atol=1e-4, rtol=1e-4)
    assert ocl.last_choice()["config"].startswith("wino")
