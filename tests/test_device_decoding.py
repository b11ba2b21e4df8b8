"""The compile pass's rewrites for decoding (torch_opencl/compile/decoding.py) on the opencl
device, with transformers' own modules: Llama's norm before a layer's products, its gated MLP
and its residual connections become options of torch.ops.oclf.mm_group; GPT-2's layer norms
and residual connections options of torch.ops.oclf.addmm_act. Run where few-row products run
as on a GPU (OCLF_DEVICE_MATMUL=gpu); results against eager and float64, and the number of
launches a step makes."""
import pytest
import torch

from compile_checks import close, fresh_compile
from device_checks import logged_launches

llama = pytest.importorskip("transformers.models.llama.modeling_llama")
LlamaConfig = pytest.importorskip("transformers").LlamaConfig


@pytest.fixture
def device(opencl_device, monkeypatch):
    monkeypatch.setenv("OCLF_DEVICE_MATMUL", "gpu")
    yield from fresh_compile(opencl_device, monkeypatch)


def three_ways(make, shape, dtype):
    """make()'s module (seeded, eval) in dtype on the device, compiled, on an input of `shape`:
    (its outputs, the generated code, the kernels its call launched), then the same module's
    eager outputs and float64 outputs on the CPU from the same weights."""
    from torch._inductor.utils import run_and_get_code

    torch.manual_seed(0)
    block = make().eval()
    x = torch.randn(shape)
    ours = block.to(dtype).to("opencl")
    dx = x.to(dtype).to("opencl")
    with torch.no_grad():
        with logged_launches() as launches:
            out, code = run_and_get_code(torch.compile(ours), dx)
        eager = ours(dx)
        ref = make().eval()
        ref.load_state_dict({k: v.double() for k, v in block.state_dict().items()})
        want = ref.double()(x.to(dtype).double())
    return out, "\n".join(code), [kernel for _, kernel, _ in launches], eager, want


class Block(torch.nn.Module):
    """A Llama decoder layer's products around its attention, as transformers writes them:
    h = x + o(norm₁(x) through q, k and v), out = h + mlp(norm₂(h)), then the final norm and a
    head. (The attention itself is replaced by a product of q, k and v: the rewrites concern
    what surrounds it.)"""

    def __init__(self, config):
        super().__init__()
        hidden = config.hidden_size
        self.norm1 = llama.LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.q, self.k, self.v = (torch.nn.Linear(hidden, n, bias=False) for n in (hidden, 24, 24))
        self.o = torch.nn.Linear(hidden, hidden, bias=False)
        self.norm2 = llama.LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.mlp = llama.LlamaMLP(config)
        self.final = llama.LlamaRMSNorm(hidden, eps=1e-6)
        self.head = torch.nn.Linear(hidden, 37, bias=False)
        for norm in (self.norm1, self.norm2, self.final):
            torch.nn.init.uniform_(norm.weight, 0.5, 1.5)

    def forward(self, x):
        y = self.norm1(x)
        q, k, v = self.q(y), self.k(y), self.v(y)
        h = x + self.o(q * (k.sum(-1, keepdim=True) + v.mean(-1, keepdim=True)))
        h = h + self.mlp(self.norm2(h))
        return self.head(self.final(h)), h


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 3])
def test_norm_gate_and_residuals_become_product_options(device, dtype, rows):
    config = LlamaConfig(hidden_size=96, intermediate_size=200, hidden_act="silu", rms_norm_eps=1e-5)
    (logits, h), source, kernels, eager, want = three_ways(lambda: Block(config), (1, rows, 96), dtype)
    calls = [line for line in source.splitlines() if "torch.ops.oclf.mm_group.default(" in line]
    assert sum("rms_weight" in c for c in calls) == 3, calls  # q/k/v, gate/up and the head
    assert sum("glu = 'silu'" in c or "glu='silu'" in c for c in calls) == 1, calls
    assert sum("residual" in c for c in calls) == 2, calls  # after o and after down
    assert "extern_kernels.mm(" not in source, source
    # Seven products in five launches (q, k and v in one, gate and up in one); the other kernels
    # are the sum, the mean and q's scaling: no norm, activation or residual add of their own.
    assert kernels.count("gemm16_rows_kc_group") == 5 and len(kernels) == 8, kernels
    tol = 5e-3 if dtype == torch.float16 else 3e-2
    for got, exact, ref_value in zip((logits, h), eager, want):
        close(got, exact, tol=tol)
        close(got, ref_value, tol=tol)


class Gpt2Block(torch.nn.Module):
    """GPT-2's layer around its attention, with transformers' Conv1D and MLP: h = x +
    proj(ln₁(x) through c_attn), out = h + mlp(ln₂(h)) (the attention replaced by a product of
    c_attn's three parts)."""

    def __init__(self, hidden):
        super().__init__()
        from transformers import GPT2Config
        from transformers.models.gpt2 import modeling_gpt2 as gpt2

        self.ln_1, self.ln_2 = torch.nn.LayerNorm(hidden), torch.nn.LayerNorm(hidden)
        self.c_attn, self.c_proj = gpt2.Conv1D(3 * hidden, hidden), gpt2.Conv1D(hidden, hidden)
        self.mlp = gpt2.GPT2MLP(4 * hidden, GPT2Config(n_embd=hidden))
        for p in self.parameters():
            torch.nn.init.uniform_(p, -0.3, 0.3)
        for ln in (self.ln_1, self.ln_2):
            torch.nn.init.uniform_(ln.weight, 0.5, 1.5)

    def forward(self, x):
        q, k, v = self.c_attn(self.ln_1(x)).chunk(3, -1)
        h = x + self.c_proj(q * torch.sigmoid(k) + v)
        return h + self.mlp(self.ln_2(h))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 5])
def test_layer_norms_and_residuals_become_addmm_options(device, dtype, rows):
    """GPT-2's layer: each layer norm goes into the product after it (addmm_act's norm_weight
    and norm_bias), each residual add into the product before it: four launches of
    gemm16_rows_nc and one kernel for the attention's stand-in."""
    out, source, kernels, eager, want = three_ways(lambda: Gpt2Block(96), (1, rows, 96), dtype)
    calls = [line for line in source.splitlines() if "torch.ops.oclf.addmm_act.default(" in line]
    assert len(calls) == 4, calls
    assert sum("norm_weight" in c for c in calls) == 2 and sum("residual" in c for c in calls) == 2, calls
    assert kernels.count("gemm16_rows_nc") == 4 and len(kernels) == 5, kernels
    tol = 5e-3 if dtype == torch.float16 else 3e-2
    close(out, eager, tol=tol)
    close(out, want, tol=tol)


def test_cpu_devices_keep_inductors_kernels(device, monkeypatch):
    """Where few-row products do not run as on a GPU (a CPU device, OCLF_DEVICE_MATMUL=auto),
    the norm, gate and residual stay Inductor's kernels: their options would only run as
    torch operations there. The values stay eager's."""
    import torch_opencl
    from torch._inductor.utils import run_and_get_code

    if torch_opencl.get_device_properties().type != "CPU":
        pytest.skip("GPUs run the options in their product kernels")
    monkeypatch.setenv("OCLF_DEVICE_MATMUL", "auto")
    config = LlamaConfig(hidden_size=96, intermediate_size=200, hidden_act="silu", rms_norm_eps=1e-5)
    torch.manual_seed(0)
    block = Block(config).eval().half().to("opencl")
    x = torch.randn(1, 1, 96).half().to("opencl")
    with torch.no_grad():
        (logits, _), code = run_and_get_code(torch.compile(block), x)
        eager, _ = block(x)
    source = "\n".join(code)
    assert "mm_group" in source and not any(word in source for word in ("rms_weight", "glu=", "residual=")), source
    close(logits, eager, tol=5e-3)
