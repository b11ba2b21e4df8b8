"""Dtypes on the opencl device beyond float32: float64 (native elementwise and reductions on
cl_khr_fp64 devices, the CPU fallback elsewhere), complex64/complex128 (stored and copied;
arithmetic on the CPU), and float16/bfloat16 (16-bit storage, float32 arithmetic inside
the kernels), each against torch on the CPU: storage, copies and conversions, elementwise
operations and reductions, complex arithmetic on the fallback, 16-bit kernels that read 16
bits. The nn paths (products, convolutions, norms, attention, gradients, whole language
models): test_device_dtypes_nn.py.

Float16 and bfloat16 run with OCLF_FALLBACK=error: every operator runs on the device
(dtype_checks.py)."""
import pytest
import torch
import torch.nn.functional as F

from device_checks import logged_launches
from dtype_checks import FLOATS, HALVES, allow_fallback, dev, no_worse, randn, same


@pytest.fixture(autouse=True)
def device(opencl_device, monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "error")  # allow_fallback() lifts it for float64 and complex
    return opencl_device


# ---- storage and copies --------------------------------------------------------------------

ALL = [torch.float64, torch.float16, torch.bfloat16, torch.complex64, torch.complex128]


@pytest.mark.parametrize("dtype", ALL)
def test_creation_and_round_trip(dtype, monkeypatch):
    allow_fallback(monkeypatch, dtype)
    x = randn(5, 7, 3, dtype=dtype)
    (d,) = dev(x)
    assert d.dtype == dtype and d.device.type == "opencl"
    assert torch.equal(d.cpu(), x)
    assert torch.equal(torch.zeros_like(d).cpu(), torch.zeros_like(x))
    assert torch.equal(torch.full((4, 3), 2.5, dtype=dtype, device="opencl").cpu(), torch.full((4, 3), 2.5, dtype=dtype))
    assert d[1, 2, 0].item() == x[1, 2, 0].item()
    printed = "".join(repr(d).split())  # printing reads the values back (line breaks differ)
    assert printed.replace(",device='opencl:0'", "") == "".join(repr(x).split())
    e = torch.empty(0, dtype=dtype, device="opencl")
    assert e.cpu().shape == (0,)


@pytest.mark.parametrize("dtype", ALL)
def test_copies_with_odd_strides(dtype, monkeypatch):
    allow_fallback(monkeypatch, dtype)
    x = randn(6, 9, 5, dtype=dtype)
    (d,) = dev(x)
    # device -> host from views, host -> device into views, device -> device between views
    assert torch.equal(d[1::2, ::3, 1:].cpu(), x[1::2, ::3, 1:])
    assert torch.equal(d.permute(2, 0, 1).contiguous().cpu(), x.permute(2, 0, 1).contiguous())
    target = torch.zeros(5, 9, 6, dtype=dtype, device="opencl")
    target.permute(2, 1, 0)[:, 2:7].copy_(x[:, :5])
    expected = torch.zeros(5, 9, 6, dtype=dtype)
    expected.permute(2, 1, 0)[:, 2:7].copy_(x[:, :5])
    assert torch.equal(target.cpu(), expected)
    host = torch.zeros(9, 6, dtype=dtype).t()
    host.copy_(d[:, :, 3])
    assert torch.equal(host, x[:, :, 3])
    back = torch.zeros(3, 9, dtype=dtype, device="opencl")
    back[:, ::2] = x[::2, ::2, 0].to("opencl")
    expected = torch.zeros(3, 9, dtype=dtype)
    expected[:, ::2] = x[::2, ::2, 0]
    assert torch.equal(back.cpu(), expected)


PAIRS = [(a, b) for a in [torch.float32, torch.int64, torch.bool, *ALL] for b in [torch.float32, torch.int32, *ALL]
         if a != b and not (a.is_complex and not b.is_complex)]


@pytest.mark.parametrize("src, dst", PAIRS, ids=lambda t: str(t).replace("torch.", ""))
def test_conversions_on_the_device(src, dst, monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "silent")
    x = (randn(4, 7) * 3).to(src) if src != torch.bool else torch.rand(4, 7) > 0.5
    (d,) = dev(x)
    got = d.t().to(dst)
    assert got.device.type == "opencl"
    assert torch.equal(got.cpu(), x.t().to(dst))


def test_bfloat16_rounds_to_nearest_even_and_keeps_nan():
    # float32 values half-way between two bfloat16 ones, and specials
    bits = torch.tensor([0x3F808000, 0x3F818000, 0x3F80C000, 0x7FC00001, 0xFF800000, 0x7F7FFFFF, 0x00010000],
                        dtype=torch.int64).to(torch.int32)
    x = bits.view(torch.float32)
    (d,) = dev(x)
    got, ref = d.to(torch.bfloat16).cpu(), x.to(torch.bfloat16)
    assert torch.equal(got.view(torch.int16)[:3], ref.view(torch.int16)[:3])
    assert got[3].isnan() and got[4] == float("-inf")
    assert torch.equal(got[4:], ref[4:])


def test_half_conversion_rounds_and_saturates_like_torch():
    x = torch.tensor([1 + 2**-11, 1 + 3 * 2**-11, 65520.0, -70000.0, 6e-8, float("nan")])
    (d,) = dev(x)
    same(d.half(), x.half())


# ---- elementwise and reductions --------------------------------------------------------------

UNARY = [torch.neg, torch.abs, torch.exp, torch.tanh, torch.sigmoid, torch.relu, torch.sqrt, torch.rsqrt, torch.log,
         torch.erf, torch.floor, torch.reciprocal, F.gelu, F.silu, F.hardswish,
         lambda t: F.gelu(t, approximate="tanh"), lambda t: t.clamp(-0.5, 0.7), lambda t: t.pow(2), torch.isnan]


@pytest.mark.parametrize("dtype", FLOATS)
def test_elementwise(dtype, monkeypatch):
    allow_fallback(monkeypatch, dtype)
    a, b = randn(7, 33, dtype=dtype), randn(33, dtype=dtype)
    pos = a.abs() + 0.5
    da, db, dpos = dev(a, b, pos)
    for f in UNARY:
        arg, darg = (pos, dpos) if f in (torch.sqrt, torch.rsqrt, torch.log) else (a, da)
        same(f(darg), f(arg))
    same(da + db, a + b)
    same(da * 2.5 - db, a * 2.5 - b)
    same(da / (db.abs() + 1), a / (b.abs() + 1))
    same(torch.maximum(da, db), torch.maximum(a, b))
    same(torch.where(da > db, da, db * 3), torch.where(a > b, a, b * 3))
    same(da[:, ::2].t() * db[::2, None], a[:, ::2].t() * b[::2, None])
    same(da == da, a == a)
    same(torch.addcmul(da, da, db, value=0.5), torch.addcmul(a, a, b, value=0.5))
    same(da + 1, a + 1)  # a Python number keeps the tensor's dtype
    # mixed with float32: promotion to the wider type
    f32 = torch.randn(33)
    (df32,) = dev(f32)
    same(da + df32, a + f32)
    inplace = da.clone()
    inplace.mul_(db).add_(1)
    same(inplace, a * b + 1)


@pytest.mark.parametrize("dtype", FLOATS)
def test_reductions(dtype, monkeypatch):
    allow_fallback(monkeypatch, dtype)
    x = randn(6, 130, 5, dtype=dtype)
    (d,) = dev(x)
    ref = x.double()
    for dims in [(1,), (0, 2), (2,), None]:
        kw = {} if dims is None else {"dim": dims}
        no_worse(d.sum(**kw), x.sum(**kw), ref.sum(**kw))
        no_worse(d.mean(**kw), x.mean(**kw), ref.mean(**kw))
        same(d.amax(**kw), x.amax(**kw))
    values, indices = d.max(dim=1)
    same(values, x.max(dim=1).values)
    assert torch.equal(indices.cpu(), x.max(dim=1).indices)
    assert torch.equal(d.argmin(dim=2).cpu(), x.argmin(dim=2))
    no_worse(d.permute(2, 0, 1).norm(dim=(0, 2)), x.permute(2, 0, 1).norm(dim=(0, 2)), ref.permute(2, 0, 1).norm(dim=(0, 2)))
    same((d > 0).any(dim=1), (x > 0).any(dim=1))


# ---- float64 and complex without kernels --------------------------------------------------------

def test_complex_arithmetic_runs_on_the_cpu_fallback(monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "silent")
    x = torch.randn(4, 5, dtype=torch.complex64)
    (d,) = dev(x)
    same(d * d + 1, x * x + 1)
    same(d.abs(), x.abs())
    # torch's lazy conjugate and negative views are resolved on copies
    same(d.conj(), x.conj())
    same(d * d.conj(), x * x.conj())
    same(d.conj().t().contiguous(), x.conj().t().contiguous())
    same(d.conj().imag, x.conj().imag)
    monkeypatch.setenv("OCLF_FALLBACK", "error")
    with pytest.raises(NotImplementedError, match="aten::mul.Tensor has no OpenCL kernel for complex"):
        d * d



@pytest.mark.parametrize("dtype", HALVES)
def test_16bit_kernels_read_16_bits_without_a_float32_copy(dtype):
    x, w, b = randn(3, 37, dtype=dtype), randn(37, dtype=dtype), randn(37, dtype=dtype)
    q = randn(1, 2, 5, 8, dtype=dtype)
    dx, dw, db, dq = dev(x, w, b, q)
    ids = torch.tensor([2, 0, 2], device="opencl")
    with logged_launches() as launches:
        F.softmax(dx, -1), F.log_softmax(dx, 0), F.layer_norm(dx, (37,), dw, db)
        F.scaled_dot_product_attention(dq, dq, dq, is_causal=True)
        F.embedding(ids, dx), (dx * dw + 1).sum(-1), dx.amax(0)
        F.linear(dx, dx.repeat(2, 1)[:5], db[:5]), dx.t() @ dx, torch.bmm(dq[0], dq[0].transpose(1, 2))  # gemm16.cl
    name = {torch.float16: "half", torch.bfloat16: "bfloat"}[dtype]
    kernels = {kernel for _, kernel, *_ in launches}
    assert {"softmax_forward", "ln_forward", "sdpa_forward", "index_select", "ew_contig", "gemm16_rows"} <= kernels
    assert kernels & {"gemm16_tiled", "gemm16_mma"}  # tensor cores where the device has them
    for _, kernel, options, *_ in launches:
        assert "-DTO=float" not in options or f"-DTA={name}" not in options, f"{kernel} widened: {options}"
        if kernel in ("softmax_forward", "ln_forward", "sdpa_forward") or kernel.startswith("gemm16"):
            assert f"-DT={name}" in options.split(), f"{kernel}: {options}"
