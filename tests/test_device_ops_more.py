"""Operators public programs meet, native on the opencl device (OCLF_FALLBACK=error, so a CPU
fallback fails): ELU (and CELU, SELU), softplus, log-sigmoid, mish, the shrinks, threshold, GLU,
PReLU; dot/vdot, xlogy, sgn; reflection and replication padding (1-D to 3-D); group norm's
backward; fractional max pooling; a two-part cat at any strides in one launch. Each against
torch on the CPU (tests/device_checks.py): outputs and the gradients of sum(output · R) (R
fixed, random) on awkward shapes (0-d, empty, odd sizes, non-contiguous views, broadcasting),
float64 on the device against float64 on the CPU where float32 drifts, 16-bit dtypes, NaN and
infinities, torch's errors. The losses: test_device_losses.py; the kernels under Oclgrind:
test_device_oclgrind.py."""
import pytest
import torch
import torch.nn.functional as F

from device_checks import ATOL, RTOL, check, fallback_allowed, randn


@pytest.fixture(autouse=True)
def native_only(opencl_device, monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "error")


# ---- activations -----------------------------------------------------------------------------

ACTIVATIONS = {
    "elu": lambda x: F.elu(x, alpha=0.7),
    "elu_inplace": lambda x: F.elu(x * 1, alpha=1.3, inplace=True),  # its backward reads the result
    "celu": lambda x: F.celu(x, alpha=1.7),
    "selu": F.selu,
    "softplus": lambda x: F.softplus(x, beta=2, threshold=3),
    "logsigmoid": F.logsigmoid,
    "mish": F.mish,
    "hardshrink": lambda x: F.hardshrink(x, 0.4),
    "softshrink": lambda x: F.softshrink(x, 0.4),
    "threshold": lambda x: F.threshold(x, 0.1, -2.0),
    "prelu": lambda x: F.prelu(x, torch.tensor([0.3], device=x.device, dtype=x.dtype)),
}
# Views the operators see: 0-d, empty, odd, transposed, strided.
VIEWS = {
    "0-d": lambda x: x[0, 0, 0],
    "empty": lambda x: x[:, :0],
    "odd": lambda x: x,
    "transposed": lambda x: x[0].t(),
    "strided": lambda x: x[:, ::2, 1:],
}


@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activations(name, view):
    fn, take = ACTIVATIONS[name], VIEWS[view]
    check(lambda x: fn(take(x)), randn(3, 7, 5) * 3)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activations_in_float64_and_at_special_values(name):
    fn = ACTIVATIONS[name]
    check(fn, randn(4, 9, dtype=torch.float64) * 4, atol=1e-12, rtol=1e-10)
    special = torch.tensor([float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 100.0, -100.0, 1e-3, -1e-3])
    torch.testing.assert_close(fn(special.to("opencl")).cpu(), fn(special), equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_activations_in_16_bits(dtype):
    x = randn(5, 11) * 3
    for name, fn in ACTIVATIONS.items():
        got = fn(x.to(dtype).to("opencl"))
        assert got.dtype == dtype, name
        torch.testing.assert_close(got.cpu().float(), fn(x.to(dtype)).float(), atol=2e-2, rtol=2e-2, msg=name)


def test_activation_forms_and_modules():
    x = randn(6, 8)
    # in-place and out= forms
    for fn_, args in ((torch.nn.functional.elu_, (0.5,)), (torch.nn.functional.threshold_, (0.2, 7.0))):
        ref, dev = x.clone(), x.to("opencl")
        fn_(ref, *args)
        fn_(dev, *args)
        torch.testing.assert_close(dev.cpu(), ref)
    for op, args in ((torch.ops.aten.softplus.out, (1.5, 10)), (torch.ops.aten.hardshrink.out, (0.3,)),
                     (torch.ops.aten.mish.out, ()), (torch.ops.aten.elu.out, (1.0, 1.0, 1.0))):
        out = torch.empty(6, 8, device="opencl")
        op(x.to("opencl"), *args, out=out)
        torch.testing.assert_close(out.cpu(), op(x, *args, out=torch.empty(6, 8)))
    # integers: threshold takes them
    xi = torch.arange(-5, 6)
    torch.testing.assert_close(F.threshold(xi.to("opencl"), 1, 9).cpu(), F.threshold(xi, 1, 9))
    # modules with parameters: PReLU per channel, GLU over a dimension
    torch.manual_seed(0)
    for module in (torch.nn.PReLU(6), torch.nn.PReLU(), torch.nn.GLU(1), torch.nn.CELU(0.5),
                   torch.nn.Softplus(0.5, 4), torch.nn.Mish(), torch.nn.Tanhshrink(), torch.nn.SiLU()):
        check(lambda t, m=module: m.to(t.device)(t), randn(3, 6, 4))
    check(lambda t, w: F.prelu(t, w), randn(2, 5, 3, 4), torch.rand(5))
    check(lambda t, w: F.prelu(t, w), randn(5), torch.rand(1))  # a 1-D input: one weight


def test_elu_and_softshrink_errors():
    x = randn(4).to("opencl")
    with pytest.raises(RuntimeError, match="lambda must be greater or equal to 0"):
        F.softshrink(x, -1.0)
    y = F.elu(x.clone().requires_grad_() * 1, alpha=-1.0, inplace=True)
    with pytest.raises(RuntimeError, match="negative slope"):
        y.sum().backward()


@pytest.mark.parametrize("dim, shape", [(-1, (3, 8)), (0, (6, 5)), (1, (2, 4, 3)), (0, (2,))])
def test_glu(dim, shape):
    check(lambda x: F.glu(x, dim), randn(*shape))
    check(lambda x: F.glu(x.transpose(0, -1), dim), randn(*shape[::-1]))  # non-contiguous halves


def test_glu_errors():
    with pytest.raises(RuntimeError, match="Halving dimension must be even"):
        F.glu(randn(3, 5).to("opencl"))
    with pytest.raises(RuntimeError, match="does not support scalars"):
        torch.ops.aten.glu(torch.tensor(1.0, device="opencl"), 0)


# ---- elementwise math and dot -----------------------------------------------------------------

def test_xlogy_and_xlog1py():
    x = torch.tensor([0.0, 0.0, 1.5, -2.0, 3.0, float("nan"), 0.0])
    y = torch.tensor([0.0, float("nan"), 2.0, 0.5, -1.0, 1.0, float("inf")])
    for fn in (torch.xlogy, torch.special.xlog1py):
        torch.testing.assert_close(fn(x.to("opencl"), y.to("opencl")).cpu(), fn(x, y), equal_nan=True)
        torch.testing.assert_close(fn(2.0, y.to("opencl")).cpu(), fn(2.0, y), equal_nan=True)
        torch.testing.assert_close(fn(x.to("opencl"), 3.0).cpu(), fn(x, 3.0), equal_nan=True)
    check(torch.xlogy, randn(4, 1, 5), randn(3, 1).abs() + 0.1)  # broadcast, and both gradients
    xi = torch.arange(6).view(2, 3)
    torch.testing.assert_close(torch.xlogy(xi.to("opencl"), xi.to("opencl")).cpu(), torch.xlogy(xi, xi))
    ref, dev = randn(5), randn(5).to("opencl")
    ref.xlogy_(2.5)
    dev.xlogy_(2.5)
    torch.testing.assert_close(dev.cpu(), ref)


def test_sgn():
    for x in (randn(3, 5), torch.tensor([0.0, -0.0, float("nan"), -3.0]), torch.arange(-3, 4),
              torch.tensor(-2.0)):
        torch.testing.assert_close(torch.sgn(x.to("opencl")).cpu(), torch.sgn(x), equal_nan=True)
    check(lambda x: torch.sgn(x) * x, randn(7))


@pytest.mark.parametrize("n", [0, 1, 33])
def test_dot_and_vdot(n):
    check(torch.dot, randn(n), randn(n, seed=1))
    check(torch.vdot, randn(2 * n)[::2], randn(n, seed=1))  # a strided vector
    check(torch.dot, randn(n, dtype=torch.float64), randn(n, seed=1, dtype=torch.float64), atol=1e-12, rtol=1e-12)
    a, b = torch.arange(n, dtype=torch.int32), torch.arange(n, dtype=torch.int32) - 5
    got = torch.dot(a.to("opencl"), b.to("opencl"))
    assert got.dtype == torch.int32 and got.item() == torch.dot(a, b).item()
    out = torch.empty((), device="opencl")
    torch.dot(randn(n).to("opencl"), randn(n, seed=1).to("opencl"), out=out)
    torch.testing.assert_close(out.cpu(), torch.dot(randn(n), randn(n, seed=1)), atol=ATOL, rtol=RTOL)


def test_dot_errors():
    a = randn(4).to("opencl")
    with pytest.raises(RuntimeError, match="1D tensors expected"):
        torch.dot(a.view(2, 2), a)
    with pytest.raises(RuntimeError, match="same dtype"):
        torch.dot(a, a.double())
    with pytest.raises(RuntimeError, match="inconsistent tensor size"):
        torch.dot(a, a[:3])


# ---- padding, group norm, fractional max pooling ------------------------------------------------

PADS = [
    ((2, 3, 7), (2, 3)),
    ((3, 9), (0, 4)),  # unbatched 1-D
    ((2, 3, 5, 6), (1, 2, 3, 0)),
    ((3, 5, 6), (-1, 2, 2, -2)),  # unbatched 2-D, cropping
    ((1, 2, 4, 5, 3), (1, 2, 0, 3, 2, 1)),
    ((2, 4, 3, 3), (1, 1, 2, 0, 1, 1)),  # unbatched 3-D
    ((0, 3, 4, 5), (1, 1, 1, 1)),  # an empty batch
]


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("shape, pad", PADS)
def test_padding(mode, shape, pad):
    check(lambda x: F.pad(x, pad, mode=mode), randn(*shape))
    check(lambda x: F.pad(x.transpose(-1, -2), pad, mode=mode), randn(*shape[:-2], shape[-1], shape[-2]))
    check(lambda x: F.pad(x, pad, mode=mode), randn(*shape, dtype=torch.float64), atol=1e-12, rtol=1e-12)
    for x in (torch.arange(int(torch.Size(shape).numel())).view(shape), randn(*shape).half()):
        torch.testing.assert_close(F.pad(x.to("opencl"), pad, mode=mode).cpu(), F.pad(x, pad, mode=mode))


def test_padding_edges_and_errors():
    # replication across a large padding: every output of the edge adds to it
    check(lambda x: F.pad(x, (9, 11), mode="replicate"), randn(2, 3, 2))
    check(lambda x: F.pad(x, (0, 0, 4, 3), mode="replicate"), randn(1, 2, 1, 3))
    with pytest.raises(RuntimeError, match="Padding size should be less than"):
        F.pad(randn(1, 2, 3).to("opencl"), (3, 0), mode="reflect")
    with pytest.raises(RuntimeError, match="too small"):
        F.pad(randn(1, 2, 3).to("opencl"), (-2, -2), mode="replicate")
    with pytest.raises(RuntimeError, match="non-zero dimensions"):
        torch.ops.aten.reflection_pad2d(torch.empty(2, 0, 3, 3, device="opencl"), [1, 1, 1, 1])


GROUP_NORMS = [((2, 6, 5), 3, True), ((3, 4, 7, 3), 2, False), ((2, 4), 4, True), ((2, 8, 3, 2, 2), 1, True),
               ((4, 6, 33), 6, True)]


@pytest.mark.parametrize("shape, groups, affine", GROUP_NORMS)
def test_group_norm(shape, groups, affine):
    C = shape[1]
    weight, bias = (randn(C, seed=1), randn(C, seed=2)) if affine else (None, None)
    x = randn(*shape) * 3 + 1
    if affine:
        check(lambda t, w, b: F.group_norm(t, groups, w, b, eps=1e-4), x, weight, bias, atol=1e-4)
        with fallback_allowed():  # group norm's forward: torch's var_mean, float32 on the device
            check(lambda t, w, b: F.group_norm(t, groups, w, b), x.double(), weight.double(), bias.double(),
                  atol=1e-10, rtol=1e-10)
    else:
        check(lambda t: F.group_norm(t, groups), x, atol=1e-4)
    check(lambda t: F.group_norm(t.transpose(0, 1).transpose(0, 1), groups), x, atol=1e-4)


def test_group_norm_module_in_16_bits():
    torch.manual_seed(0)
    norm = torch.nn.GroupNorm(2, 4)
    x = randn(2, 4, 5, 3)
    for dtype in (torch.float16, torch.bfloat16):
        m = norm.to(dtype).to("opencl")
        xd = x.to(dtype).to("opencl").requires_grad_()
        m(xd).sum().backward()
        assert xd.grad.dtype == dtype and m.weight.grad.dtype == dtype
        assert torch.isfinite(xd.grad.float()).all()


def samples(*shape, seed=0, dtype=torch.float32):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


FRACTIONAL = [
    (2, (2, 3, 9, 8), (2, 3), (4, 5)),
    (2, (3, 7, 7), 3, (5, 5)),  # unbatched; windows that overlap
    (2, (1, 2, 6, 5), (2, 2), (5, 4)),  # out + k - 1 = in
    (3, (2, 2, 6, 7, 5), (2, 2, 2), (3, 4, 3)),
    (3, (2, 5, 6, 5), (3, 2, 1), (2, 3, 4)),  # unbatched
]


@pytest.mark.parametrize("dims, shape, kernel, out", FRACTIONAL)
def test_fractional_max_pool(dims, shape, kernel, out):
    fn = F.fractional_max_pool2d if dims == 2 else F.fractional_max_pool3d
    batch = shape[0] if len(shape) == dims + 2 else 1
    u = samples(batch, shape[-dims - 1], dims)
    check(lambda x, s: fn(x, kernel, output_size=out, _random_samples=s, return_indices=True), randn(*shape), u,
          grad=(0,))
    with fallback_allowed():  # the backward's scatter_add_ is float32 on the device
        check(lambda x, s: fn(x, kernel, output_size=out, _random_samples=s), randn(*shape, dtype=torch.float64),
              u.double(), atol=0, rtol=0, grad=(0,))
    # ties and NaNs pick the CPU's index
    x = torch.randint(0, 3, shape).float()
    x.view(-1)[::7] = float("nan")
    (y, i), (dy, di) = (fn(t, kernel, output_size=out, _random_samples=u.to(t.device), return_indices=True)
                        for t in (x, x.to("opencl")))
    assert torch.equal(di.cpu(), i)
    torch.testing.assert_close(dy.cpu(), y, equal_nan=True)


def test_fractional_max_pool_module_and_errors():
    torch.manual_seed(0)
    pool = torch.nn.FractionalMaxPool2d(2, output_ratio=0.5)
    y = pool(randn(2, 3, 9, 9).to("opencl").requires_grad_())
    y.sum().backward()
    assert y.shape == (2, 3, 4, 4)
    with pytest.raises(RuntimeError, match="too large relative to input"):
        F.fractional_max_pool2d(randn(1, 2, 5, 5).to("opencl"), 3, output_size=(4, 4),
                                _random_samples=samples(1, 2, 2).to("opencl"))
    with pytest.raises(RuntimeError, match="too large relative to input"):
        F.fractional_max_pool3d(randn(1, 1, 5, 5, 5).to("opencl"), 2, output_size=(4, 3, 3),
                                _random_samples=samples(1, 1, 3).to("opencl"))


# ---- cat ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.int64, torch.bool])
def test_cat_of_two_strided_parts_in_one_launch(dtype):
    # a rotary embedding's halves (slices of one tensor, one negated), transposed and
    # permuted views: cat2_strided, one launch
    from opencl_functions import devices

    x = (torch.randn(2, 6, 3, 16) * 10).to(dtype)
    cases = [lambda t: torch.cat((t[..., 8:], t[..., :8]), dim=-1),
             lambda t: torch.cat((t[:, :2].transpose(2, 3), t[:, 3:5].transpose(2, 3)), dim=1),
             lambda t: torch.cat((t[0, :, 1:], t[1].permute(0, 2, 1)[:, :, :1].transpose(1, 2)), dim=1)]
    for fn in cases:
        devices.launch_log_start()
        try:
            got = fn(x.to("opencl"))
            kernels = [launch["kernel"] for launch in devices.launch_log_take()]
        finally:
            devices.launch_log_stop()
        assert torch.equal(got.cpu(), fn(x))
        assert kernels[-1:] == ["cat2_strided"] and kernels.count("cat2_strided") == 1, kernels
