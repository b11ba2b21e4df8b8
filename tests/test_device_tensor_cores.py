"""16-bit products on tensor cores (kernels/gemm16_mma.cl, csrc/aten/gemm16_mma.cpp).

On NVIDIA devices of compute capability 8.0 and later, the opencl device's float16 and
bfloat16 products of more than 8 rows run on tensor cores (inline PTX mma.sync, ldmatrix,
cp.async). Elsewhere OCLF_MMA=emulate runs the same kernel with those warp instructions done
in plain OpenCL C, so that any device checks its index math: fragments, the swizzled local
memory, the edges of m, n and k, every layout of A and B and the copies of the rest. Ours must
be no worse than twice torch's CPU error at the dtype against float64 (plus one unit in the
last place of the result's scale), as in test_device_dtypes.py."""
import opencl_functions
import pytest
import torch
import torch.nn.functional as F

from device_checks import logged_launches

HALVES = [torch.float16, torch.bfloat16]
EPS = {torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}
NVIDIA = "NVIDIA" in opencl_functions.device_info()["platform"]


@pytest.fixture(autouse=True)
def device(opencl_device, monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "error")
    return opencl_device


def randn(*shape, dtype):
    return torch.randn(*shape, dtype=torch.float64).to(dtype)


def no_worse(got, cpu, ref64):
    got = got.cpu()
    assert got.dtype == cpu.dtype and got.shape == ref64.shape
    ours = (got.double() - ref64).abs().max().item()
    theirs = (cpu.double() - ref64).abs().max().item()
    ulp = EPS[got.dtype] * ref64.abs().max().item()
    assert ours <= 2 * theirs + ulp, f"error {ours:.3e}, torch's {theirs:.3e} (ulp {ulp:.3e})"


def products(dtype, m, k, n):
    """(ours, torch's CPU result, float64) for each form torch passes: a transposed A (its m
    contiguous) times B (n contiguous), a linear layer (A's k contiguous, B an n×k weight: its k
    contiguous) with its bias, addmm with alpha and beta, and a batch; the first two read in
    place (rows of 8 elements' multiples, slices of wider tensors), the last two over operands
    the kernel does not read in place (odd offsets and strides: copied)."""
    k8, m8, n8 = ((v + 7) // 8 * 8 for v in (k, m, n))
    at, a, b, w = randn(k, m8, dtype=dtype), randn(m, k8, dtype=dtype), randn(k, n8, dtype=dtype), randn(n, k8, dtype=dtype)
    bias, c, big = randn(n, dtype=dtype), randn(m, n, dtype=dtype), randn(2, m + 1, k + 3, dtype=dtype)
    cuts = lambda at, a, b, w: (at[:, :m].t(), a[:, :k], b[:, :n], w[:, :k])  # noqa: E731
    cpu = cuts(at, a, b, w)
    ours = cuts(*(t.to("opencl") for t in (at, a, b, w)))
    f64 = [t.double() for t in cpu]
    dbias, dc, dbig = (t.to("opencl") for t in (bias, c, big))
    results = []
    for (a_t, a_, b_, w_), bias_, c_, big_ in ((ours, dbias, dc, dbig), (cpu, bias, c, big),
                                                (f64, bias.double(), c.double(), big.double())):
        results.append((a_t @ b_, F.linear(a_, w_, bias_), torch.addmm(c_, a_t, b_, beta=0.5, alpha=2.0),
                        torch.bmm(big_[:, 1:, 3:], b_.expand(2, k, n))))
    return list(zip(*results))


def mma_options(launches):
    return [opts.split() for _, kernel, opts in launches if kernel == "gemm16_mma"]


@pytest.mark.parametrize("dtype, tile", [(torch.float16, "64,64,2,2,2"), (torch.bfloat16, "16,64,1,2,3,16,3")])
def test_emulated_tensor_core_kernel_against_float64(dtype, tile, monkeypatch):
    """Any device: the kernel with its warp instructions emulated, on a block of 4 warps with 2
    stages of 32 values of k, and on one of 16 rows with 3 stages of 16 and k split 3 ways
    (split-K: partial sums, then gemm16_mma_sum), each over shapes with partial blocks and
    partial chunks of k (k = 7, 37), every layout of A and B."""
    monkeypatch.setenv("OCLF_MMA", "emulate")
    monkeypatch.setenv("OCLF_MMA_TILE", tile)
    with logged_launches() as logged:
        for m, k, n in [(9, 7, 17), (20, 37, 70)]:
            for ours, cpu, ref in products(dtype, m, k, n):
                no_worse(ours, cpu, ref)
    launches = mma_options(logged)
    layouts = {("-DA_KC" in o, "-DB_KC" in o) for o in launches}
    assert layouts == {(True, True), (True, False), (False, False)}, layouts
    assert all("-DMMA_EMULATE" in o for o in launches)
    assert any("-DSPLIT_K" in o for o in launches) == tile.endswith(",3")  # k = 37: 3 splits of 16


@pytest.mark.skipif(not NVIDIA, reason="tensor cores are NVIDIA's (the device here is "
                    f"{opencl_functions.device_info()['device']}); test_emulated_tensor_core_kernel_against_float64 "
                    "runs the kernel's index math here")
@pytest.mark.parametrize("dtype", HALVES)
def test_tensor_cores_against_float64(dtype):
    """NVIDIA: products of more than 8 rows run on tensor cores (the blocks chosen per shape),
    no worse than torch's CPU at the dtype, on odd shapes: sizes of 1, 7, 129, 1000."""
    with logged_launches() as logged:
        for m, k, n in [(9, 1, 7), (129, 1000, 7), (1000, 129, 1), (33, 7, 129), (1000, 1000, 1000), (16, 4096, 256)]:
            for ours, cpu, ref in products(dtype, m, k, n):
                no_worse(ours, cpu, ref)
    launches = mma_options(logged)
    assert len(launches) >= 6 * 4 and not any("-DMMA_EMULATE" in o for o in launches)


def test_settings(monkeypatch):
    """OCLF_MMA=0 leaves the products to gemm16_tiled; bad values of OCLF_MMA and OCLF_MMA_TILE
    raise naming the setting."""
    a = randn(12, 16, dtype=torch.float16).to("opencl")
    monkeypatch.setenv("OCLF_MMA", "0")
    with logged_launches() as launches:
        a @ a.t()
    assert [kernel for _, kernel, _ in launches] == ["gemm16_tiled"]
    monkeypatch.setenv("OCLF_MMA", "yes")
    with pytest.raises(RuntimeError, match="OCLF_MMA must be auto, 0 or emulate"):
        a @ a.t()
    monkeypatch.setenv("OCLF_MMA", "emulate")
    for tile in ("64,64,2,2", "48,64,1,2,2", "64,64,2,2,9", "64,64,2,2,2,24,1", "64,64,2,2,2x"):
        monkeypatch.setenv("OCLF_MMA_TILE", tile)
        with pytest.raises(RuntimeError, match="OCLF_MMA_TILE must be BM,BN,WM,WN,STAGES"):
            a @ a.t()
