"""Transposed convolutions (1-D, 2-D, 3-D), 3-D convolutions, 3-D pooling and adaptive max
pooling on the opencl device against torch on the CPU, forward and backward (gradients of
sum(output · R) for a fixed random R): strides, padding, output padding, dilation, groups,
odd sizes; each of OCLF_DEVICE_CONV's paths; weights changed between calls. LP pooling (wrong before: relu turned its NaN
windows into zeros) and the KL divergence loss. OCLF_FALLBACK=error: each runs natively but
where a test says otherwise."""
import copy

import pytest
import torch
import torch.nn.functional as F

ATOL, RTOL = 1e-4, 1e-4


@pytest.fixture(autouse=True)
def native_only(opencl_device, monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "error")


@pytest.fixture(params=["auto", "gpu", "direct"])
def conv_mode(request, monkeypatch):
    monkeypatch.setenv("OCLF_DEVICE_CONV", request.param)
    return request.param


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed + sum(shape)))


def check(fn, *inputs, atol=ATOL, rtol=RTOL):
    """fn on the CPU and on the device: outputs and every float input's gradient agree (NaN
    where the CPU has NaN)."""
    results = []
    for device in ("cpu", "opencl"):
        xs = [t.detach().clone().to(device).requires_grad_(t.is_floating_point()) for t in inputs]
        y = fn(*xs)
        weights = torch.randn(y.shape, generator=torch.Generator().manual_seed(1)).to(device)
        (y * weights).sum().backward()
        results.append([y] + [x.grad for x in xs if x.requires_grad])
    for got, ref in zip(results[1], results[0]):
        torch.testing.assert_close(got.detach().cpu(), ref.detach(), atol=atol, rtol=rtol, equal_nan=True)


# (input shape, weight shape, keyword arguments) of F.conv_transpose1d/2d/3d.
TRANSPOSED = [
    ((2, 4, 7), (4, 3, 3), dict()),
    ((2, 4, 7), (4, 2, 5), dict(stride=3, padding=2, output_padding=1, groups=2)),
    ((1, 3, 9), (3, 5, 2), dict(stride=2, dilation=3, output_padding=2)),  # output_padding ≥ stride
    ((2, 6, 5, 7), (6, 4, 3, 3), dict(stride=2, padding=1, output_padding=1)),
    ((2, 6, 5, 7), (6, 2, 3, 2), dict(stride=(2, 3), padding=(1, 0), output_padding=(0, 2), groups=3)),
    ((2, 4, 6, 5), (4, 3, 3, 3), dict(dilation=2, padding=3)),  # padding past the kernel's reach
    ((1, 4, 4, 4), (4, 3, 1, 1), dict(stride=2)),
    ((3, 5, 5, 6), (5, 2, 4, 4), dict(stride=3, padding=1)),  # stride² > 4
    ((2, 4, 3, 4, 5), (4, 3, 3, 2, 3), dict(stride=(2, 1, 2), padding=1, output_padding=(1, 0, 1))),
    ((1, 4, 3, 3, 4), (4, 1, 2, 3, 3), dict(groups=4, dilation=(2, 1, 1), padding=(1, 1, 0))),
]


@pytest.mark.parametrize("x_shape, w_shape, kw", TRANSPOSED)
def test_transposed_convolution(x_shape, w_shape, kw, conv_mode):
    fn = {3: F.conv_transpose1d, 4: F.conv_transpose2d, 5: F.conv_transpose3d}[len(x_shape)]
    bias = randn(w_shape[1] * kw.get("groups", 1), seed=2)
    check(lambda x, w, b: fn(x, w, b, **kw), randn(*x_shape), randn(*w_shape, seed=1), bias)


CONV3D = [
    ((2, 3, 5, 6, 7), (4, 3, 3, 3, 3), dict(padding=1)),
    ((1, 4, 7, 5, 6), (6, 2, 2, 3, 1), dict(stride=(2, 1, 3), padding=(1, 1, 0), groups=2)),
    ((2, 2, 6, 6, 5), (3, 2, 3, 2, 2), dict(stride=2, dilation=(2, 1, 2))),
    ((2, 4, 3, 4, 4), (4, 1, 3, 3, 3), dict(padding=2, groups=4)),  # depthwise, padding past the reach
    ((1, 3, 4, 5, 5), (2, 3, 1, 1, 1), dict(stride=(1, 2, 2))),
]


@pytest.mark.parametrize("x_shape, w_shape, kw", CONV3D)
def test_conv3d(x_shape, w_shape, kw, conv_mode):
    check(lambda x, w, b: F.conv3d(x, w, b, **kw), randn(*x_shape), randn(*w_shape, seed=1), randn(w_shape[0]))


def test_conv_modules_and_unbatched_input():
    # nn modules on unbatched inputs: (C, D, H, W) for the 3-D ones, (C, H, W) for the 2-D one.
    x = randn(3, 5, 6, 7)
    torch.manual_seed(0)
    for module, inputs in ((torch.nn.Conv3d(3, 4, 3, padding="same"), x),
                           (torch.nn.ConvTranspose3d(3, 2, 3, stride=2), x),
                           (torch.nn.ConvTranspose2d(5, 3, (2, 3), stride=(1, 2), output_padding=(0, 1)), x[0])):
        check(lambda t, m=module: (copy.deepcopy(m).to(t.device))(t), inputs)


def test_convolutions_see_their_weight_change_between_calls():
    # An optimizer step changes a weight in place: a copy kept with it (CPUs' packed weights)
    # must be made again. conv1d reaches the device through views of the weight that count
    # versions of their own (LazyConv1d's materialised weights were read stale).
    for fn, x, w in ((F.conv1d, randn(2, 4, 9), randn(5, 4, 3)), (F.conv2d, randn(2, 4, 1, 9), randn(5, 4, 1, 3)),
                     (F.conv2d, randn(2, 4, 6, 9), randn(5, 4, 3, 3))):
        dx, dw = x.to("opencl"), w.to("opencl")
        fn(dx, dw)
        with torch.no_grad():
            dw.mul_(-2)
        torch.testing.assert_close(fn(dx, dw).cpu(), fn(x, w * -2), atol=ATOL, rtol=RTOL)


POOL3D = [
    lambda x: F.max_pool3d(x, 3, 2, 1),
    lambda x: F.max_pool3d(x, (2, 3, 2), ceil_mode=True),
    lambda x: F.max_pool3d(x, 3, 1, 1, dilation=(1, 2, 2)),
    lambda x: F.avg_pool3d(x, 3, 2, 1),
    lambda x: F.avg_pool3d(x, (3, 2, 3), (2, 1, 2), (1, 1, 0), ceil_mode=True, count_include_pad=False),
    lambda x: F.avg_pool3d(x, 2, divisor_override=3),
    lambda x: F.adaptive_avg_pool3d(x, (2, 3, 4)),
    lambda x: F.adaptive_avg_pool3d(x, 1),
    lambda x: F.adaptive_max_pool3d(x, (3, 2, 5)),
    lambda x: F.adaptive_max_pool3d(x, (7, 1, 9)),  # more outputs than inputs along some axes
    lambda x: F.adaptive_max_pool2d(x[:, 0], (4, 3)),
    lambda x: F.adaptive_max_pool2d(x[0, 0], 2),  # (C, H, W)
    lambda x: F.adaptive_max_pool1d(x[:, 0, 0], 3),
]


@pytest.mark.parametrize("fn", POOL3D)
def test_pooling_3d_and_adaptive_max(fn):
    check(fn, randn(2, 3, 5, 6, 7))


def test_max_pool3d_and_adaptive_max_indices_on_ties_and_nans():
    # As torch on the CPU: the first of equal values, a window's last NaN.
    x = torch.randint(0, 3, (2, 2, 5, 6, 5)).float()
    x[0, 0, 1:3, 2:4, 1:3] = float("nan")
    x[1, 1, 2, 3, 4] = float("nan")
    for pool in (lambda t: F.max_pool3d(t, 3, 2, 1, return_indices=True),
                 lambda t: F.max_pool3d(t, 2, dilation=2, return_indices=True),
                 lambda t: F.adaptive_max_pool3d(t, (2, 4, 3), return_indices=True)):
        (y, i), (dy, di) = pool(x), pool(x.to("opencl"))
        assert torch.equal(di.cpu(), i)
        torch.testing.assert_close(dy.cpu(), y, equal_nan=True)


def test_relu_clamp_maximum_and_minimum_keep_nans():
    # LP pooling's NaN windows went through relu as zeros: NaN inputs stay NaN, as torch.
    x = torch.tensor([float("nan"), -1.0, 0.0, 2.0, float("-inf"), float("inf")])
    y = torch.tensor([1.0, float("nan"), -3.0, 5.0, 0.0, float("nan")])
    for fn in (torch.relu, lambda t: t.clamp(-0.5, 0.5), lambda t: t.clamp_min(0), lambda t: t.clamp_max(0),
               lambda t: torch.maximum(t, y.to(t.device)), lambda t: torch.minimum(t, y.to(t.device)),
               F.relu6, F.hardtanh):
        torch.testing.assert_close(fn(x.to("opencl")).cpu(), fn(x), equal_nan=True)


@pytest.mark.parametrize("norm_type", [1.5, 2.0, 3.0])
@pytest.mark.parametrize("dims", [1, 2, 3])
def test_lp_pooling(norm_type, dims, monkeypatch):
    # Negative inputs with a fractional norm give NaN windows, as on the CPU. (Its gradient
    # takes sgn, which runs on the CPU.)
    monkeypatch.setenv("OCLF_FALLBACK", "silent")
    fn = {1: F.lp_pool1d, 2: F.lp_pool2d, 3: F.lp_pool3d}[dims]
    x = randn(2, 3, *[7, 6, 5][:dims])
    ref = fn(x, norm_type, 2, 2)
    torch.testing.assert_close(fn(x.to("opencl"), norm_type, 2, 2).cpu(), ref, atol=ATOL, rtol=RTOL, equal_nan=True)
    check(lambda t: fn(t, norm_type, 3, 2, ceil_mode=True), x.abs() + 0.1)


@pytest.mark.parametrize("reduction", ["mean", "sum", "batchmean", "none"])
@pytest.mark.parametrize("log_target", [False, True])
@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides the total loss")
def test_kl_div(reduction, log_target, monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "silent")  # xlogy runs on the CPU
    inp = F.log_softmax(randn(6, 7), 1)
    target = F.softmax(randn(6, 7, seed=1), 1)
    if log_target:
        target = target.log()
    else:
        target[0, :3] = 0  # zero probabilities: 0·log 0 = 0
    check(lambda i, t: F.kl_div(i, t, reduction=reduction, log_target=log_target), inp, target)
    check(lambda i, t: F.kl_div(i, t, reduction=reduction, log_target=log_target), inp[0, 0], target[1, 1])
