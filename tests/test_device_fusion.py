"""Fused convolutions of the opencl device: torch.ops.oclf.conv2d_fused (a residual and an
activation stored by the convolution kernel itself, reference/epilogue.h) against the
separate operations, on every kernel kind that can write the output; products with their
activation (torch.ops.oclf.addmm_act) on each product kernel; and
torch_opencl.fuse(), which rewrites eval models into it, against the model it
came from (float64 on the CPU as the reference), what it fuses and what it leaves alone."""
import operator

import pytest
import torch
import torch.nn.functional as F
import torchvision
from torch import nn

ACTIVATIONS = ["none", "relu", "relu6", "silu", "gelu", "hardswish", "gelu_tanh", "sigmoid", "tanh"]


@pytest.fixture(autouse=True)
def native_only(opencl_device, monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "error")


def close(got, ref, tol=2e-5):
    got, ref = got.detach().cpu().double(), ref.detach().cpu().double()
    assert got.shape == ref.shape
    err = (got - ref).abs().max().item() / max(ref.abs().max().item(), 1e-6)
    assert err <= tol, f"max error {err:.3g} of the largest value"


def fused(x, w, b, r, stride, padding, dilation, groups, act, device):
    to = (lambda t: None if t is None else t.to(device))
    return torch.ops.oclf.conv2d_fused(to(x), to(w), to(b), to(r), [stride] * 2, [padding] * 2, [dilation] * 2,
                                       groups, act)


# (input, weight, stride, padding, dilation, groups): a 3×3, a 1×1 whose output tiles are too
# few for the device (split-K on GPU paths), a strided dilated grouped 5×5, a depthwise 3×3 at
# stride 2 and a 7×7 stem, on odd sizes.
LAYERS = [((2, 8, 13, 11), (12, 8, 3, 3), 1, 1, 1, 1), ((1, 512, 4, 4), (24, 512, 1, 1), 1, 0, 1, 1),
          ((3, 4, 17, 19), (8, 2, 5, 5), 2, 2, 2, 2), ((2, 6, 9, 10), (6, 1, 3, 3), 2, 1, 1, 6),
          ((1, 3, 30, 29), (16, 3, 7, 7), 2, 3, 1, 1)]


@pytest.mark.parametrize("kind", ["auto", "gpu", "wino", "depthwise kinds"])
def test_fused_convolution_matches_the_separate_operations(kind, monkeypatch):
    """Every activation, with or without a residual and a bias, on the device's own kernel
    choice, the GPU kernels (split-K included), Winograd and each depthwise kernel."""
    if kind != "auto":
        monkeypatch.setenv("OCLF_DEVICE_CONV", "gpu")
    if kind == "wino":
        monkeypatch.setenv("OCLF_CONV_KERNEL", "wino")
    gen = torch.Generator().manual_seed(0)
    for layer, (xs, ws, stride, padding, dilation, groups) in enumerate(LAYERS):
        x = torch.randn(xs, generator=gen) * 2
        w = torch.randn(ws, generator=gen) / (ws[1] * ws[2] * ws[3]) ** 0.5
        b = torch.randn(ws[0], generator=gen)
        ref = F.conv2d(x, w, b, stride, padding, dilation, groups)
        r = torch.randn(ref.shape, generator=gen)
        depthwise_kinds = ["dw_rows", "dw_tiled", "depthwise", "depthwise_cpu"] if groups == xs[1] == ws[0] else []
        for forced in depthwise_kinds if kind == "depthwise kinds" else [None]:
            if forced:
                monkeypatch.setenv("OCLF_CONV_KERNEL", forced)
            # Two activations a layer, in turn (each activation on some layer), each with one of
            # the three residual and bias cases, in turn: each case is a program of its own to
            # build, and all six activations on every layer took minutes a kind on PoCL.
            for k in (2 * layer, 2 * layer + 1):
                act = ACTIVATIONS[k % len(ACTIVATIONS)]
                for res, bias in [((None, b), (r, b), (r, None))[k % 3]]:
                    want = fused(x.double(), w.double(), None if bias is None else bias.double(),
                                 None if res is None else res.double(), stride, padding, dilation, groups, act, "cpu")
                    close(fused(x, w, bias, res, stride, padding, dilation, groups, act, "opencl"), want)


def test_fused_convolution_keeps_nan_as_torch_does():
    x = torch.randn(1, 4, 6, 6)
    x[0, 1, 2, 3] = float("nan")
    w, r = torch.randn(8, 4, 3, 3), torch.randn(1, 8, 6, 6)
    for act in ACTIVATIONS:
        want = fused(x, w, None, r, 1, 1, 1, 1, act, "cpu")
        got = fused(x, w, None, r, 1, 1, 1, 1, act, "opencl").cpu()
        assert torch.equal(got.isnan(), want.isnan()), act
        close(got.nan_to_num(), want.nan_to_num())


def test_other_operands_run_as_the_separate_operations():
    """A broadcast residual, 16-bit operands and conv1d-sized lists stay correct (they take
    the separate operations, on the device)."""
    x, w, b = torch.randn(2, 4, 8, 8), torch.randn(6, 4, 3, 3), torch.randn(6)
    r = torch.randn(1, 6, 1, 1)
    close(fused(x, w, b, r, 1, 1, 1, 1, "relu", "opencl"), fused(x, w, b, r, 1, 1, 1, 1, "relu", "cpu"))
    half = fused(x.half(), w.half(), b.half(), None, 1, 1, 1, 1, "silu", "opencl")
    assert half.dtype == torch.float16
    close(half, fused(x, w, b, None, 1, 1, 1, 1, "silu", "cpu"), tol=5e-3)


def test_fused_convolution_rejects_bad_arguments():
    x, w = torch.randn(1, 4, 8, 8).to("opencl"), torch.randn(6, 4, 3, 3).to("opencl")
    with pytest.raises(RuntimeError, match="activation must be none, relu"):
        torch.ops.oclf.conv2d_fused(x, w, None, None, [1, 1], [0, 0], [1, 1], 1, "mish")
    with pytest.raises(RuntimeError, match="input has 4 channels, weight expects 12"):
        torch.ops.oclf.conv2d_fused(x, torch.randn(6, 12, 3, 3).to("opencl"), None, None, [1, 1], [0, 0], [1, 1], 1,
                                    "relu")
    with pytest.raises(RuntimeError, match="larger than the padded input"):
        torch.ops.oclf.conv2d_fused(x, torch.randn(6, 4, 9, 9).to("opencl"), None, None, [1, 1], [0, 0], [1, 1], 1,
                                    "relu")


@pytest.mark.parametrize("plan", ["auto", "gpu"])
def test_products_apply_their_activation_as_they_store(plan, monkeypatch):
    """addmm_act against float64: one row (a token) and a few, K long enough to split over
    work-groups, N not a multiple of a vector; the weight as a linear layer stores it (N×K,
    transposed), as transformers' Conv1D does (a K×N parameter: its transposed copy) and K×N
    contiguous; every activation; the device's own plan and the GPU plan; 16-bit operands."""
    monkeypatch.setenv("OCLF_DEVICE_MATMUL", plan)
    gen = torch.Generator().manual_seed(1)
    for (m, k, n), act in zip(((1, 70, 9), (3, 129, 65), (8, 33, 5), (1, 768, 130), (5, 7, 33)) * 2, ACTIVATIONS):
        a, b, bias = (torch.randn(s, generator=gen) for s in ((m, k), (k, n), (n,)))
        want = torch.ops.oclf.addmm_act(bias.double(), a.double(), b.double(), act)
        d = (lambda t: t.to("opencl"))
        for w in (d(b.t().contiguous()).t(), nn.Parameter(d(b)), d(b)):
            close(torch.ops.oclf.addmm_act(d(bias), d(a), w, act), want, tol=1e-4)  # float32 sums of K terms
    # 16-bit products apply it as they store (gemm16.cl): float16 and bfloat16, one row and a
    # few, a linear layer's weight and a K×N one; then float64 of the 16-bit operands decides.
    for dtype, tol in ((torch.float16, 4e-3), (torch.bfloat16, 2e-2)):
        for (m, k, n), act in zip(((1, 40, 24), (5, 33, 7), (9, 64, 21)), ("gelu_tanh", "silu", "sigmoid")):
            a, b, bias = (torch.randn(s, generator=gen).to(dtype) for s in ((m, k), (k, n), (n,)))
            want = torch.ops.oclf.addmm_act(bias.double(), a.double(), b.double(), act)
            d = (lambda t: t.to("opencl"))
            for w in (d(b.t().contiguous()).t(), d(b)):
                got = torch.ops.oclf.addmm_act(d(bias), d(a), w, act)
                assert got.dtype == dtype
                close(got, want, tol=tol)
    # Operands the kernels do not take run as addmm, then the activation: a bias that is not
    # one row, tensors on the CPU.
    a, b, bias = torch.randn(3, 8), torch.randn(8, 5), torch.randn(3, 5)
    close(torch.ops.oclf.addmm_act(bias.to("opencl"), a.to("opencl"), b.to("opencl"), "silu"),
          F.silu(torch.addmm(bias, a, b)))
    half = torch.ops.oclf.addmm_act(bias.half().to("opencl"), a.half().to("opencl"), b.half().to("opencl"), "gelu")
    assert half.dtype == torch.float16
    close(half, F.gelu(torch.addmm(bias, a, b)), tol=5e-3)
    close(torch.ops.oclf.addmm_act(bias[0], a, b, "tanh"), torch.tanh(torch.addmm(bias[0], a, b)))
    with pytest.raises(RuntimeError, match="addmm_act: activation must be none, relu"):
        torch.ops.oclf.addmm_act(bias[0].to("opencl"), a.to("opencl"), b.to("opencl"), "mish")


def with_batch_norm_statistics(model, seed=0):
    """Running statistics and affine parameters away from their defaults, so folding matters."""
    gen = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            for t, lo, hi in ((m.running_mean, -0.3, 0.3), (m.running_var, 0.5, 1.5), (m.weight.data, 0.5, 1.5),
                              (m.bias.data, -0.3, 0.3)):
                t.copy_(torch.rand(t.shape, generator=gen) * (hi - lo) + lo)
    return model.eval()


def fused_calls(gm):
    return sum(1 for n in gm.graph.nodes if n.target is torch.ops.oclf.conv2d_fused)


@pytest.mark.parametrize("arch, expected", [("resnet18", 20), ("mobilenet_v2", 52), ("regnet_x_400mf", 71),
                                            ("efficientnet_b0", 65), ("mobilenet_v3_small", 43)])
def test_fused_networks_match_the_model(opencl_device, arch, expected):
    """Whole torchvision networks (residual blocks, ReLU6, grouped convs, SiLU, Hardswish):
    every conv followed by batch norm, an addition or one of the activations fused (the
    second conv of EfficientNet's and MobileNetV3's squeeze-excitation blocks, followed by a
    sigmoid, stays apart), and the fused model on the device matches the model in float64."""
    torch.manual_seed(0)
    model = with_batch_norm_statistics(torchvision.models.get_model(arch))
    gm = opencl_device.fuse(model)
    assert fused_calls(gm) == expected
    assert not any(isinstance(m, nn.BatchNorm2d) for m in gm.modules())
    x = torch.randn(2, 3, 64, 72)
    with torch.no_grad():
        ref = model.double()(x.double())
        model.float()
        got = gm.to("opencl")(x.to("opencl"))
    close(got, ref, tol=1e-5)
    # The model itself is untouched: its batch norms and its parameters where they were.
    assert sum(isinstance(m, nn.BatchNorm2d) for m in model.modules()) > 0
    assert all(p.device.type == "cpu" for p in model.parameters())


class Block(nn.Module):
    """Patterns that must not be fused whole: an output used twice, an in-place addition into
    the other tensor, an addition with alpha, an approximate GELU; and ones that must:
    torch.add, F.relu, Tensor.relu, conv without batch norm."""

    def __init__(self):
        super().__init__()
        self.c = nn.ModuleList(nn.Conv2d(4, 4, 3, padding=1) for _ in range(7))
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        a = self.c[0](x)
        shared = a + a.sigmoid()                   # a has two users: nothing to fuse
        b = self.c[1](x)
        x2 = x.clone()
        x2.add_(b)                                 # updates x2 in place: x2 must change
        c = torch.add(self.c[2](x), x, alpha=2)    # alpha: not a plain residual
        d = F.gelu(self.c[3](x), approximate="tanh")
        e = F.relu(torch.add(self.bn(self.c[4](x)), x))
        f = self.c[5](x).relu()
        g = operator.add(x, self.c[6](x))
        return shared + x2 + c + d + e + f + g + x2.mean()


def test_fuse_takes_only_what_keeps_the_meaning(opencl_device):
    torch.manual_seed(0)
    model = with_batch_norm_statistics(Block())
    gm = opencl_device.fuse(model)
    assert fused_calls(gm) == 3                    # e, f and g
    x = torch.randn(2, 4, 9, 7)
    with torch.no_grad():
        ref = model.double()(x.double())
        model.float()
        close(gm(x), ref, tol=1e-5)
        close(gm.to("opencl")(x.to("opencl")), ref, tol=1e-5)


def test_fuse_refuses_training_models_and_untraceable_ones(opencl_device):
    with pytest.raises(ValueError, match="call model.eval"):
        opencl_device.fuse(nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)))

    class DataDependent(nn.Module):
        def forward(self, x):
            return x if x.sum() > 0 else -x

    with pytest.raises(ValueError, match="torch.fx can trace"):
        opencl_device.fuse(DataDependent().eval())


def test_fused_model_replays(opencl_device):
    """A fused model's forward recorded and replayed with new inputs."""
    torch.manual_seed(0)
    model = with_batch_norm_statistics(torchvision.models.resnet18())
    gm = opencl_device.fuse(model).to("opencl")
    static_x = torch.randn(1, 3, 48, 48).to("opencl")
    with torch.no_grad():
        gm(static_x)
        with opencl_device.graph() as g:
            static_y = gm(static_x)
        x = torch.randn(1, 3, 48, 48)
        static_x.copy_(x.to("opencl"))
        g.replay()
        close(static_y, model(x), tol=1e-5)
