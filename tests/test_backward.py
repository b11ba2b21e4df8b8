"""Gradients on OpenCL: the patched nn.Conv2d and nn.Linear against torch's own float32
gradients, and the direct backward functions (ocl_conv2d_backward_input/_weight/_bias)
against torch.nn.grad, across strides, dilations, paddings, groups and odd sizes.

Errors must stay within atol + rtol·|ref|. The references are float32 too, so the
tolerance covers two different summation orders of the same products."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from utils.patching import opencl_layers

ATOL, RTOL = 2e-4, 2e-4


def assert_grad_close(actual, expected, name):
    torch.testing.assert_close(actual, expected, atol=ATOL, rtol=RTOL, msg=lambda m: f"{name}: {m}")


def gradients(module, x, upstream):
    """The gradients of sum(module(x) * upstream) for x and every parameter, by name."""
    module.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_(True)
    out = module(x)
    (out * upstream).sum().backward()
    grads = {"input": x.grad}
    grads.update({name: p.grad for name, p in module.named_parameters()})
    return out.detach(), grads


def compare_module(module, x):
    torch.manual_seed(1)
    with torch.no_grad():
        upstream = torch.randn_like(module(x))
    ref_out, ref = gradients(module, x, upstream)
    with opencl_layers():
        out, got = gradients(module, x, upstream)
    assert_grad_close(out, ref_out, "output")
    assert got.keys() == ref.keys()
    for name in ref:
        assert got[name] is not None, f"{name} has no gradient"
        assert_grad_close(got[name], ref[name], name)


# (input shape, Conv2d keyword arguments); sizes are deliberately not tile multiples.
CONV_CASES = [
    ((2, 3, 9, 11), dict(in_channels=3, out_channels=4, kernel_size=3)),
    ((1, 1, 1, 1), dict(in_channels=1, out_channels=1, kernel_size=1)),
    ((2, 5, 13, 7), dict(in_channels=5, out_channels=7, kernel_size=(3, 2), stride=(2, 1), padding=(1, 2))),
    ((1, 4, 17, 16), dict(in_channels=4, out_channels=6, kernel_size=3, dilation=(2, 3), padding=2)),
    ((2, 6, 10, 12), dict(in_channels=6, out_channels=9, kernel_size=3, stride=3, groups=3, bias=False)),
    ((2, 8, 15, 15), dict(in_channels=8, out_channels=8, kernel_size=3, padding=1, groups=8)),
    ((1, 8, 16, 13), dict(in_channels=8, out_channels=16, kernel_size=5, stride=2, padding=2, groups=8)),
    ((2, 4, 11, 9), dict(in_channels=4, out_channels=5, kernel_size=4, padding="same")),
    ((1, 3, 12, 10), dict(in_channels=3, out_channels=4, kernel_size=(2, 5), padding="same", dilation=2)),
    ((2, 3, 14, 9), dict(in_channels=3, out_channels=6, kernel_size=3, padding=2, padding_mode="reflect")),
    ((1, 2, 8, 9), dict(in_channels=2, out_channels=3, kernel_size=3, padding=1, padding_mode="circular")),
    ((1, 33, 7, 7), dict(in_channels=33, out_channels=20, kernel_size=1)),
    ((2, 32, 9, 8), dict(in_channels=32, out_channels=24, kernel_size=3, stride=2, padding=1)),
    ((3, 16, 6, 20), dict(in_channels=16, out_channels=32, kernel_size=3, padding="valid", groups=4)),
    ((1, 7, 33, 5), dict(in_channels=7, out_channels=7, kernel_size=(7, 1), stride=(3, 1), dilation=(2, 1))),
]


# torch's own forward warns about a padded copy for 'same' with even kernels.
@pytest.mark.filterwarnings("ignore:Using padding='same':UserWarning")
@pytest.mark.parametrize("shape,kwargs", CONV_CASES, ids=[str(i) for i in range(len(CONV_CASES))])
def test_conv2d_module_gradients(ocl, shape, kwargs):
    torch.manual_seed(0)
    compare_module(nn.Conv2d(**kwargs), torch.randn(shape))


def test_conv2d_unbatched_input_gradients(ocl):
    torch.manual_seed(0)
    compare_module(nn.Conv2d(3, 5, 3, padding=1), torch.randn(3, 8, 7))


@pytest.mark.parametrize(
    "shape,in_f,out_f,bias",
    [((7, 33), 33, 9, True), ((2, 5, 17), 17, 1, False), ((1, 1), 1, 1, True), ((3, 4, 2, 8), 8, 33, True)],
)
def test_linear_gradients(ocl, shape, in_f, out_f, bias):
    torch.manual_seed(0)
    compare_module(nn.Linear(in_f, out_f, bias=bias), torch.randn(shape))


def test_small_network_gradients(ocl):
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False),
        nn.Conv2d(8, 12, 1),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(12, 5),
    )
    compare_module(net, torch.randn(2, 3, 19, 15))


def test_backward_runs_no_torch_convolution(ocl, monkeypatch):
    """Under opencl_layers(), forward and backward of nn.Conv2d never reach torch's convolutions."""
    torch.manual_seed(0)
    conv = nn.Conv2d(4, 6, 3, stride=2, padding=1)
    x = torch.randn(2, 4, 9, 9, requires_grad=True)

    def forbidden(*args, **kwargs):
        raise AssertionError("torch convolution called")

    for owner, name in [(F, "conv2d"), (torch, "conv2d"), (torch.nn.grad, "conv2d_input"),
                        (torch.nn.grad, "conv2d_weight"), (torch.ops.aten, "convolution_backward")]:
        monkeypatch.setattr(owner, name, forbidden)
    with opencl_layers():
        conv(x).square().sum().backward()
    assert ocl.last_kernel_time_ns() > 0
    assert x.grad is not None and conv.weight.grad is not None and conv.bias.grad is not None


def test_linear_backward_runs_no_torch_matmul(ocl, monkeypatch):
    """Under opencl_layers(), forward and backward of nn.Linear never reach torch's matmuls."""
    torch.manual_seed(0)
    linear = nn.Linear(7, 5)
    x = torch.randn(3, 7, requires_grad=True)

    def forbidden(*args, **kwargs):
        raise AssertionError("torch matmul called")

    for owner, name in [(F, "linear"), (torch, "matmul"), (torch, "mm"), (torch, "addmm"), (torch.Tensor, "sum")]:
        monkeypatch.setattr(owner, name, forbidden)
    with opencl_layers():
        linear(x).square().mean().backward()
    assert x.grad is not None and linear.weight.grad is not None and linear.bias.grad is not None


# (x shape, weight shape, stride, dilation, groups) for the direct functions.
DIRECT_CASES = [
    ((2, 3, 9, 11), (4, 3, 3, 2), (1, 1), (1, 1), 1),
    ((2, 6, 13, 10), (8, 3, 3, 3), (2, 3), (2, 1), 2),
    ((1, 8, 17, 17), (8, 1, 3, 3), (2, 2), (1, 1), 8),
    ((3, 32, 15, 15), (40, 32, 3, 3), (1, 1), (1, 1), 1),
    ((2, 33, 20, 21), (17, 33, 5, 3), (3, 2), (2, 2), 1),
    ((1, 1, 1, 1), (1, 1, 1, 1), (1, 1), (1, 1), 1),
    ((4, 16, 40, 40), (16, 16, 1, 1), (1, 1), (1, 1), 1),
]


@pytest.mark.parametrize("variant", ["auto", "direct", "tiled"])
@pytest.mark.parametrize("x_shape,w_shape,stride,dilation,groups", DIRECT_CASES)
def test_direct_backward_functions(ocl, variant, x_shape, w_shape, stride, dilation, groups):
    torch.manual_seed(0)
    x, w = torch.randn(x_shape), torch.randn(w_shape)
    grad_out = torch.randn_like(F.conv2d(x, w, None, stride, 0, dilation, groups))
    ref_input = torch.nn.grad.conv2d_input(x.shape, w, grad_out, stride, 0, dilation, groups)
    ref_weight = torch.nn.grad.conv2d_weight(x, w.shape, grad_out, stride, 0, dilation, groups)
    got_input = ocl.ocl_conv2d_backward_input(grad_out, w, x.shape, stride, dilation, groups, variant=variant)
    got_weight = ocl.ocl_conv2d_backward_weight(x, grad_out, w.shape, stride, dilation, groups, variant=variant)
    assert_grad_close(got_input, ref_input, "grad_input")
    assert_grad_close(got_weight, ref_weight, "grad_weight")
    assert_grad_close(ocl.ocl_conv2d_backward_bias(grad_out), grad_out.sum((0, 2, 3)), "grad_bias")


def test_direct_backward_accepts_non_contiguous(ocl):
    torch.manual_seed(0)
    x = torch.randn(2, 9, 7, 5).transpose(2, 3)  # (2, 9, 5, 7), strided
    w = torch.randn(4, 9, 3, 3)
    grad_out = torch.randn(2, 4, 3, 5, 2)[..., 0]
    torch.testing.assert_close(
        ocl.ocl_conv2d_backward_weight(x, grad_out, w.shape),
        torch.nn.grad.conv2d_weight(x, w.shape, grad_out),
        atol=ATOL, rtol=RTOL,
    )
    torch.testing.assert_close(
        ocl.ocl_conv2d_backward_input(grad_out, w, x.shape),
        torch.nn.grad.conv2d_input(x.shape, w, grad_out),
        atol=ATOL, rtol=RTOL,
    )


def test_direct_backward_bad_arguments(ocl):
    x, w = torch.randn(2, 4, 8, 8), torch.randn(6, 2, 3, 3)
    grad_out = torch.randn(2, 6, 6, 6)
    with pytest.raises(ValueError, match="grad_out must be"):
        ocl.ocl_conv2d_backward_input(torch.randn(2, 6, 5, 6), w, x.shape, groups=2)
    with pytest.raises(ValueError, match="input_shape has 4 channels"):
        ocl.ocl_conv2d_backward_input(grad_out, w, x.shape, groups=1)
    with pytest.raises(TypeError, match="input_shape must be 4 ints"):
        ocl.ocl_conv2d_backward_input(grad_out, w, (2, 4, 8), groups=2)
    with pytest.raises(ValueError, match="weight_shape has 6 output channels"):
        ocl.ocl_conv2d_backward_weight(torch.randn(2, 12, 8, 8), grad_out, (6, 3, 3, 3), groups=4)
    with pytest.raises(TypeError, match="grad_out must be float32"):
        ocl.ocl_conv2d_backward_weight(x, grad_out.double(), w.shape, groups=2)
    with pytest.raises(ValueError, match="stride must be positive"):
        ocl.ocl_conv2d_backward_weight(x, grad_out, w.shape, stride=0, groups=2)
    with pytest.raises(ValueError, match="variant must be one of"):
        ocl.ocl_conv2d_backward_input(grad_out, w, x.shape, groups=2, variant="fast")
    with pytest.raises(ValueError, match="grad_out must be 4-D"):
        ocl.ocl_conv2d_backward_bias(torch.randn(6, 6))


def test_direct_backward_empty_batch(ocl):
    w = torch.randn(3, 2, 3, 3)
    grad_out = torch.randn(0, 3, 4, 4)
    assert ocl.ocl_conv2d_backward_input(grad_out, w, (0, 2, 6, 6)).shape == (0, 2, 6, 6)
    grad_weight = ocl.ocl_conv2d_backward_weight(torch.randn(0, 2, 6, 6), grad_out, w.shape)
    assert torch.equal(grad_weight, torch.zeros(3, 2, 3, 3))
    assert torch.equal(ocl.ocl_conv2d_backward_bias(grad_out), torch.zeros(3))
