"""16-bit products and attention on tensor cores (kernels/gemm16_mma.cl, flash_attention.cl;
csrc/aten/gemm16_mma.cpp, flash_attention.cpp).

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
from opencl_functions import devices

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
    (split-K: partial sums, then gemm16_mma_sum), each over a shape with partial blocks and a
    partial chunk of k (20 × 37 × 70), every layout of A and B."""
    monkeypatch.setenv("OCLF_MMA", "emulate")
    monkeypatch.setenv("OCLF_MMA_TILE", tile)
    with logged_launches() as logged:
        for ours, cpu, ref in products(dtype, 20, 37, 70):
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


def attention(dtype, batch, heads, kv_heads, rows, keys, width, value_width, causal, scale=None):
    """(ours, torch's CPU result at the dtype, float64) of scaled_dot_product_attention: the
    query as the (B, L, H, D) layout a model's projections give, transposed; the key a slice of
    wider rows (the kernel cannot copy from them: copied first); grouped heads when kv_heads < heads;
    scale None for torch's 1/√width."""
    q = randn(batch, rows, heads, width, dtype=dtype).transpose(1, 2)
    k = randn(batch, kv_heads, keys, width + 3, dtype=dtype)[..., :width]
    v = randn(batch, kv_heads, keys, value_width, dtype=dtype)
    grouped = kv_heads != heads
    def run(*ts):
        return F.scaled_dot_product_attention(*ts, is_causal=causal, enable_gqa=grouped, scale=scale)

    return run(*(t.to("opencl") for t in (q, k, v))), run(q, k, v), run(*(t.double() for t in (q, k, v)))


def attention_launches():
    """The attention kernels launched since the launch log started or was last read."""
    kernels = [launch["kernel"] for launch in devices.launch_log_take()]
    return [kernel for kernel in kernels if "attention" in kernel or kernel == "sdpa_forward"]


@pytest.mark.parametrize("dtype, shape, causal, block, scale", [
    # grouped heads, a partial block of rows; the block for the widths (2 pieces of rows a warp)
    (torch.float16, (1, 4, 2, 70, 37, 16, 32), False, "", None),
    # blocks of keys smaller than of rows (the queries come in twice), the last partial, causal;
    # a negative scale (the query's signs flipped)
    (torch.bfloat16, (1, 2, 2, 19, 130, 32, 16), True, "2,2,32", -0.4),
    # one piece a warp, three blocks of keys with the last partial, two row blocks; a large
    # scale (the row maxima far from 0, the weights near one-hot)
    (torch.float16, (2, 2, 1, 40, 80, 16, 16), True, "2,1,32", 3.0),
    # head widths whose rows are not whole groups of 8 chunks (80: 10, 96: 12): the swizzle
    # keeps each chunk in its row
    (torch.float16, (1, 2, 1, 20, 21, 80, 96), True, "1,1,16", None),
])
def test_emulated_flash_attention_against_float64(dtype, shape, causal, block, scale, monkeypatch):
    """Any device: flash_attention.cl with its warp instructions emulated (OCLF_MMA=emulate),
    no worse than torch's CPU at the dtype against float64, on blocks of its several shapes
    (OCLF_FLASH_BLOCK)."""
    monkeypatch.setenv("OCLF_MMA", "emulate")
    monkeypatch.setenv("OCLF_FLASH_BLOCK", block)
    devices.launch_log_start()
    try:
        ours, cpu, ref = attention(dtype, *shape, causal, scale)
        no_worse(ours, cpu, ref)
        assert attention_launches() == ["flash_attention"]
    finally:
        devices.launch_log_stop()


def test_attention_without_tensor_cores(monkeypatch):
    """OCLF_MMA=0 or OCLF_FLASH_ATTENTION=0: 16-bit attention runs attention.cl's kernel; a mask
    takes it too; a bad OCLF_FLASH_ATTENTION raises naming it."""
    monkeypatch.setenv("OCLF_MMA", "0")
    devices.launch_log_start()
    try:
        ours, cpu, ref = attention(torch.float16, 1, 2, 2, 9, 11, 16, 16, True)
        no_worse(ours, cpu, ref)
        assert attention_launches() == ["sdpa_forward"]
        monkeypatch.setenv("OCLF_MMA", "emulate")
        q = randn(1, 2, 9, 16, dtype=torch.float16)
        mask = torch.rand(9, 9) > 0.3
        got = F.scaled_dot_product_attention(*(q.to("opencl"),) * 3, attn_mask=mask.to("opencl"))
        no_worse(got, F.scaled_dot_product_attention(q, q, q, attn_mask=mask),
                 F.scaled_dot_product_attention(*(q.double(),) * 3, attn_mask=mask))
        assert attention_launches() == ["sdpa_forward"]
        monkeypatch.setenv("OCLF_FLASH_ATTENTION", "0")
        ours, cpu, ref = attention(torch.float16, 1, 2, 2, 9, 11, 16, 16, False)
        no_worse(ours, cpu, ref)
        assert attention_launches() == ["sdpa_forward"]
        monkeypatch.setenv("OCLF_FLASH_ATTENTION", "yes")
        with pytest.raises(RuntimeError, match="OCLF_FLASH_ATTENTION must be 0 or 1"):
            attention(torch.float16, 1, 2, 2, 9, 11, 16, 16, False)
    finally:
        devices.launch_log_stop()


@pytest.mark.skipif(not NVIDIA, reason="tensor cores are NVIDIA's; test_emulated_flash_attention_against_float64 "
                    "runs the kernel's index math here")
@pytest.mark.parametrize("dtype", HALVES)
def test_flash_attention_on_tensor_cores_against_float64(dtype, monkeypatch):
    """NVIDIA: 16-bit attention without a mask runs flash_attention.cl on tensor cores (by
    default), no worse than torch's CPU at the dtype: head widths 64 and 128,
    rows past what local memory holds, causal and grouped heads, odd lengths, a negative scale;
    the default blocks of each width and mask."""
    monkeypatch.delenv("OCLF_FLASH_ATTENTION", raising=False)
    monkeypatch.delenv("OCLF_FLASH_BLOCK", raising=False)
    devices.launch_log_start()
    cases = [((2, 8, 8, 129, 1000, 64, 64), False, None), ((1, 8, 2, 1000, 1000, 128, 128), True, None),
             ((1, 4, 4, 1, 4099, 64, 64), False, None), ((3, 2, 1, 77, 77, 16, 48), True, None),
             ((2, 4, 2, 300, 517, 128, 128), False, -0.1), ((1, 2, 2, 250, 250, 96, 64), True, None)]
    try:
        for shape, causal, scale in cases:
            ours, cpu, ref = attention(dtype, *shape, causal, scale)
            no_worse(ours, cpu, ref)
        assert attention_launches() == ["flash_attention"] * len(cases)
    finally:
        devices.launch_log_stop()
