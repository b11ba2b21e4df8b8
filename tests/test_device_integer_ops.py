"""Integer dtypes through operators torch's claimed-dtypes check (tests/torch_suites test_dtypes)
found wrong: pow of integer tensors (a tensor exponent, a scalar base, a scalar exponent,
in place and out=) stays an integer tensor with torch's exact values, and floor, ceil,
round and trunc of integers give their values (they failed to build a kernel); min and max of
int8 and int16 start from their dtype's extremes; any and all of uint8 are uint8; isnan, isinf
and nan_to_num of integers and booleans (their kernels did not build); dropout's backward of
integer gradients is float32 (torch's formula), not truncated to the integer type."""
import pytest
import torch

TYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]


@pytest.fixture(autouse=True)
def _native(opencl_device, monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "error")


def _same(got, expected):
    assert got.device.type == "opencl"
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    assert torch.equal(got.cpu(), expected)


@pytest.mark.parametrize("dtype", TYPES)
def test_integer_powers_are_exact_integers(dtype):
    low = 0 if dtype == torch.uint8 else -3
    base = torch.arange(low, low + 7, dtype=dtype).repeat(3)
    exponent = torch.arange(0, 21, dtype=dtype) % (5 if dtype in (torch.uint8, torch.int8) else 13)
    b, e = base.to("opencl"), exponent.to("opencl")
    _same(torch.pow(b, e), torch.pow(base, exponent))
    _same(torch.pow(3, e), torch.pow(3, exponent))
    _same(torch.pow(b, 3), torch.pow(base, 3))
    _same(b ** 0, base ** 0)
    out = torch.empty(0, dtype=dtype, device="opencl")
    _same(torch.pow(b, 2, out=out), torch.pow(base, 2))
    _same(b.clone().pow_(2), base.clone().pow_(2))
    if dtype != torch.uint8:  # negative exponents of a tensor: 1, ±1 or 0, as torch's
        signs = torch.tensor([1, -1, 2, 0, -1], dtype=dtype)
        _same(torch.pow(signs.to("opencl"), torch.tensor(-3, dtype=dtype).to("opencl")),
              torch.pow(signs, torch.tensor(-3, dtype=dtype)))
    with pytest.raises(RuntimeError, match="negative integer powers"):
        torch.pow(b, -2)
    assert torch.pow(b, 2.5).dtype == torch.pow(base, 2.5).dtype == torch.float32


def test_big_integer_powers_are_exact():
    x = torch.tensor([3, 7, -5], dtype=torch.int64)
    _same(torch.pow(x.to("opencl"), 21), torch.pow(x, 21))  # past float32's 2^24


@pytest.mark.parametrize("op", [torch.floor, torch.ceil, torch.round, torch.trunc])
@pytest.mark.parametrize("dtype", TYPES)
def test_rounding_an_integer_tensor_keeps_it(op, dtype):
    x = torch.arange(0, 9, dtype=dtype)[::2]
    y = op(x.to("opencl"))
    _same(y, op(x))


@pytest.mark.parametrize("dtype", TYPES)
def test_min_and_max_of_small_integers(dtype):
    """Reductions start from the dtype's own extremes (int8 and int16 started from 0 and 255)."""
    low = 0 if dtype == torch.uint8 else -100
    x = torch.tensor([[3, 100, low + 1], [low + 7, 9, 50]], dtype=dtype)
    d = x.to("opencl")
    for fn in (torch.amin, torch.amax, torch.argmin, torch.argmax):
        _same(fn(d), fn(x))
        _same(fn(d, 1), fn(x, 1))
    _same(torch.min(d, 0).values, torch.min(x, 0).values)


def test_any_and_all_of_uint8_are_uint8():
    x = torch.tensor([[0, 3], [1, 2]], dtype=torch.uint8)
    for fn in (torch.any, torch.all):
        _same(fn(x.to("opencl")), fn(x))
        _same(fn(x.to("opencl"), 1), fn(x, 1))
    _same(torch.any(x.bool().to("opencl")), torch.any(x.bool()))


@pytest.mark.parametrize("dtype", [*TYPES, torch.bool])
def test_nan_and_infinity_tests_of_integers(dtype):
    x = torch.arange(-3, 9).to(dtype) if dtype not in (torch.uint8, torch.bool) else torch.arange(12).to(dtype)
    d = x.to("opencl")
    for name in ("isnan", "isinf", "isposinf", "isneginf", "isfinite"):
        _same(getattr(torch, name)(d), getattr(torch, name)(x))
    _same(torch.nan_to_num(d), torch.nan_to_num(x))


@pytest.mark.parametrize("dtype", [torch.int16, torch.int64, torch.bool])
def test_dropout_backward_of_integer_gradients(dtype):
    grad = torch.arange(1, 13).to(dtype)
    mask = torch.arange(12) % 3 != 0
    _same(torch.ops.aten.native_dropout_backward(grad.to("opencl"), mask.to("opencl"), 1.5),
          torch.ops.aten.native_dropout_backward(grad, mask, 1.5))
