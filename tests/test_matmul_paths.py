"""The reference's own matrix products (reference/matmul.cl: gemm_rows, gemm_cols, conv2d_gpu as
a GEMM) against torch, each forced through OCLF_MATMUL: one-row and one-column products,
sizes that are not multiples of any vector or block (1, 7, 33, 65), B stored K×N or N×K
(a weight's transpose), resident or not, A transposed or strided, and the GPU
configurations (work-groups sharing a row, K split in local memory and over work-groups)
run on whatever device is there."""
import pytest
import torch
from sweeps import first_of_each_kind

SHAPES = [(1, 1, 1), (1, 33, 7), (1, 100, 65), (7, 33, 1), (2, 7, 33), (9, 65, 33), (33, 200, 70)]
LAYOUTS = ["kxn", "nxk", "kxn_resident", "nxk_resident", "a_transposed", "a_strided"]


def operands(m, k, n, layout):
    gen = torch.Generator().manual_seed(m * 10007 + k * 101 + n)
    a = torch.randn(m, k, generator=gen)
    if layout == "a_transposed":
        a = a.t().contiguous().t()
    elif layout == "a_strided":
        a = torch.randn(m, 2 * k, generator=gen)[:, ::2]
    b = torch.randn(k, n, generator=gen) / k**0.5
    if layout.startswith("nxk"):
        w = torch.randn(n, k, generator=gen) / k**0.5
        b = torch.nn.Parameter(w, requires_grad=False).t() if layout.endswith("resident") else w.t()
    elif layout == "kxn_resident":
        b = torch.nn.Parameter(b, requires_grad=False)
    return a, b


def check(ocl, m, k, n, layout):
    a, b = operands(m, k, n, layout)
    out = ocl.ocl_matmul(a, b)
    torch.testing.assert_close(out, a @ b, atol=1e-4, rtol=1e-4,
                               msg=lambda msg: f"{msg}\n{m}x{k} @ {k}x{n}, {layout}")


@pytest.mark.parametrize("path", ["rows", "cols", "conv", "clblast", ""])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_each_path_on_awkward_shapes(ocl, monkeypatch, path, layout):
    monkeypatch.setenv("OCLF_MATMUL", path)
    for m, k, n in SHAPES:
        check(ocl, m, k, n, layout)


CONFIGS = [
    "rows VW=16 MR=1 RN=8 LX=1 LY=1", "rows VW=8 MR=3 RN=2 LX=1 LY=1", "rows VW=4 MR=8 RN=1 LX=1 LY=1",
    "rows VW=4 MR=2 RN=1 LX=32 LY=4", "rows VW=4 MR=1 RN=2 LX=64 LY=2", "rows VW=4 MR=8 RN=2 LX=16 LY=4 KF=1",
    "cols VW=16 MR=1 CPW=4 LX=1 LY=1", "cols VW=8 MR=5 CPW=1 LX=1 LY=1",
    "cols VW=4 MR=3 CPW=1 LX=64 LY=4", "cols VW=4 MR=1 CPW=2 LX=32 LY=8", "cols VW=4 MR=8 CPW=2 LX=32 LY=4",
    "conv TM=32 TN=64 WM=4 WN=4 TK=32 ST=4", "conv TM=32 TN=32 WM=4 WN=4 TK=16 ST=8",
]


@pytest.mark.parametrize("config", first_of_each_kind(CONFIGS))
def test_each_configuration(ocl, monkeypatch, config):
    """Every block shape the candidates use, the GPUs' ones included (local sums, split K)."""
    monkeypatch.setenv("OCLF_MATMUL", config)
    layouts = {"rows": ["nxk", "kxn_resident"], "cols": ["kxn", "kxn_resident", "a_transposed"],
               "conv": ["kxn", "kxn_resident", "nxk_resident"]}[config.split()[0]]
    for layout in layouts:
        for m, k, n in SHAPES + [(3, 517, 300), (20, 1000, 30)]:  # the last: split K on 2 compute units
            check(ocl, m, k, n, layout)


def test_linear_layer_forward_and_backward(ocl):
    """A linear layer's three products through the patched path: forward (x @ Wᵀ), grad_input
    (g @ W, W resident and K×N) and grad_weight (gᵀ @ x, A transposed)."""
    from utils.functional import linear

    torch.manual_seed(0)
    layer = torch.nn.Linear(33, 7)
    x = torch.randn(5, 33, requires_grad=True)
    out = linear(x, layer.weight, layer.bias)
    ref_x = x.detach().clone().requires_grad_()
    ref = torch.nn.functional.linear(ref_x, layer.weight, layer.bias)
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    g = torch.randn_like(ref)
    out.backward(g)
    grad_w = layer.weight.grad.clone()
    layer.weight.grad = None
    ref.backward(g)
    torch.testing.assert_close(x.grad, ref_x.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(grad_w, layer.weight.grad, atol=1e-4, rtol=1e-4)
