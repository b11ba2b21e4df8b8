"""What the dtype tests share (test_device_dtypes*.py): the dtypes beyond float32, the
fallback they may take, and the two comparisons: same (torch's CPU result at the dtype)
and no_worse (no worse than twice torch's CPU error against float64)."""
import torch

HALVES = [torch.float16, torch.bfloat16]
FLOATS = [torch.float64, *HALVES]
EPS = {torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7, torch.float64: 2.0**-52, torch.float32: 2.0**-23}


def allow_fallback(monkeypatch, dtype):
    """float64 may fall back (silently) where the device has no kernel for it, and complex
    arithmetic always does; 16-bit operators must all run natively (the tests' default)."""
    if dtype in (torch.float64, torch.complex64, torch.complex128):
        monkeypatch.setenv("OCLF_FALLBACK", "silent")


def dev(*tensors):
    return [t.to("opencl") for t in tensors]


def same(got, ref):
    """Equal to torch's CPU result at the dtype, within torch's default tolerance for it."""
    got = got.cpu()
    assert got.dtype == ref.dtype, f"dtype {got.dtype} != {ref.dtype}"
    torch.testing.assert_close(got, ref, equal_nan=True)


def no_worse(got, cpu, ref64):
    """got (ours) is no worse than twice torch's CPU error against the float64 reference
    (float64 results: equal to torch's within its default tolerance)."""
    got = got.cpu()
    if got.dtype == torch.float64:
        same(got, cpu)
        return
    assert got.dtype == cpu.dtype, f"dtype {got.dtype} != {cpu.dtype}"
    assert got.shape == ref64.shape
    ours = (got.double() - ref64).abs().max().item()
    theirs = (cpu.double() - ref64).abs().max().item()
    ulp = EPS[got.dtype] * ref64.abs().max().item()
    assert ours <= 2 * theirs + ulp, f"error {ours:.3e}, torch's {theirs:.3e} (ulp {ulp:.3e})"


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=torch.float64).to(dtype)
