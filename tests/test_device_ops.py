"""Operators of the opencl device against torch on the CPU: elementwise (broadcasting,
type promotion, strided views, in-place), reductions and matrix products, on awkward
sizes, with OCLF_FALLBACK=error so each runs natively. Tolerance atol + rtol·|ref|."""
import pytest
import torch
import torch.nn.functional as F

ATOL, RTOL = 1e-5, 1e-5


@pytest.fixture(autouse=True)
def native_only(opencl_device, monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "error")


def close(got, ref, atol=ATOL, rtol=RTOL):
    got = got.cpu()
    assert got.dtype == ref.dtype, f"dtype {got.dtype} != {ref.dtype}"
    assert got.shape == ref.shape, f"shape {tuple(got.shape)} != {tuple(ref.shape)}"
    if ref.dtype in (torch.bool, torch.int64, torch.int32):
        assert torch.equal(got, ref)
        return
    err = (got.double() - ref.double()).abs()
    bound = atol + rtol * ref.double().abs()
    ok = (err <= bound) | (got.isnan() & ref.isnan())
    assert bool(ok.all()), f"max error {err[~ok].max().item():.3g}"


def on_device(*tensors):
    return [t.to("opencl") for t in tensors]


torch.manual_seed(0)
A = torch.randn(7, 33)
B = torch.randn(33)
C = torch.randn(1, 7, 1) + 2.0

UNARY = [torch.neg, torch.abs, torch.exp, torch.tanh, torch.sigmoid, torch.relu, torch.sqrt, torch.rsqrt, torch.log,
         torch.erf, torch.floor, torch.ceil, torch.round, torch.sign, torch.reciprocal, F.gelu, F.silu, F.hardswish,
         F.hardsigmoid, F.relu6, lambda t: F.gelu(t, approximate="tanh"), lambda t: F.leaky_relu(t, 0.1),
         lambda t: t.clamp(-0.3, 0.4), lambda t: t.clamp(min=0.1), lambda t: t.pow(2), lambda t: t.pow(0.5),
         lambda t: t.pow(3), torch.logical_not, torch.isnan]


@pytest.mark.parametrize("fn", UNARY)
def test_unary(fn):
    x = A.abs() + 0.1 if fn in (torch.sqrt, torch.rsqrt, torch.log) else A
    (dev,) = on_device(x)
    close(fn(dev), fn(x), rtol=1e-5, atol=2e-6)
    close(fn(dev.t()), fn(x.t()), rtol=1e-5, atol=2e-6)  # a transposed view


BINARY = [torch.add, torch.sub, torch.mul, torch.div, torch.maximum, torch.minimum, torch.eq, torch.ne, torch.lt,
          torch.le, torch.gt, torch.ge, torch.atan2, lambda a, b: torch.add(a, b, alpha=-2.5),
          lambda a, b: torch.where(a > b, a, b), lambda a, b: a.lerp(b, 0.3),
          lambda a, b: torch.div(a, b, rounding_mode="floor"), lambda a, b: torch.div(a, b, rounding_mode="trunc")]


@pytest.mark.parametrize("fn", BINARY)
def test_binary_broadcasting(fn):
    a, b = A, B + 1.5
    da, db = on_device(a, b)
    close(fn(da, db), fn(a, b))
    close(fn(db, da[1:, :]), fn(b, a[1:, :]))
    close(fn(da[:, ::3], db[::3]), fn(a[:, ::3], b[::3]))  # strided slices
    c = C
    (dc,) = on_device(c)
    close(fn(da, dc), fn(a, c))  # both broadcast: (7, 33) and (1, 7, 1)


@pytest.mark.parametrize("value", [2, 0.5, -3])
def test_python_scalars_and_cpu_zero_dim(value):
    (da,) = on_device(A)
    close(da + value, A + value)
    close(value - da, value - A)
    close(da * torch.tensor(value), A * torch.tensor(value))
    close(da / value, A / value)
    close(da > value, A > value)


def test_type_promotion():
    i = torch.arange(-5, 6)
    f = torch.linspace(-1, 1, 11)
    di, df = on_device(i, f)
    close(di + df, i + f)
    close(di * 2, i * 2)
    close(di / 2, i / 2)
    close(di // 3, i // 3)
    close(di % 3, i % 3)
    close((di > 0).float() * df, (i > 0).float() * f)
    close((di > 0) & (df < 0.5), (i > 0) & (f < 0.5))
    close(~(di > 0), ~(i > 0))


def test_in_place_on_views():
    host = A.clone()
    (dev,) = on_device(host)
    for t in (host, dev):
        t[:, 1::2].mul_(3).add_(1)
        t.t()[5:].relu_()
        t[2].addcmul_(t[3], t[4], value=0.5)
        t[:4].masked_fill_(t[:4] > 1, -7.0)
        t.clamp_(-5, 5)
    close(dev, host)


def test_ternary_ops():
    a, b, c = A, A.flip(0), A.abs() + 1
    da, db, dc = on_device(a, b, c)
    close(torch.addcdiv(da, db, dc, value=-0.7), torch.addcdiv(a, b, c, value=-0.7))
    close(torch.addcmul(da, db, dc), torch.addcmul(a, b, c))
    close(torch.where(da > 0, 1.0, db), torch.where(a > 0, 1.0, b))


REDUCTIONS = [lambda t: t.sum(), lambda t: t.sum(0), lambda t: t.sum((0, 2), keepdim=True), lambda t: t.mean(-1),
              lambda t: t.mean((1, 2)), lambda t: t.amax(1), lambda t: t.amin((0, 1)), lambda t: t.max(),
              lambda t: t.min(), lambda t: t.max(2)[0], lambda t: t.max(2)[1], lambda t: t.min(0)[1],
              lambda t: t.argmax(), lambda t: t.argmax(1, keepdim=True), lambda t: t.argmin(-1),
              lambda t: (t > 0).sum(), lambda t: (t > 0).all(), lambda t: (t > 2).any(1),
              lambda t: torch.linalg.vector_norm(t), lambda t: torch.linalg.vector_norm(t, 1, dim=0)]


@pytest.mark.parametrize("fn", REDUCTIONS)
@pytest.mark.parametrize("shape", [(5, 7, 9), (1, 300, 3), (3, 2, 1000)])
def test_reductions(fn, shape):
    x = torch.randn(shape)
    (dev,) = on_device(x)
    close(fn(dev), fn(x), atol=1e-4, rtol=1e-5)
    close(fn(dev.transpose(0, 2)), fn(x.transpose(0, 2)), atol=1e-4, rtol=1e-5)


def test_sum_of_ints_and_large():
    close(torch.arange(1000).to("opencl").sum(), torch.arange(1000).sum())
    x = torch.rand(1 << 17)
    close(x.to("opencl").sum(), x.sum(), rtol=1e-5, atol=1e-3)


def test_long_reductions_of_few_outputs_in_slices():
    """A few outputs over many elements are reduced in slices side by side, then merged
    (reduce_parts, reduce_combine): a vocabulary's argmax with its maximum repeated (the
    first position wins) and with a NaN (the NaN wins), sums, means, norms, products,
    any/all and integer sums, over contiguous and strided inputs, one output and three."""
    torch.manual_seed(0)
    logits = torch.randn(50257)
    logits[[7001, 30002, 45000]] = 9.0  # ties: the first one wins
    dev = logits.to("opencl")
    assert dev.argmax().item() == 7001 and dev.max(0)[1].item() == 7001
    assert (-dev).argmin().item() == 7001
    with_nan = logits.clone()
    with_nan[40000] = float("nan")
    assert with_nan.to("opencl").argmax().item() == 40000 and with_nan.to("opencl").max().isnan().item()
    x = torch.randn(3, 40001)
    for t in (x, x.t().contiguous().t(), torch.randn(40001, 3).t()):  # contiguous and strided
        d = t.to("opencl")
        close(d.sum(1), t.sum(1), rtol=1e-5, atol=1e-3)
        close(d.mean(), t.mean(), rtol=1e-5, atol=1e-5)
        close(d.argmax(1), t.argmax(1))
        close(d.amin(1), t.amin(1))
        close(torch.linalg.vector_norm(d, dim=1), torch.linalg.vector_norm(t, dim=1), rtol=1e-5)
    ones = 1 + torch.rand(60000) * 1e-5
    close(ones.to("opencl").prod().double(), ones.double().prod(), rtol=1e-4)  # float64 decides
    mask = torch.zeros(70000, dtype=torch.bool)
    assert not mask.to("opencl").any().item() and (~mask).to("opencl").all().item()
    mask[69999] = True
    assert mask.to("opencl").any().item() and not (~mask).to("opencl").all().item()
    ints = torch.randint(-1000, 1000, (2, 90001))
    assert torch.equal(ints.to("opencl").sum(1).cpu(), ints.sum(1))


# The device's product paths (OCLF_DEVICE_MATMUL): its own choice; the few-row kernels of
# GPUs (on any device); CLBlast alone.
@pytest.fixture(params=["auto", "gpu", "clblast"])
def product_mode(request, monkeypatch):
    monkeypatch.setenv("OCLF_DEVICE_MATMUL", request.param)
    return request.param


@pytest.mark.parametrize("m, k, n", [(1, 1, 1), (1, 33, 7), (7, 33, 1), (17, 65, 31), (64, 64, 64), (9, 100, 37),
                                     (40, 17, 129), (3, 768, 50), (8, 300, 1030), (1, 2000, 3)])
def test_matrix_products(m, k, n, product_mode):
    a, b, bias = torch.randn(m, k), torch.randn(k, n), torch.randn(n)
    da, db, dbias = on_device(a, b, bias)
    tol = dict(atol=1e-4, rtol=1e-4)
    close(da @ db, a @ b, **tol)
    close(torch.addmm(dbias, da, db), torch.addmm(bias, a, b), **tol)
    close(torch.addmm(dbias, da, db, beta=0.5, alpha=-2), torch.addmm(bias, a, b, beta=0.5, alpha=-2), **tol)
    close(db.t() @ da.t(), b.t() @ a.t(), **tol)  # transposed operands as flags
    close(F.linear(da, db.t(), dbias), F.linear(a, b.t(), bias), **tol)
    w = b.t().contiguous()  # an nn.Linear weight, stored N×K
    close(F.linear(da, w.to("opencl"), dbias), F.linear(a, w, bias), **tol)
    close(F.linear(da, w.to("opencl")), F.linear(a, w), **tol)
    close(torch.addmm(dbias.view(1, n), da, db), torch.addmm(bias, a, b), **tol)  # a (1, N) bias row
    close(torch.addmm(dbias[:1], da, db), torch.addmm(bias[:1], a, b), **tol)  # a broadcast bias
    col = torch.randn(m, 1)  # one value per row, not a bias row
    close(torch.addmm(col.to("opencl"), da, db), torch.addmm(col, a, b), **tol)
    out = torch.full((m, n), float("nan")).to("opencl")
    close(torch.mm(da, db, out=out), a @ b, **tol)  # the output's old values are not read
    rows = torch.zeros(2 * m, n).to("opencl")  # an output that starts inside its buffer
    torch.addmm(dbias, da, db, out=rows[m:])
    close(rows, torch.cat([torch.zeros(m, n), torch.addmm(bias, a, b)]), **tol)


@pytest.mark.parametrize("m, k, n", [(1, 768, 50), (3, 33, 7), (8, 300, 1030), (1, 2000, 3), (17, 65, 31)])
def test_products_with_a_kxn_parameter(m, k, n, product_mode):
    """A K×N parameter (GPT-2's Conv1D weight) is read through a transposed copy kept with
    it: right after an in-place update too, which must make a new copy."""
    a, b, bias = torch.randn(m, k), torch.randn(k, n), torch.randn(n)
    w = torch.nn.Parameter(b.to("opencl"))
    da, dbias = on_device(a, bias)
    tol = dict(atol=1e-4, rtol=1e-4)
    with torch.no_grad():
        close(torch.addmm(dbias, da, w), torch.addmm(bias, a, b), **tol)
        close(da @ w, a @ b, **tol)
        close(torch.addmm(dbias, da, w, beta=0.5), torch.addmm(bias, a, b, beta=0.5), **tol)
        w.mul_(-2.0)
        close(torch.addmm(dbias, da, w), torch.addmm(bias, a, -2.0 * b), **tol)
        w.copy_(b.t().contiguous().t().to("opencl"))
        close(da @ w, a @ b, **tol)
    out = torch.addmm(dbias, da, w)  # with autograd: the same product, gradients through w
    out.sum().backward()
    close(w.grad, a.t() @ torch.ones(m, n), **tol)


def test_bad_product_setting_is_named(monkeypatch):
    monkeypatch.setenv("OCLF_DEVICE_MATMUL", "fast")
    with pytest.raises(RuntimeError, match="OCLF_DEVICE_MATMUL must be auto, gpu or clblast"):
        torch.ones(2, 3).to("opencl") @ torch.ones(3, 2).to("opencl")


def test_products_with_a_k_by_n_parameter_follow_its_updates(product_mode):
    # On CPU devices a K×N parameter (a Conv1D weight) is transposed once and kept: an
    # in-place update must be seen, and a freed one forgotten.
    for _ in range(2):
        w_cpu, x, bias = torch.randn(33, 21), torch.randn(5, 33), torch.randn(21)
        w = torch.nn.Parameter(w_cpu.to("opencl"))
        dx, dbias = on_device(x, bias)
        with torch.no_grad():
            close(torch.addmm(dbias, dx, w), torch.addmm(bias, x, w_cpu), atol=1e-4, rtol=1e-4)
            w.mul_(-2)
            close(torch.addmm(dbias, dx, w), torch.addmm(bias, x, -2 * w_cpu), atol=1e-4, rtol=1e-4)
            close(dx[:1] @ w, x[:1] @ (-2 * w_cpu), atol=1e-4, rtol=1e-4)
        del w


def test_batched_products():
    a, b = torch.randn(3, 5, 17), torch.randn(3, 17, 6)
    da, db = on_device(a, b)
    tol = dict(atol=1e-4, rtol=1e-4)
    close(torch.bmm(da, db), torch.bmm(a, b), **tol)
    close(da @ db[0], a @ b[0], **tol)  # broadcast batch
    close(da.transpose(1, 2).transpose(1, 2) @ db.transpose(1, 2).contiguous().transpose(1, 2), a @ b, **tol)
    q = torch.randn(2, 4, 7, 8)
    (dq,) = on_device(q)
    close(dq @ dq.transpose(-1, -2), q @ q.transpose(-1, -2), **tol)  # attention-like 4-D
    close(torch.baddbmm(db[:, :1, :], da, db, beta=0.5), torch.baddbmm(b[:, :1, :], a, b, beta=0.5), **tol)
    close(da[0] @ db[0, :, 0], a[0] @ b[0, :, 0], **tol)  # mv


def test_unsupported_dtype_is_a_clear_error():
    x = torch.randn(4, dtype=torch.complex64).to("opencl")  # stored on the device, computed on the CPU
    with pytest.raises(NotImplementedError, match="aten::add.Tensor has no OpenCL kernel for complex64 and OCLF_FALLBACK=error"):
        x + x


@pytest.mark.parametrize("batch, m, k, n", [(1, 7, 33, 9), (4, 5, 17, 3), (1, 1, 40, 6)])
def test_products_ignore_stale_output_memory(batch, m, k, n):
    a, b = torch.randn(batch, m, k), torch.randn(batch, k, n)
    for shape in [(batch, m, n), (m, n)]:
        stale = torch.full(shape, float("nan"), device="opencl")
        del stale  # the next output of this size reuses its buffer
        got = a.to("opencl") @ b.to("opencl") if len(shape) == 3 else a[0].to("opencl") @ b[0].to("opencl")
        close(got, a @ b if len(shape) == 3 else a[0] @ b[0], atol=1e-4, rtol=1e-4)
