"""float32 on the opencl device as accurate as torch's own float32: each result's error
against float64 (max-abs, relative to the reference's largest value) within twice torch's
CPU float32 error on the same inputs, for the sums that long accumulations make drift:
convolutions (forward, input and weight gradients), matrix products, reductions eager and
compiled, and a ResNet-18 training step's parameter gradients.

A kernel that sums C_in·K_h·K_w products in one accumulator drifts to several times torch's
error (torch's CPU products sum in blocks); in a network that is enough to flip a ReLU whose
input is within float32 rounding of zero, and every gradient below it moves by 1e-2. The
kernels sum in runs that each start from zero (reference/conv2d_cpu.cl, matmul.cl)."""
import copy

import pytest
import torch
import torch.nn.functional as F

from extras.validation import accuracy

# (batch, C_in, C_out, size, kernel, stride, padding): ResNet's 3×3 and strided layers at the
# small sizes of a 64×64 image, a 7×7 stem, an odd 5×5.
# Products, convolutions and sums each add their terms in runs that start from zero
# (reference/conv2d_cpu.cl, matmul.cl's gemm_cols, kernels/reduce.cl).
CONVS = [(4, 256, 256, 4, 3, 1, 1), (4, 128, 256, 8, 3, 2, 1), (4, 64, 64, 16, 3, 1, 1), (4, 512, 512, 2, 3, 1, 1),
         (4, 256, 512, 4, 1, 2, 0), (4, 3, 64, 32, 7, 2, 3), (2, 8, 16, 33, 5, 2, 2)]


error = accuracy.error  # the largest deviation from the reference, relative to its largest value


def assert_as_accurate(name, device_result, cpu_result, ref, factor=2.0):
    dev, cpu = error(device_result, ref), error(cpu_result, ref)
    # A floor of 1e-7 (under one float32 rounding of the largest value) for results torch
    # computes nearly exactly.
    assert dev <= factor * cpu + 1e-7, f"{name}: device {dev:.2e} against float64, torch's float32 {cpu:.2e}"


def conv_case(shape, seed=0):
    b, cin, cout, size, k, stride, pad = shape
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, cin, size, size, generator=g, dtype=torch.float64).relu()
    w = torch.randn(cout, cin, k, k, generator=g, dtype=torch.float64) / (cin * k * k) ** 0.5
    dy = torch.randn_like(F.conv2d(x, w, None, stride, pad))
    return x, w, dy, stride, pad


@pytest.mark.parametrize("shape", CONVS, ids=lambda s: "x".join(map(str, s)))
def test_convolution_and_its_gradients(opencl_device, shape):
    x, w, dy, stride, pad = conv_case(shape)
    x64, w64 = x.clone().requires_grad_(), w.clone().requires_grad_()
    F.conv2d(x64, w64, None, stride, pad).backward(dy)
    results = {}
    for where in ("cpu", "opencl"):
        xs, ws = x.float().to(where).requires_grad_(), w.float().to(where).requires_grad_()
        y = F.conv2d(xs, ws, None, stride, pad)
        y.backward(dy.float().to(where))
        results[where] = (y, xs.grad, ws.grad)
    y64 = F.conv2d(x, w, None, stride, pad)
    for i, (name, ref) in enumerate([("output", y64), ("input gradient", x64.grad), ("weight gradient", w64.grad)]):
        assert_as_accurate(name, results["opencl"][i], results["cpu"][i], ref)


@pytest.mark.parametrize("m,k,n", [(4, 512, 10), (64, 768, 768), (7, 3072, 768), (128, 4096, 64), (33, 1000, 17)])
def test_matrix_products(opencl_device, m, k, n):
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(m, k, generator=g, dtype=torch.float64), torch.randn(k, n, generator=g, dtype=torch.float64)
    weight = torch.randn(n, k, generator=g, dtype=torch.float64)
    cases = [("a @ b", lambda p, q, r: p @ q), ("linear", lambda p, q, r: F.linear(p, r))]
    for name, f in cases:
        ref = f(a, b, weight)
        cpu = f(a.float(), b.float(), weight.float())
        dev = f(a.float().to("opencl"), b.float().to("opencl"), weight.float().to("opencl"))
        assert_as_accurate(f"{name} {m}x{k}x{n}", dev, cpu, ref)


# CLBlast's products (OCLF_DEVICE_MATMUL=clblast sends every product there, as GPUs send
# products of many rows): a K over 256 runs in partial products whose sums are added
# (csrc/aten/split_k.cpp). Transposed operands, a K that leaves a shorter last part, scaled
# accumulation into the output, batches.
SPLIT_K_CASES = {
    "a @ b": lambda p, q: p @ q,
    "aᵀ @ bᵀ": lambda p, q: p.t().contiguous().t() @ q.t().contiguous().t(),
    "addmm 0.5, 2": lambda p, q: torch.addmm(torch.ones(p.shape[0], q.shape[1], dtype=p.dtype, device=p.device),
                                             p, q, beta=0.5, alpha=2.0),
    "bmm": lambda p, q: torch.bmm(torch.stack([p, p.flip(0)]), torch.stack([q, q.flip(1)])),
    "bmm of a transposed batch": lambda p, q: torch.bmm(torch.stack([p, -p]), torch.stack([q.t(), q.t()]).mT),
}


@pytest.mark.parametrize("name", list(SPLIT_K_CASES))
@pytest.mark.parametrize("m,k,n", [(64, 768, 96), (17, 2049, 33), (9, 257, 5)])
def test_products_over_a_long_k_on_clblast(opencl_device, monkeypatch, name, m, k, n):
    monkeypatch.setenv("OCLF_DEVICE_MATMUL", "clblast")
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(m, k, generator=g, dtype=torch.float64), torch.randn(k, n, generator=g, dtype=torch.float64)
    f = SPLIT_K_CASES[name]
    assert_as_accurate(f"{name} {m}x{k}x{n}", f(a.float().to("opencl"), b.float().to("opencl")), f(a.float(), b.float()),
                       f(a, b))


REDUCTIONS = {
    "sum": lambda t: t.sum(), "mean": lambda t: t.mean(), "norm": lambda t: t.norm(), "sum(0)": lambda t: t.sum(0),
    "sum(1)": lambda t: t.sum(1), "mean((0, 1))": lambda t: t.mean((0, 1)), "var(1)": lambda t: t.var(1),
    "softmax(1)": lambda t: t.softmax(1), "log_softmax(1)": lambda t: t.log_softmax(1),
}


@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_reductions(opencl_device, name):
    g = torch.Generator().manual_seed(2)
    f = REDUCTIONS[name]
    for shape in [(1 << 20,), (64, 50_001), (333, 77)]:
        x = torch.randn(shape, generator=g, dtype=torch.float64) + 3  # an offset: the sums grow
        if x.dim() == 1 and name not in ("sum", "mean", "norm"):
            continue
        assert_as_accurate(f"{name} of {shape}", f(x.float().to("opencl")), f(x.float()), f(x))


def _batch_norm(t):
    return F.batch_norm(t, None, None, training=True)


# Compiled reductions (compile/reductions.py) against float64, beside torch's float32 and the
# eager device's: rows of 50,001 elements one work-item walks (a CPU device's serial mode) and
# batch norms over 2,178 and 50,176 values a channel (of mean 1000: the mean's own error shows).
COMPILED = {"sum(1)": ((64, 50_001), REDUCTIONS["sum(1)"]), "var(1)": ((64, 50_001), REDUCTIONS["var(1)"]),
            "softmax(1)": ((64, 50_001), REDUCTIONS["softmax(1)"]),
            "batch_norm": ((2, 16, 33, 33), _batch_norm), "batch_norm, 64 channels": ((8, 64, 28, 28), _batch_norm)}


@pytest.mark.parametrize("name", list(COMPILED))
def test_compiled_reductions(opencl_device, name):
    """Within twice the larger of torch's float32 error and the eager device's: summed in one
    accumulator a row, they were 8 (sum), 20 (var) and 10 (a batch norm's output) times it."""
    shape, f = COMPILED[name]
    x = torch.randn(shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    x = x + (1000 if f is _batch_norm else 3)
    ref = f(x)
    cpu, eager = error(f(x.float()), ref), error(f(x.float().to("opencl")), ref)
    torch._dynamo.reset()
    compiled = error(torch.compile(f)(x.float().to("opencl")), ref)
    assert compiled <= 2 * max(cpu, eager) + 1e-7, \
        f"{name}: compiled {compiled:.2e} against float64, torch's float32 {cpu:.2e}, eager {eager:.2e}"


def resnet18_step_errors(seed: int) -> list:
    """(device error, torch float32 error, parameter) of every gradient of one training step."""
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(seed)
    net = torchvision.models.resnet18(num_classes=10).train()
    x, t = torch.randn(4, 3, 64, 64), torch.randint(0, 10, (4,))

    def grads(model, x, t):
        F.cross_entropy(model(x), t).backward()
        return {name: p.grad.detach().cpu().double() for name, p in model.named_parameters()}

    ref = grads(copy.deepcopy(net).double(), x.double(), t)
    cpu = grads(copy.deepcopy(net), x, t)
    dev = grads(copy.deepcopy(net).to("opencl"), x.to("opencl"), t.to("opencl"))
    return [(error(dev[name], ref[name]), error(cpu[name], ref[name]), name) for name in ref]


@pytest.mark.parametrize("seed", [4, 5, pytest.param(0, marks=pytest.mark.slow), pytest.param(1, marks=pytest.mark.slow),
                                  pytest.param(2, marks=pytest.mark.slow), pytest.param(3, marks=pytest.mark.slow),
                                  pytest.param(6, marks=pytest.mark.slow), pytest.param(7, marks=pytest.mark.slow),
                                  pytest.param(8, marks=pytest.mark.slow), pytest.param(9, marks=pytest.mark.slow)])
def test_resnet18_training_step_gradients(opencl_device, seed):
    """Seeds 4 and 5 once gave gradients 1e-3 to 1e-1 off: a ReLU input within rounding of
    zero came out on the other side of it."""
    rows = resnet18_step_errors(seed)
    worse = [f"{name}: device {dev:.2e}, torch float32 {cpu:.2e}" for dev, cpu, name in rows if dev > 2 * cpu + 1e-7]
    assert not worse, "\n".join(worse)


def test_op_db_and_module_db_pinned_selection(opencl_device):
    """The long sums of torch's OpInfo and ModuleInfo databases (extras/validation/accuracy.py's
    pinned ops and modules: reductions, norms, products, convolutions, losses, scatter-adds,
    attention, recurrent layers), outputs and gradients, each within the bound."""
    results = accuracy.run(accuracy.select_ops(accuracy.PINNED_OPS), accuracy.select_modules(accuracy.PINNED_MODULES))
    print(accuracy.table(results))
    compared = {r.name for r in results}
    assert len(compared) >= 40, f"only {sorted(compared)} compared"
    failed = [r for r in results if r.failed]
    assert not failed, "\n".join(map(str, failed))


# Results over the bound, each with why. nn.Transformer's sample 21 (d_model 4, norm first, no
# bias): the encoder's first layer norm's weight gradient sums six products that nearly cancel,
# which magnifies its inputs' error (torch's own float32 error 1.8e-6 there, ten times its
# inputs'); the gradient reaching it is 1.6x torch's error, the sum 2.5x.
KNOWN = {("nn.Transformer", 21, "result 7 of 20")}


@pytest.mark.slow
def test_op_db_and_module_db_whole(opencl_device):
    """Every float32 op and module, 4 samples each spread over its list (PoCL, Zen 4: 612 ops
    and modules, 5403 results, 17 without float32 digits, one over the bound: KNOWN)."""
    results = accuracy.run(accuracy.select_ops(None), accuracy.select_modules(None))
    print(accuracy.table(results))
    failed = [r for r in results if r.failed and (r.name, r.sample, r.what) not in KNOWN]
    assert not failed, "\n".join(map(str, failed))
