"""float16 and bfloat16 operators whose torch kernels round each step in the 16-bit type give
torch's values on the opencl device, not those of a composition that rounds other steps.

addr: torch's CPU and CUDA kernels compute beta·self + (alpha·vec1)·vec2 in c10::BFloat16
and c10::Half arithmetic (each product and the sum rounded, beta and alpha first); torch's
composite, which ran on the device, rounds vec1 ⊗ vec2 and alpha times it instead: 16 units
off in bfloat16 (op_db's sample of beta 0.6 and alpha 0.2: -0.21875 where the CPU gives
-0.234375, test_dtypes_addr_opencl_bfloat16)."""
import pytest
import torch


@pytest.fixture
def device(opencl_device, monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "error")
    return opencl_device


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("beta, alpha", [(0.6, 0.2), (1, 1), (-1.3, 3.7), (0, 0.7), (2, 0)])
@pytest.mark.parametrize("shape", [(5, 10), (7, 33), (1, 1)])
def test_addr_rounds_as_torch(device, dtype, beta, alpha, shape):
    g = torch.Generator().manual_seed(sum(shape))
    vec1, vec2 = (torch.randn(n, generator=g).mul(3).to(dtype) for n in shape)
    for self_shape in (shape, (shape[1],), ()):  # self as it is, broadcast along rows, a 0-d one
        self = torch.randn(self_shape, generator=g).mul(3).to(dtype)
        expected = torch.addr(self, vec1, vec2, beta=beta, alpha=alpha)
        got = torch.addr(self.to("opencl"), vec1.to("opencl"), vec2.to("opencl"), beta=beta, alpha=alpha).cpu()
        assert got.dtype == dtype
        assert torch.equal(got, expected), f"self {self_shape}: largest difference {(got - expected).abs().max()}"
        out = torch.empty(0, dtype=dtype, device="opencl")
        torch.addr(self.to("opencl"), vec1.to("opencl"), vec2.to("opencl"), beta=beta, alpha=alpha, out=out)
        assert torch.equal(out.cpu(), expected)


def test_addr_with_beta_zero_ignores_self(device):
    self = torch.full((3, 4), float("nan"), dtype=torch.bfloat16)
    vec1, vec2 = torch.arange(3.0).to(torch.bfloat16), torch.arange(4.0).to(torch.bfloat16)
    got = torch.addr(self.to("opencl"), vec1.to("opencl"), vec2.to("opencl"), beta=0, alpha=0.5).cpu()
    assert torch.equal(got, torch.addr(self, vec1, vec2, beta=0, alpha=0.5))


def test_addr_in_place_and_refusals(device):
    self = torch.randn(4, 6).to(torch.bfloat16)
    vec1, vec2 = torch.randn(4).to(torch.bfloat16), torch.randn(6).to(torch.bfloat16)
    on = self.to("opencl")
    on.addr_(vec1.to("opencl"), vec2.to("opencl"), beta=0.6, alpha=0.2)
    assert torch.equal(on.cpu(), self.clone().addr_(vec1, vec2, beta=0.6, alpha=0.2))
    with pytest.raises(RuntimeError, match="1-D argument vec1"):
        torch.addr(on, vec1.view(2, 2).to("opencl"), vec2.to("opencl"))
    with pytest.raises(RuntimeError):
        torch.addr(torch.ones(5, 6, dtype=torch.bfloat16, device="opencl"), vec1.to("opencl"), vec2.to("opencl"))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape, groups", [((1, 6, 3), 2), ((2, 8, 5, 5), 4), ((3, 9, 7), 3)])
def test_group_norm_rounds_once(device, dtype, shape, groups):
    """torch's kernels round the normalized and scaled value once; the composition of batch
    norm and an affine rounded twice (0.0 where the CPU gives 0.0315 in bfloat16)."""
    g = torch.Generator().manual_seed(shape[1])
    x = torch.randn(shape, generator=g).mul(4).to(dtype)
    weight, bias = (torch.randn(shape[1], generator=g).mul(4).to(dtype) for _ in range(2))
    expected = torch.nn.functional.group_norm(x, groups, weight, bias, eps=0.5)
    got = torch.nn.functional.group_norm(x.to("opencl"), groups, weight.to("opencl"), bias.to("opencl"), eps=0.5)
    assert got.dtype == dtype
    unit = torch.finfo(dtype).eps * expected.float().abs()  # one unit in the last place, at most
    off = (got.cpu().float() - expected.float()).abs()
    assert (off <= unit).all(), f"{off.max():.3e} off the CPU where one unit is {unit.flatten()[off.argmax()]:.3e}"
