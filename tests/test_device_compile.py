"""torch.compile on the opencl device (opencl_functions/device/compile/): Inductor's fusion
groups become generated OpenCL kernels, convolutions and products stay the device's own
operators, and each compiled graph runs as one recording replayed after its first calls.

Results are compared with float64 on the CPU, the device's eager results beside them (the
compiled error must be within a few times eager's, both being float32 rounding). Shapes
are odd (7, 33) so no kernel gets a multiple of its work-group size. The whole networks
(ResNet-50, MobileNetV2, GPT-2, BERT, Llama: inference and a training step) are slow."""
import copy
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn


@pytest.fixture
def device(opencl_device, monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "error")
    import torch._dynamo

    torch._dynamo.reset()
    from opencl_functions.device.compile import runtime

    runtime.counters.clear()
    yield opencl_device
    torch._dynamo.reset()


def counters():
    from opencl_functions.device.compile import runtime

    return runtime.counters


def close(out, ref, tol=1e-5):
    out, ref = out.detach().cpu().double(), ref.detach().cpu().double()
    scale = max(ref.abs().max().item(), 1.0)
    assert out.shape == ref.shape
    assert (out - ref).abs().max().item() <= tol * scale, (out - ref).abs().max().item()


def pointwise_and_reductions(x, w, b):
    """Chains of pointwise ops and the reductions that end them: one fusion group each."""
    h = F.gelu(x * w + b) - torch.sigmoid(x).clamp(0.2, 0.7)
    return (torch.softmax(h, -1), F.layer_norm(h, h.shape[-1:]), h.sum(0), h.amax(1), h.argmax(1),
            torch.var_mean(h, 0, correction=1)[0], torch.where(h > 0, h, h.exp() - 1).mean(), F.log_softmax(x, 0))


def test_fused_kernels_match_float64(device):
    torch.manual_seed(0)
    x, w, b = torch.randn(7, 33), torch.randn(33), torch.randn(7, 1)
    dev = [t.to("opencl") for t in (x, w, b)]
    from torch._inductor import config
    from torch._inductor.utils import run_and_get_code

    with config.patch(fx_graph_cache=False):
        outs, code = run_and_get_code(torch.compile(pointwise_and_reductions, backend="opencl"), *dev)
    refs = pointwise_and_reductions(x.double(), w.double(), b.double())
    for out, ref in zip(outs, refs):
        assert out.device.type == "opencl"
        if out.dtype == torch.int64:
            assert torch.equal(out.cpu(), ref)
        else:
            close(out, ref)
    source = "\n".join(code)
    kernels = source.count("oclf_runtime.GeneratedKernel(")
    assert 1 <= kernels <= 6, kernels  # eight outputs of about thirty ops, fused
    assert "__kernel void opencl_kernel_" in source and "barrier(CLK_LOCAL_MEM_FENCE)" in source


def test_plain_torch_compile_reaches_the_device(device):
    """The default backend (Inductor) finds the device's code generator by itself."""
    x = torch.randn(5, 9)
    out = torch.compile(lambda t: (t.tanh() * 3).sum(-1))(x.to("opencl"))
    close(out, (x.double().tanh() * 3).sum(-1))
    assert counters()["built"] >= 1


def test_replays_run_no_host_work_per_kernel_and_held_results_keep(device):
    def f(x):
        return F.silu(x @ x.t()).softmax(-1) + x.sum()

    cf = torch.compile(f)
    inputs = [torch.randn(7, 33) for _ in range(5)]
    held = []
    for i, x in enumerate(inputs):
        launches = torch.opencl.memory_stats()["kernel_launches"] if i >= 2 else None
        held.append(cf(x.to("opencl")))
        if launches is not None:  # replays: the graph's commands, not launches one by one
            assert torch.opencl.memory_stats()["kernel_launches"] - launches <= 1
    c = counters()
    assert c["recorded"] == 1 and c["replayed"] == 3, dict(c)
    for out, x in zip(held, inputs):  # each result is still its own (moved off the recording's memory)
        close(out, f(x.double()))
    assert c["relocated"] >= 3


def test_training_step_matches_eager(device):
    """Forward and backward graphs (AOTAutograd), a convolution with batch norm (running
    statistics written in place), max pooling with padding (masked loads), and a compiled
    optimizer step; three steps with new batches."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
                          nn.Flatten(), nn.Linear(6 * 4 * 4, 33), nn.LayerNorm(33), nn.GELU(), nn.Linear(33, 5))
    eager, compiled = copy.deepcopy(model).to("opencl"), copy.deepcopy(model).to("opencl")
    ref = copy.deepcopy(model).double()
    runs = []
    for m, dtype, dev in ((eager, torch.float32, "opencl"), (compiled, torch.float32, "opencl"),
                          (ref, torch.float64, "cpu")):
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2, capturable=m is not ref)
        fwd = torch.compile(m) if m is compiled else m
        step = torch.compile(opt.step) if m is compiled else opt.step
        torch.manual_seed(1)
        losses = []
        for _ in range(3):
            x, t = torch.randn(2, 3, 7, 7), torch.randint(0, 5, (2,))
            loss = F.cross_entropy(fwd(x.to(dev, dtype)), t.to(dev))
            loss.backward()
            step()
            opt.zero_grad()
            losses.append(loss.detach())
        runs.append(losses)
    for eager_loss, compiled_loss, ref_loss in zip(*runs):
        assert abs(compiled_loss.item() - ref_loss.item()) <= 1e-4 * max(1, abs(ref_loss.item()))
    for name, tensor in ref.state_dict().items():
        if tensor.is_floating_point():
            err = (compiled.state_dict()[name].cpu().double() - tensor).abs().max().item()
            eager_err = (eager.state_dict()[name].cpu().double() - tensor).abs().max().item()
            assert err <= max(1e-5, 10 * eager_err), (name, err, eager_err)
    assert counters()["replayed"] >= 1


def test_new_shapes_compile_again(device):
    """Shapes are guarded: a new one compiles again (then with symbolic sizes, passed to
    the kernels as arguments), as torch does."""
    cf = torch.compile(lambda t: torch.softmax(t * 2, -1).cumsum(0)[:, :3] + t.mean())
    for rows, cols in ((7, 33), (5, 17), (3, 40), (9, 33)):
        x = torch.randn(rows, cols)
        close(cf(x.to("opencl")), torch.softmax(x.double() * 2, -1).cumsum(0)[:, :3] + x.double().mean())


def test_graph_breaks_run_as_torch_runs_them(device):
    def f(x):
        y = (x * 2).relu()
        print("", end="")  # a graph break: two graphs, Python between them
        return y.softmax(0) * y.sum()

    x = torch.randn(7, 33)
    close(torch.compile(f, backend="opencl")(x.to("opencl")), f(x.double()))


def test_dtypes_and_integer_rounding(device):
    def f(h, i, m):
        return ((h.float() * 3).to(torch.float16) + h).sum(1), i // -3, torch.remainder(i, -5), (i * m).sum(0)

    h = torch.randn(7, 33).to(torch.float16)
    i = torch.randint(-50, 50, (7, 33))
    m = torch.rand(7, 33) > 0.5
    outs = torch.compile(f)(h.to("opencl"), i.to("opencl"), m.to("opencl"))
    refs = f(h, i, m)
    close(outs[0].float(), refs[0].float(), tol=2e-3)
    for out, ref in zip(outs[1:], refs[1:]):
        assert out.dtype == ref.dtype and torch.equal(out.cpu(), ref)


def test_dropout_draws_new_masks_each_replay(device):
    cf = torch.compile(lambda t: F.dropout(t, 0.5, training=True))
    x = torch.ones(33, 65).to("opencl")
    masks = [cf(x).cpu() for _ in range(4)]
    assert counters()["replayed"] >= 1
    for m in masks:
        assert set(m.unique().tolist()) <= {0.0, 2.0} and 0.4 < (m == 0).float().mean().item() < 0.6
    assert not torch.equal(masks[2], masks[3])


def test_importing_the_device_leaves_inductor_unloaded(device):
    code = ("import sys, opencl_functions.device, torch; "
            "print('torch._inductor' in sys.modules, 'torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.split() == ["False", "False"], out.stderr[-2000:]
