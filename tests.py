"""Student-facing correctness checks (make run), in the order of the assignment: Part 1,
ocl_matmul against @; Part 2, ocl_conv2d against torch.nn.functional.conv2d; on awkward
sizes.

Each test id names the case, e.g. test_conv2d_stride[2x1] or test_matmul_shapes[tall].
Results must agree with torch within atol + rtol·|ref|, where atol grows with the
length of the sum behind each output (float32 rounding grows with it too).
"""
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from grading.oracle import (MATMUL_SHAPES, PUBLIC_CONV_SEEDS, assert_matches, base_case, describe_conv, matmul_case,
                            matmul_layouts, random_conv_case)


def ident(value) -> str:
    """A readable test id: 2 -> '2', (2, 1) -> '2x1'."""
    return "x".join(map(str, value)) if isinstance(value, (tuple, list)) else str(value)


def pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def check_conv2d(ocl, x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """ocl_conv2d on the padded x agrees with F.conv2d(x, ..., padding)."""
    expected = F.conv2d(x, weight, bias, stride, padding, dilation, groups)
    p_h, p_w = pair(padding)
    padded = F.pad(x, (p_w, p_w, p_h, p_h))
    actual = ocl.ocl_conv2d(padded, weight, bias, stride, dilation, groups)
    what = describe_conv(x.shape, weight.shape, bias is not None, stride, padding, dilation, groups)
    assert_matches(actual, expected, weight[0].numel(), what)
    return actual


# ---------------------------------------------------------------------------------
# Part 1, matmul: ocl_matmul against @


@pytest.mark.parametrize("name", MATMUL_SHAPES)
def test_matmul_shapes(ocl, name):
    a, b = matmul_case(name)
    assert_matches(ocl.ocl_matmul(a, b), a @ b, b.shape[0], f"a {tuple(a.shape)} @ b {tuple(b.shape)}")


@pytest.mark.parametrize("name", matmul_layouts().keys())
def test_matmul_layouts(ocl, name):
    a, b = matmul_layouts()[name]
    assert not (a.is_contiguous() and b.is_contiguous())
    assert_matches(ocl.ocl_matmul(a, b), a @ b, b.shape[0])


@pytest.mark.parametrize("seed", range(20))
def test_matmul_random_shapes(ocl, seed):
    """Random sizes (1 to 300), leading batch dimensions and transposed layouts together."""
    rng = torch.Generator().manual_seed(seed)
    m, k, n = torch.randint(1, 300, (3,), generator=rng).tolist()
    lead = torch.randint(1, 4, (torch.randint(0, 3, (1,), generator=rng).item(),), generator=rng).tolist()
    a = torch.randn(*lead, m, k, generator=rng)
    b = torch.randn(k, n, generator=rng)
    if seed % 2:
        b = b.t().contiguous().t()
    if seed % 3 == 0:
        a = a.transpose(-1, -2).contiguous().transpose(-1, -2)
    assert_matches(ocl.ocl_matmul(a, b), a @ b, k)


GPT2_SHAPES = {
    "c_attn": (768, 2304),
    "c_fc": (768, 3072),
    "c_proj_mlp": (3072, 768),
    "c_proj_attn": (768, 768),
}


@pytest.mark.parametrize("k, n", GPT2_SHAPES.values(), ids=GPT2_SHAPES.keys())
def test_matmul_gpt2(ocl, k, n):
    torch.manual_seed(0)
    a, b = torch.randn(8, k), torch.randn(k, n)
    assert_matches(ocl.ocl_matmul(a, b), a @ b, k)


def test_matmul_gpt2_batched_transposed_weight(ocl):
    """GPT-2's attention projection as nn.Linear calls it: x (B, T, C) @ weight.t()."""
    torch.manual_seed(0)
    x, weight = torch.randn(2, 8, 768), torch.randn(2304, 768)
    assert_matches(ocl.ocl_matmul(x, weight.t()), x @ weight.t(), 768)


def test_matmul_gpt2_lm_head(ocl):
    torch.manual_seed(0)
    a, b = torch.randn(8, 768), torch.randn(768, 50257)
    assert_matches(ocl.ocl_matmul(a, b), a @ b, 768)


EMPTY_MATMULS = {
    "M=0": ((0, 5), (5, 3)),
    "K=0": ((4, 0), (0, 3)),
    "N=0": ((4, 5), (5, 0)),
    "batch=0": ((0, 4, 5), (5, 3)),
    "batched_K=0": ((2, 4, 0), (0, 3)),
    "all_zero": ((0, 0), (0, 0)),
}


@pytest.mark.parametrize("shapes", EMPTY_MATMULS.values(), ids=EMPTY_MATMULS.keys())
def test_matmul_empty(ocl, shapes):
    a, b = torch.ones(shapes[0]), torch.ones(shapes[1])
    torch.testing.assert_close(ocl.ocl_matmul(a, b), a @ b, atol=0, rtol=0)


def test_matmul_repeatable(ocl):
    torch.manual_seed(0)
    a, b = torch.randn(7, 33), torch.randn(33, 9)
    assert torch.equal(ocl.ocl_matmul(a, b), ocl.ocl_matmul(a, b))


def test_matmul_exact_small_integers(ocl):
    """Small integers multiply exactly in float32: catches any off-by-one indexing."""
    a = torch.arange(7 * 33, dtype=torch.float32).reshape(7, 33) % 5
    b = torch.arange(33 * 9, dtype=torch.float32).reshape(33, 9) % 3
    torch.testing.assert_close(ocl.ocl_matmul(a, b), a @ b, atol=0, rtol=0)


# ---------------------------------------------------------------------------------
# Part 2, conv2d: one parameter at a time around a small odd, non-square base case
# x (3, 5, 13, 11), weight (7, 5, 3, 3), bias (7,)


@pytest.mark.parametrize("padding", [0, 1, 2, 3, (1, 0), (0, 2), (2, 1)], ids=ident)
def test_conv2d_padding(ocl, padding):
    x, w, b = base_case()
    check_conv2d(ocl, x, w, b, padding=padding)


@pytest.mark.parametrize(
    "pad", [(1, 0, 0, 0), (0, 2, 1, 0), (0, 0, 0, 3), (2, 1, 3, 0)], ids=lambda p: "lrtb=" + "-".join(map(str, p))
)
def test_conv2d_uneven_padding(ocl, pad):
    """Padding F.pad(x, (left, right, top, bottom)) that F.conv2d cannot express itself."""
    x, w, b = base_case()
    padded = F.pad(x, pad)
    assert_matches(ocl.ocl_conv2d(padded, w, b), F.conv2d(padded, w, b), w[0].numel(),
                   describe_conv(padded.shape, w.shape, True))


@pytest.mark.parametrize("stride", [1, 2, 3, (2, 1), (1, 3), (4, 5)], ids=ident)
def test_conv2d_stride(ocl, stride):
    x, w, b = base_case()
    check_conv2d(ocl, x, w, b, stride=stride, padding=1)


@pytest.mark.parametrize("dilation", [1, 2, 3, (2, 3), (3, 1)], ids=ident)
def test_conv2d_dilation(ocl, dilation):
    x, w, b = base_case()
    check_conv2d(ocl, x, w, b, dilation=dilation, padding=1)


@pytest.mark.parametrize("batch", [1, 3, 8])
def test_conv2d_batch(ocl, batch):
    x, w, b = base_case(batch=batch)
    check_conv2d(ocl, x, w, b, padding=1)


GROUP_CASES = [(4, 6, 2), (6, 9, 3), (8, 8, 8), (7, 7, 7), (5, 10, 5), (33, 33, 33), (32, 64, 4), (1, 7, 1)]


@pytest.mark.parametrize("c_in, c_out, groups", GROUP_CASES,
                         ids=[f"cin{c_in}_cout{c_out}_groups{g}" for c_in, c_out, g in GROUP_CASES])
def test_conv2d_groups(ocl, c_in, c_out, groups):
    """Grouped and depthwise (groups = C_in, channel multiplier 1 or 2)."""
    x, w, b = base_case(c_in=c_in, c_out=c_out, groups=groups)
    check_conv2d(ocl, x, w, b, padding=1, groups=groups)


@pytest.mark.parametrize("c_in", [1, 7, 33])
@pytest.mark.parametrize("c_out", [1, 7, 33])
def test_conv2d_channels(ocl, c_in, c_out):
    """Channel counts that are not multiples of the tile."""
    x, w, b = base_case(batch=2, c_in=c_in, c_out=c_out)
    check_conv2d(ocl, x, w, b, padding=1)


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_conv2d_bias(ocl, bias):
    x, w, b = base_case(bias=bias)
    check_conv2d(ocl, x, w, b)


KERNEL_CASES = {
    "1x1": dict(kernel=(1, 1)),
    "1x1_stride2": dict(kernel=(1, 1), stride=2),
    "3x3": dict(kernel=(3, 3), padding=1),
    "5x3": dict(kernel=(5, 3), padding=(2, 1)),
    "1x7": dict(kernel=(1, 7), padding=(0, 3)),
    "2x2_even": dict(kernel=(2, 2)),
    "7x7_stride2": dict(kernel=(7, 7), stride=2, padding=3, size=(31, 29)),
    "whole_input": dict(kernel=(13, 11)),
}


@pytest.mark.parametrize("case", KERNEL_CASES.values(), ids=KERNEL_CASES.keys())
def test_conv2d_kernel_sizes(ocl, case):
    case = dict(case)
    x, w, b = base_case(kernel=case.pop("kernel"), size=case.pop("size", (13, 11)))
    check_conv2d(ocl, x, w, b, **case)


SIZE_CASES = [(1, 1), (1, 9), (9, 1), (2, 3), (17, 5), (16, 16), (33, 65)]


@pytest.mark.parametrize("size", SIZE_CASES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_conv2d_input_sizes(ocl, size):
    """Odd, non-square and tiny inputs (padding keeps a 3x3 kernel inside)."""
    x, w, b = base_case(size=size)
    check_conv2d(ocl, x, w, b, padding=1)


MIXED_CASES = {
    # name: (batch, c_in, c_out, size, kernel, stride, padding, dilation, groups)
    "resnet_stem": (1, 3, 16, (32, 30), (7, 7), 2, 3, 1, 1),
    "resnet_downsample": (2, 16, 33, (9, 9), (1, 1), 2, 0, 1, 1),
    "mobilenet_dw_stride2": (2, 24, 24, (15, 17), (3, 3), 2, 1, 1, 24),
    "grouped_dilated_strided": (3, 6, 9, (19, 14), (3, 2), (2, 3), (2, 1), (2, 2), 3),
    "wide_reduction": (1, 130, 17, (6, 7), (3, 3), 1, 1, 1, 1),
    "depthwise_multiplier": (1, 7, 21, (8, 12), (5, 5), 1, 2, 1, 7),
}


@pytest.mark.parametrize("case", MIXED_CASES.values(), ids=MIXED_CASES.keys())
def test_conv2d_mixed(ocl, case):
    batch, c_in, c_out, size, kernel, stride, padding, dilation, groups = case
    x, w, b = base_case(batch, c_in, c_out, size, kernel, groups)
    check_conv2d(ocl, x, w, b, stride, padding, dilation, groups)


RESNET50_SHAPES = {
    # name: (batch, c_in, c_out, size, kernel, stride, padding)
    "stem_224": (2, 3, 64, (224, 224), (7, 7), 2, 3),
    "layer1_3x3": (2, 64, 64, (56, 56), (3, 3), 1, 1),
    "layer2_downsample_3x3": (2, 128, 128, (56, 56), (3, 3), 2, 1),
    "layer4_1x1": (2, 2048, 512, (7, 7), (1, 1), 1, 0),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", RESNET50_SHAPES.values(), ids=RESNET50_SHAPES.keys())
def test_conv2d_resnet50_shapes(ocl, case):
    batch, c_in, c_out, size, kernel, stride, padding = case
    x, w, b = base_case(batch, c_in, c_out, size, kernel)
    check_conv2d(ocl, x, w, b, stride, padding)


@pytest.mark.parametrize("seed", PUBLIC_CONV_SEEDS)
def test_conv2d_random_configs(ocl, seed):
    """Every parameter drawn together (grading.oracle.random_conv_config; the grader runs the
    same configurations)."""
    x, w, b, c = random_conv_case(seed)
    check_conv2d(ocl, x, w, b, c["stride"], c["padding"], c["dilation"], c["groups"])


def test_conv2d_non_contiguous(ocl):
    x, w, b = base_case(size=(12, 12))
    x_cl = x.to(memory_format=torch.channels_last)
    x_t = x.transpose(2, 3)
    assert not x_cl.is_contiguous() and not x_t.is_contiguous()
    check_conv2d(ocl, x_cl, w, b, padding=1)
    check_conv2d(ocl, x_t, w, b, padding=1)
    check_conv2d(ocl, x, w.transpose(2, 3), b[:], padding=1)


def test_conv2d_empty_batch(ocl):
    x, w, b = base_case(batch=0)
    check_conv2d(ocl, x, w, b, padding=1)


def test_conv2d_repeatable(ocl):
    """The same call twice gives the same bits (no stale or uninitialised memory)."""
    x, w, b = base_case()
    assert torch.equal(ocl.ocl_conv2d(x, w, b), ocl.ocl_conv2d(x, w, b))


# ---------------------------------------------------------------------------------
# conv2d through utils.conv2d_forward, the nn.Conv2d.forward drop-in

FORWARD_CASES = {
    "pad_int": dict(padding=2),
    "pad_tuple": dict(padding=(1, 2)),
    "same": dict(padding="same"),
    "same_even_kernel_dilated": dict(padding="same", kernel_size=(4, 2), dilation=(1, 3)),
    "valid": dict(padding="valid"),
    "reflect": dict(padding=1, padding_mode="reflect"),
    "replicate": dict(padding=(2, 1), padding_mode="replicate"),
    "circular": dict(padding=1, padding_mode="circular"),
    "stride2_groups": dict(padding=1, stride=2, groups=3),
    "no_bias": dict(padding=1, bias=False),
}


@pytest.mark.parametrize("kwargs", FORWARD_CASES.values(), ids=FORWARD_CASES.keys())
def test_conv2d_forward(ocl, kwargs):
    from utils.conv2d_forward import conv2d_forward  # here: it needs the built extension, as ocl does

    kwargs = {"kernel_size": 3, **kwargs}
    torch.manual_seed(0)
    conv = nn.Conv2d(6, 9, **kwargs).eval()
    x = torch.randn(2, 6, 11, 10)
    with torch.no_grad():
        with warnings.catch_warnings():  # torch notes that 'same' with an even kernel copies the input
            warnings.simplefilter("ignore", UserWarning)
            expected = conv(x)
        actual = conv2d_forward(conv, x)
    assert_matches(actual, expected, conv.weight[0].numel())
