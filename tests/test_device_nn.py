"""Neural-network operators of the opencl device against torch on the CPU, forward and
backward (gradients of sum(output · R) for a fixed random R): convolution (strides,
padding, dilation, groups, depthwise, 1x1, 7x7, conv1d, strided inputs), batch norm
(train and eval), layer norm, pooling, softmax, cross-entropy, embedding, cat, dropout
and attention; the MSE and binary cross-entropy losses. OCLF_FALLBACK=error: each runs
natively."""
import copy

import pytest
import torch
import torch.nn.functional as F

ATOL, RTOL = 1e-4, 1e-4


@pytest.fixture(autouse=True)
def native_only(opencl_device, monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "error")


def close(got, ref, atol=ATOL, rtol=RTOL):
    got = got.detach().cpu()
    assert got.shape == ref.shape and got.dtype == ref.dtype
    err = (got.double() - ref.double()).abs()
    ok = err <= atol + rtol * ref.double().abs()
    assert bool(ok.all()), f"max error {err[~ok].max().item():.3g} at {ok.logical_not().nonzero()[0].tolist()}"


def check(fn, *inputs, atol=ATOL, rtol=RTOL):
    """fn on the CPU and on the device: outputs and every float input's gradient agree."""
    results = []
    for device in ("cpu", "opencl"):
        xs = [t.detach().clone().to(device) for t in inputs]
        for x in xs:
            if x.is_floating_point():
                x.requires_grad_()
        y = fn(*xs)
        weights = torch.randn(y.shape, generator=torch.Generator().manual_seed(1)).to(device)
        (y * weights).sum().backward()
        results.append([y] + [x.grad for x in xs if x.is_floating_point()])
    for got, ref in zip(results[1], results[0]):
        close(got, ref, atol, rtol)


def randn(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))


X = randn(2, 6, 9, 11)


def nn_bce_edges(p):
    """Probabilities at 0 and 1 against targets 1 and 0 (each log clamped at -100) and near
    zero (the backward's denominator at 1e-12): finite, as torch gives them."""
    return F.binary_cross_entropy(p, torch.tensor([1.0, 0.0, 1.0, 0.0]).to(p.device), reduction="none")


# The device's convolution paths (OCLF_DEVICE_CONV): its own choice; the GPU kernels with
# gradients as forward convolutions (on any device); the direct backward kernels.
CONV_MODES = ["auto", "gpu", "direct"]


@pytest.fixture(params=CONV_MODES)
def conv_mode(request, monkeypatch):
    monkeypatch.setenv("OCLF_DEVICE_CONV", request.param)
    return request.param


@pytest.mark.parametrize("kw, w_shape", [
    (dict(padding=1), (4, 6, 3, 3)),
    (dict(stride=2, padding=(2, 1), dilation=(2, 1)), (4, 6, 3, 3)),
    (dict(groups=2, padding=1), (4, 3, 3, 3)),
    (dict(groups=6, stride=2, padding=1), (6, 1, 3, 3)),
    (dict(), (5, 6, 1, 1)),
    (dict(padding=1), (5, 6, 1, 1)),  # padding wider than the kernel's reach
    (dict(stride=2), (7, 6, 1, 1)),
    (dict(stride=(2, 3), groups=2), (4, 3, 1, 1)),  # 1×1 downsampling with groups
    (dict(stride=2, padding=1), (5, 6, 1, 1)),
    (dict(stride=3, padding=2), (5, 6, 4, 4)),  # stride² > 4: direct gradients
    (dict(stride=(1, 2)), (3, 6, 2, 5)),
])
def test_conv2d(kw, w_shape, conv_mode):
    check(lambda x, w, b: F.conv2d(x, w, b, **kw), X, randn(*w_shape), randn(w_shape[0]))


def test_conv2d_gradients_over_a_long_reduction(conv_mode):
    # Many images and pixels per weight (the weight gradient's K split many ways).
    check(lambda x, w: F.conv2d(x, w, padding=1), randn(6, 16, 23, 29), randn(20, 16, 3, 3), atol=3e-4)


def test_conv2d_1x1_downsampling_of_even_sizes(conv_mode):
    # The last row and column of the input are not read: their gradient is zero.
    check(lambda x, w, b: F.conv2d(x, w, b, stride=2), randn(3, 8, 10, 12), randn(16, 8, 1, 1), randn(16))


@pytest.mark.parametrize("x_shape, w_shape, kw", [
    ((2, 6, 9, 10), (4, 6, 3, 3), dict(stride=2)),  # no padding: phases of unequal length
    ((2, 6, 9, 9), (4, 6, 4, 4), dict(stride=2, padding=1)),  # every phase two taps a side
    ((2, 6, 8, 8), (4, 6, 2, 2), dict(stride=2)),  # one tap a phase (a patch embedding)
    ((2, 6, 3, 3), (4, 6, 3, 3), dict(stride=2, padding=2)),  # padding past the kernel's half
    ((2, 6, 1, 1), (4, 6, 3, 3), dict(stride=2, padding=1)),  # fewer rows than the stride
    ((2, 6, 11, 13), (4, 3, 5, 3), dict(stride=(2, 1), padding=(2, 1), groups=2)),
])
def test_conv2d_strided_input_gradient_by_phases(x_shape, w_shape, kw, conv_mode):
    # Strided convolutions (dilation 1): the input gradient of each phase of positions as a
    # stride-1 convolution with its taps, written at the stride.
    check(lambda x, w: F.conv2d(x, w, **kw), randn(*x_shape), randn(*w_shape))


def test_conv2d_7x7_stride_2(conv_mode):
    check(lambda x, w: F.conv2d(x, w, stride=2, padding=3), randn(2, 3, 33, 31), randn(8, 3, 7, 7))


def test_conv2d_on_a_strided_view_and_conv1d(conv_mode):
    check(lambda x, w: F.conv2d(x[:, 1:5, 1:, ::2], w, padding=1), X, randn(4, 4, 3, 3))
    check(lambda x, w, b: F.conv1d(x, w, b, padding=2, stride=2), randn(2, 6, 21), randn(4, 6, 5), randn(4))


def test_batch_norm_train_and_eval():
    w, b = randn(6), randn(6)
    check(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), X, w, b)
    mean, var = randn(6), randn(6).abs() + 0.5
    check(lambda x, w, b: F.batch_norm(x, mean.to(x.device), var.to(x.device), w, b, training=False), X, w, b)
    check(lambda x: F.batch_norm(x, None, None, training=True, eps=1e-3), randn(5, 7))


@pytest.mark.parametrize("channels", [1, 3])
def test_batch_norm_of_few_long_channels(channels):
    """Few channels of many values: each channel's statistics and gradient sums split over
    several work-groups and joined (bn_stats_part / bn_backward_part); values far from zero,
    so a join through sums of squares would lose the variance. Against float64."""
    x = randn(5, channels, 37, 41) * 3 + 1000
    w, b = randn(channels), randn(channels)
    results = []
    for device, dtype in (("cpu", torch.float64), ("opencl", torch.float32)):
        xs, ws, bs = (t.to(device, dtype).requires_grad_() for t in (x, w, b))
        rm, rv = torch.zeros(channels, device=device, dtype=dtype), torch.ones(channels, device=device, dtype=dtype)
        y = F.batch_norm(xs, rm, rv, ws, bs, training=True, momentum=0.5)
        (y * randn(*y.shape).to(device, dtype)).sum().backward()
        results.append([t.detach().cpu().double() for t in (y, rm, rv, xs.grad, ws.grad, bs.grad)])
    for got, ref in zip(results[1], results[0]):
        torch.testing.assert_close(got, ref, atol=2e-3, rtol=2e-4)


def test_batch_norm_running_statistics():
    cpu, dev = torch.nn.BatchNorm2d(6, momentum=0.3), torch.nn.BatchNorm2d(6, momentum=0.3).to("opencl")
    for _ in range(2):
        cpu(X)
        dev(X.to("opencl"))
    close(dev.running_mean, cpu.running_mean, 1e-5, 1e-5)
    close(dev.running_var, cpu.running_var, 1e-5, 1e-5)


@pytest.mark.parametrize("shape", [(11,), (9, 11)])
def test_layer_norm(shape):
    check(lambda x, w, b: F.layer_norm(x, shape, w, b, eps=1e-5), X, randn(*shape), randn(*shape))
    check(lambda x: F.layer_norm(x.transpose(1, 3), (6,)), X)


@pytest.mark.parametrize("fn", [
    lambda x: F.max_pool2d(x, 3, 2, 1), lambda x: F.max_pool2d(x, 2, ceil_mode=True),
    lambda x: F.max_pool2d(x, 3, 1, 1, dilation=2), lambda x: F.avg_pool2d(x, 3, 2, 1),
    lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
    lambda x: F.avg_pool2d(x, 2, divisor_override=3), lambda x: F.adaptive_avg_pool2d(x, 1),
    lambda x: F.adaptive_avg_pool2d(x, (4, 3)), lambda x: F.adaptive_avg_pool2d(x, (7, 7)),
])
def test_pooling(fn):
    check(fn, X)


def test_max_pool_indices_on_ties_infinities_and_nans():
    # As torch on the CPU: the first of equal values, the last NaN of a window, and the
    # window's first position when everything in it is -inf.
    x = torch.randint(0, 3, (2, 3, 9, 10)).float()
    x[0, 0, 2:5, 3:6] = float("nan")
    x[0, 1, 3, 4] = float("nan")
    x[1, 2, :4, :4] = float("-inf")
    for kw in (dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=2), dict(kernel_size=3, dilation=2)):
        y, i = F.max_pool2d(x, return_indices=True, **kw)
        dy, di = F.max_pool2d(x.to("opencl"), return_indices=True, **kw)
        assert torch.equal(di.cpu(), i), kw
        assert torch.allclose(dy.cpu(), y, equal_nan=True), kw


@pytest.mark.parametrize("dim", [-1, 1, 0])
def test_softmax_and_log_softmax(dim):
    check(lambda x: F.softmax(x, dim), X)
    check(lambda x: F.log_softmax(x, dim), X)
    check(lambda x: F.softmax(x, -1), randn(3, 1000) * 10)


@pytest.mark.parametrize("kw", [dict(), dict(reduction="sum"), dict(reduction="none"), dict(ignore_index=3),
                                dict(weight=torch.rand(7, generator=torch.Generator().manual_seed(0)))])
def test_cross_entropy(kw):
    target = torch.tensor([1, 0, 3, 2, 6])

    def loss(x):
        extra = {k: (v.to(x.device) if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
        return F.cross_entropy(x, target.to(x.device), **extra)

    check(loss, randn(5, 7))


def test_embedding_and_index_select():
    ids = torch.tensor([[1, 2, 4], [1, 0, 1]])
    check(lambda w: F.embedding(ids.to(w.device), w), randn(5, 3))
    check(lambda w: F.embedding(ids.to(w.device), w, padding_idx=1), randn(5, 3))
    check(lambda x: x.index_select(1, torch.tensor([2, 0, 2]).to(x.device)), X)


def test_cat_stack_split():
    a, b = randn(3, 4), randn(2, 3)
    check(lambda a, b: torch.cat([a, b.t(), a[:, :1]], 1), a, b)
    check(lambda a: torch.stack([a, a * 2], 0), a)
    check(lambda a: torch.cat(a.split(2, dim=1)[::-1], 1), a)


@pytest.mark.parametrize("a_shape, b_shape, dim", [((1, 12, 8, 64), (1, 12, 1, 64), 2), ((3, 5), (3, 7), 1),
                                                   ((2, 5), (4, 5), 0), ((1, 2, 0, 4), (1, 2, 3, 4), 2),
                                                   ((2, 3, 4), (2, 1, 4), -2)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_cat_of_two_contiguous_parts(a_shape, b_shape, dim, dtype):
    # one launch (cat2) where both parts are contiguous: a key/value cache growing by a step
    a, b = (randn(*a_shape) * 5).to(dtype), (randn(*b_shape) * 5).to(dtype)
    got = torch.cat([a.to("opencl"), b.to("opencl")], dim)
    assert torch.equal(got.cpu(), torch.cat([a, b], dim))


def test_attention():
    q, k, v = randn(1, 2, 5, 8), randn(1, 2, 5, 9)[..., :8], randn(2, 2, 5, 8)[:1]
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v)
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), q, k, v)


def test_dropout_keeps_a_scaled_fraction():
    torch.manual_seed(0)
    x = torch.ones(100000, device="opencl", requires_grad=True)
    y = F.dropout(x, 0.25, training=True)
    kept = (y.detach() != 0).float().mean().item()
    assert abs(kept - 0.75) < 0.01
    assert torch.allclose(y.detach().cpu()[y.detach().cpu() != 0], torch.tensor(1 / 0.75))
    y.sum().backward()
    assert torch.equal(x.grad.cpu(), y.detach().cpu())
    torch.manual_seed(0)
    again = F.dropout(x.detach(), 0.25, training=True)
    assert torch.equal(again.cpu(), y.detach().cpu())


def test_tril_triu_arange():
    close(torch.ones(4, 5, device="opencl").tril(1), torch.ones(4, 5).tril(1))
    close(torch.ones(2, 4, 5, device="opencl").triu(-1), torch.ones(2, 4, 5).triu(-1))
    close(torch.arange(3, 20, 4, device="opencl"), torch.arange(3, 20, 4))
    close(torch.arange(0.5, 2.0, 0.25, device="opencl"), torch.arange(0.5, 2.0, 0.25))


def test_statistics_losses_and_shape_ops():
    x = randn(4, 5, 6)
    check(lambda x: x.var(1), x)
    check(lambda x: x.std((0, 2), keepdim=True, correction=0), x)
    check(lambda x: torch.var_mean(x, -1)[0] + torch.var_mean(x, -1)[1], x)
    check(lambda x: F.mse_loss(x, x.detach() * 0.5 + 1), x)
    p, t, w = torch.sigmoid(randn(3, 7)), torch.rand(3, 7, generator=torch.Generator().manual_seed(2)), randn(7).abs()
    for reduction in ("mean", "sum", "none"):  # the input's gradient (the target's is torch's logit)
        check(lambda p: F.binary_cross_entropy(p, t.to(p.device), reduction=reduction), p)
    check(lambda p: F.binary_cross_entropy(p, t.to(p.device), weight=w.to(p.device)), p)
    check(lambda p: nn_bce_edges(p), torch.tensor([0.0, 1.0, 0.5, 1e-30]))  # log clamped at -100, as torch
    check(lambda x: x.prod(1), randn(3, 4) * 0.5 + 1)
    check(lambda x: x.flip(0, 2), x)
    check(lambda x: x.roll(2, 1) + x.roll((1, -1), (0, 2)), x)
    check(lambda x: x.repeat(2, 1, 3), randn(2, 3, 4))
    check(lambda x: x.cumsum(1), x)
    close(torch.arange(10).to("opencl").cumsum(0), torch.arange(10).cumsum(0))


def test_gather_scatter_and_indexing():
    x = randn(4, 6)
    idx = torch.tensor([[0, 5, 5], [1, 1, 0], [2, 3, 4], [5, 5, 5]])
    check(lambda x: x.gather(1, idx.to(x.device)), x)
    check(lambda x, s: x.scatter_add(1, idx.to(x.device), s), x, randn(4, 3))
    close(F.one_hot(torch.tensor([0, 3, 1]).to("opencl"), 5), F.one_hot(torch.tensor([0, 3, 1]), 5))
    check(lambda x: x[torch.tensor([3, 0, 3]).to(x.device)], x)
    check(lambda x: x[:, torch.tensor([[1, 2], [5, 0]]).to(x.device)], x)
    host, dev = x.clone(), x.to("opencl")
    host[torch.tensor([2, 0])] = torch.tensor([1.5])
    dev[torch.tensor([2, 0]).to("opencl")] = torch.tensor([1.5]).to("opencl")
    close(dev, host)
    host.index_put_((torch.tensor([1, 1]),), torch.ones(6), accumulate=True)
    dev.index_put_((torch.tensor([1, 1]).to("opencl"),), torch.ones(6).to("opencl"), accumulate=True)
    close(dev, host)


def test_random_fills():
    torch.manual_seed(0)
    n = torch.randn(200000, device="opencl").cpu()
    assert abs(n.mean().item()) < 0.01 and abs(n.std().item() - 1) < 0.01
    u = torch.rand(200000, device="opencl").cpu()
    assert 0 <= u.min().item() and u.max().item() < 1 and abs(u.mean().item() - 0.5) < 0.01
    b = torch.empty(100000, device="opencl").bernoulli_(0.3).cpu()
    assert abs(b.mean().item() - 0.3) < 0.01
    torch.manual_seed(0)
    assert torch.equal(torch.randn(200000, device="opencl").cpu(), n)
    close(torch.linspace(-1, 2, 7, device="opencl"), torch.linspace(-1, 2, 7))


def test_random_distributions(monkeypatch):
    """exponential_, log_normal_, cauchy_, geometric_, bernoulli with a tensor of probabilities,
    normal with tensors of means or standard deviations and randperm, on the device itself:
    each draw's statistics against the distribution's (200000 draws; randperm's orders of
    three about equally often), torch's errors for bad parameters."""
    monkeypatch.setenv("OCLF_FALLBACK", "error")
    torch.manual_seed(0)
    n = 200000
    e = torch.empty(n, device="opencl").exponential_(2.0).cpu()
    assert e.min().item() > 0 and abs(e.mean().item() - 0.5) < 0.01
    ln = torch.empty(n, device="opencl").log_normal_(0.3, 0.5).cpu().log()
    assert abs(ln.mean().item() - 0.3) < 0.01 and abs(ln.std().item() - 0.5) < 0.01
    c = torch.empty(n, device="opencl").cauchy_(1.0, 2.0).cpu()
    q = torch.quantile(c[:100000], torch.tensor([0.25, 0.5, 0.75]))
    assert torch.allclose(q, torch.tensor([-1.0, 1.0, 3.0]), atol=0.06), q
    g = torch.empty(n, device="opencl").geometric_(0.3).cpu()
    assert g.min().item() == 1 and torch.equal(g, g.round()) and abs(g.mean().item() - 1 / 0.3) < 0.05
    assert abs((g == 1).float().mean().item() - 0.3) < 0.01
    p = torch.tensor([0.0, 0.2, 0.7, 1.0])
    b = torch.bernoulli(p.expand(n // 4, 4).to("opencl")).cpu()
    assert torch.allclose(b.mean(0), p, atol=0.01), b.mean(0)
    into = torch.empty(n // 4, 4, dtype=torch.int64, device="opencl").bernoulli_(p.to("opencl")).cpu()
    assert into.dtype == torch.int64 and torch.allclose(into.double().mean(0), p.double(), atol=0.01)
    means = torch.tensor([-3.0, 0.0, 5.0]).expand(n // 3, 3).contiguous()
    z = torch.normal(means.to("opencl"), 2.0).cpu()
    assert torch.allclose(z.mean(0), means[0], atol=0.05) and torch.allclose(z.std(0), torch.full((3,), 2.0), atol=0.05)
    z = torch.normal(1.5, means.abs().to("opencl")).cpu()
    assert torch.allclose(z.std(0), means[0].abs(), atol=0.05) and abs(z[:, 2].mean().item() - 1.5) < 0.1
    z = torch.normal(means[:1].to("opencl"), means.abs().to("opencl") + 1).cpu()
    assert z.shape == means.shape and torch.allclose(z.std(0), means[0].abs() + 1, atol=0.05)
    perm = torch.randperm(40000, device="opencl").cpu()
    assert perm.dtype == torch.int64 and torch.equal(perm.sort().values, torch.arange(40000))
    assert abs(torch.corrcoef(torch.stack([perm.double(), torch.arange(40000.0, dtype=torch.float64)]))[0, 1]) < 0.02
    small = torch.stack([torch.randperm(3, device="opencl") for _ in range(1800)]).cpu()
    counts = torch.unique(small, dim=0, return_counts=True)[1]
    assert len(counts) == 6 and counts.min().item() > 300 * 0.75, counts  # each order ~1/6
    assert torch.randperm(0, device="opencl").numel() == 0
    with pytest.raises(RuntimeError, match="lambda > 0"):
        torch.empty(3, device="opencl").exponential_(-1.0)
    with pytest.raises(RuntimeError, match="geometric_ expects p"):
        torch.empty(3, device="opencl").geometric_(1.5)


def test_random_integers(monkeypatch):
    """random_ and randint on the device itself (no CPU fallback), on every dtype: the range
    torch gives (from the dtype's bounds when no end is given), each value drawn about as
    often, strided tensors, seeded draws repeated, torch's error for an empty range."""
    monkeypatch.setenv("OCLF_FALLBACK", "error")
    torch.manual_seed(0)
    r = torch.randint(-3, 5, (80000,), device="opencl").cpu()
    assert r.dtype == torch.int64 and r.min().item() == -3 and r.max().item() == 4
    assert torch.bincount(r + 3).min().item() > 80000 / 8 * 0.95
    torch.manual_seed(0)
    assert torch.equal(torch.randint(-3, 5, (80000,), device="opencl").cpu(), r)
    for dtype, top in ((torch.bool, 1), (torch.uint8, 255), (torch.int8, 127), (torch.float16, 2**11),
                       (torch.bfloat16, 2**8), (torch.int16, 2**15 - 1), (torch.int32, 2**31 - 1),
                       (torch.float32, 2**24)):
        t = torch.empty(40000, dtype=dtype, device="opencl").random_().cpu().double()
        assert t.min().item() >= 0 and t.max().item() <= top and t.max().item() > top / 2, dtype
        if top <= 2**11:
            assert t.min().item() == 0 and t.max().item() == top, dtype
    x = torch.zeros(7, 9, dtype=torch.int32, device="opencl").t()  # a strided view
    x.random_(10, 13)
    assert set(x.cpu().flatten().tolist()) == {10, 11, 12}
    big = torch.empty(5000, dtype=torch.int64, device="opencl").random_(2**62, None).cpu()  # up to 2^63 - 1
    assert big.min().item() >= 2**62 and big.max().item() > 2**62 + 2**61
    below = torch.empty(5000, dtype=torch.int64, device="opencl").random_(2**62).cpu()  # [0, 2^62)
    assert below.min().item() >= 0 and 2**61 < below.max().item() < 2**62
    f = torch.empty(1000, device="opencl").random_(-5, -2).cpu()
    assert set(f.tolist()) == {-5.0, -4.0, -3.0}
    with pytest.raises(RuntimeError, match="'from' to be less than 'to'"):
        torch.empty(3, dtype=torch.int64, device="opencl").random_(4, 4)
    with pytest.raises(RuntimeError, match="from is out of bounds"):
        torch.empty(3, dtype=torch.uint8, device="opencl").random_(-5, 3)
    with pytest.raises(RuntimeError, match="to - 1 is out of bounds"):
        torch.empty(3, dtype=torch.int8, device="opencl").random_(0, 200)


# Without gradients scaled_dot_product_attention runs as one kernel (the "overrideable"
# backend); masks broadcast, causal rows, strided views, a row with no key left, grouped heads.
SDPA_CASES = [
    ((1, 12, 1, 64), (1, 12, 9, 64), 64, {}),
    ((2, 3, 8, 16), (2, 3, 8, 16), 24, dict(is_causal=True)),
    ((2, 3, 5, 16), (2, 3, 7, 16), 8, dict(is_causal=True, scale=0.3)),
    ((2, 3, 5, 16), (2, 3, 7, 16), 8, dict(attn_mask="bool")),
    ((2, 3, 5, 16), (2, 3, 7, 16), 8, dict(attn_mask="float")),
    ((1, 2, 3, 40), (1, 2, 700, 40), 5, {}),
    ((2, 6, 5, 8), (2, 2, 7, 8), 3, dict(enable_gqa=True, is_causal=True)),  # grouped key/value heads
    ((2, 6, 2, 8), (2, 3, 9, 8), 8, dict(enable_gqa=True, attn_mask="bool")),
]


@pytest.mark.parametrize("q_shape, k_shape, e, kw", SDPA_CASES)
@pytest.mark.filterwarnings("ignore:.*Profiler clears events")  # torch 2.11's profiler says so on exit
def test_attention_without_gradients_is_one_kernel(q_shape, k_shape, e, kw):
    q, k = randn(*q_shape), randn(*k_shape)
    v = randn(*k_shape[:3], e)
    kw = dict(kw)
    if kw.get("attn_mask") == "bool":
        kw["attn_mask"] = randn(q_shape[2], k_shape[2]) > -0.5
        kw["attn_mask"][1] = False  # no key left: zeros, as torch
    elif kw.get("attn_mask") == "float":
        kw["attn_mask"] = randn(q_shape[1], 1, k_shape[2])
    ref = F.scaled_dot_product_attention(q, k, v, **kw)
    dev = {name: value.to("opencl") if isinstance(value, torch.Tensor) else value for name, value in kw.items()}
    # q as a transposed view of (B, L, H, D), as attention layers hand it over
    qd = q.transpose(1, 2).contiguous().to("opencl").transpose(1, 2)
    with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out = F.scaled_dot_product_attention(qd, k.to("opencl"), v.to("opencl"), **dev)
    close(out, ref, atol=1e-5)
    names = {event.name for event in prof.events()}
    assert "aten::_scaled_dot_product_fused_attention_overrideable" in names
    assert "aten::_scaled_dot_product_attention_math" not in names


def test_multi_head_attention_fast_path():
    torch.manual_seed(0)
    cpu = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval()
    dev = copy.deepcopy(cpu).to("opencl")
    x = randn(3, 5, 16)
    with torch.no_grad():
        for need_weights in (True, False):
            ref, ref_w = cpu(x, x, x, need_weights=need_weights)
            out, out_w = dev(*[x.to("opencl")] * 3, need_weights=need_weights)
            close(out, ref, 1e-5, 1e-5)
            if need_weights:
                close(out_w, ref_w, 1e-5, 1e-5)
