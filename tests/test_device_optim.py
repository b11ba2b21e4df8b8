"""torch.optim with fused=True on the opencl device (csrc/aten/optim.cpp, kernels/optim.cl):
Adam, AdamW and SGD in their variants against torch in float64, a few steps over parameters
of awkward sizes, one of them without a gradient for a step; the gradient scaler's
arguments against torch's own CPU fused kernels; up to 8 parameters per launch."""
import copy

import pytest
import torch

SHAPES = [(37, 5), (5,), (3, 3, 3, 2), (1,), (200,), (7, 11), (2, 2), (13,), (64, 3), (1, 1), (1000,)]

CASES = [
    (torch.optim.Adam, dict(lr=0.01)),
    (torch.optim.Adam, dict(lr=0.01, amsgrad=True, weight_decay=0.1, maximize=True, betas=(0.8, 0.99))),
    (torch.optim.AdamW, dict(lr=0.02, weight_decay=0.05, eps=1e-6)),
    (torch.optim.AdamW, dict(lr=torch.tensor(0.02), weight_decay=0.05, amsgrad=True)),
    (torch.optim.SGD, dict(lr=0.1)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-2)),
    (torch.optim.SGD, dict(lr=torch.tensor(0.05), momentum=0.9, dampening=0.3, maximize=True)),
]


def train(optimizer, options, device, dtype, steps=3):
    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, dtype=torch.float64, generator=gen).to(dtype).to(device))
              for s in SHAPES]
    opt = optimizer(params, **options)
    for step in range(steps):
        for i, p in enumerate(params):
            if step == 1 and i == 3:
                p.grad = None  # skipped this step: its step count falls behind the others'
                continue
            p.grad = torch.randn(p.shape, dtype=torch.float64, generator=gen).to(dtype).to(device)
        opt.step()
    return [p.detach().cpu().double() for p in params]


def worst(params, reference):
    return max((p - r).abs().max().item() for p, r in zip(params, reference))


@pytest.mark.parametrize("optimizer, options", CASES, ids=lambda c: getattr(c, "__name__", None) or
                         ",".join(f"{k}={v}" for k, v in c.items() if not isinstance(v, torch.Tensor)))
def test_fused_step_matches_float64(opencl_device, optimizer, options, monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "error")
    plain = {k: float(v) if isinstance(v, torch.Tensor) else v for k, v in options.items()}
    reference = train(optimizer, {**plain, "foreach": False}, "cpu", torch.float64)
    torch_error = worst(train(optimizer, {**plain, "foreach": False}, "cpu", torch.float32), reference)
    device_options = {k: v.to("opencl") if isinstance(v, torch.Tensor) else v for k, v in options.items()}
    error = worst(train(optimizer, {**device_options, "fused": True}, "opencl", torch.float32), reference)
    # OpenCL's pow, sqrt and division may be a few ulp off (NVIDIA's are): a few float32
    # ulp of parameters of size ~1, or a few times torch's own error
    assert error <= max(3 * torch_error, 3e-6), (error, torch_error)


@pytest.mark.parametrize("optimizer, launches", [(torch.optim.SGD, 2), (torch.optim.Adam, 4)])
def test_eight_parameters_per_launch(opencl_device, optimizer, launches):
    """11 parameters: 2 launches of the step (and for Adam, 2 of the step counts' increment)."""
    params = [torch.nn.Parameter(torch.randn(s).to("opencl")) for s in SHAPES]
    for p in params:
        p.grad = torch.ones_like(p)
    opt = optimizer(params, lr=0.1, fused=True)
    opt.step()
    torch.opencl.synchronize()
    before = opencl_device.memory_stats()["kernel_launches"]
    opt.step()
    assert opencl_device.memory_stats()["kernel_launches"] - before == launches


def test_foreach_add_of_a_number(opencl_device):
    base = torch.randn(4, 6)
    tensors = [torch.randn(s) for s in SHAPES] + [base[:, ::2]]          # and a strided view
    ints = [torch.arange(5), torch.arange(7).view(7, 1)]
    on_device = [t.to("opencl") for t in tensors[:-1]] + [base.to("opencl")[:, ::2]]
    assert not on_device[-1].is_contiguous()
    torch._foreach_add_(tensors, 0.25)
    torch._foreach_add_(on_device, 0.25)
    device_ints = [t.to("opencl") for t in ints]
    torch._foreach_add_(ints, 3)
    torch._foreach_add_(device_ints, 3)
    for want, got in zip(tensors + ints, on_device + device_ints):
        torch.testing.assert_close(got.cpu(), want)


def test_foreach_add_and_mul_lists(opencl_device):
    """_foreach_add_ with a list and alpha, _foreach_mul_ with a number: one launch per 8
    float32 tensors; targets that another pair reads, views and integers as torch does."""
    tensors = [torch.randn(s) for s in SHAPES]
    others = [torch.randn(s) for s in SHAPES]
    dev_t, dev_o = [t.to("opencl") for t in tensors], [t.to("opencl") for t in others]
    torch._foreach_mul_(tensors, 0.9)
    torch._foreach_add_(tensors, others, alpha=-0.3)
    torch.opencl.synchronize()
    before = opencl_device.memory_stats()["kernel_launches"]
    torch._foreach_mul_(dev_t, 0.9)
    torch._foreach_add_(dev_t, dev_o, alpha=-0.3)
    assert opencl_device.memory_stats()["kernel_launches"] - before == 4      # 11 tensors: 2 launches each
    for want, got in zip(tensors, dev_t):
        torch.testing.assert_close(got.cpu(), want)
    a, b = torch.randn(5), torch.randn(5)
    da, db = a.to("opencl"), b.to("opencl")
    torch._foreach_add_([a, b], [b, a])                 # b += the new a
    torch._foreach_add_([da, db], [db, da])
    torch.testing.assert_close(torch.stack([da, db]).cpu(), torch.stack([a, b]))
    base = torch.randn(4, 6)
    view, dev_view = base[:, ::2], base.to("opencl")[:, ::2]
    torch._foreach_mul_([view], 2.0)
    torch._foreach_mul_([dev_view], 2.0)
    torch.testing.assert_close(dev_view.cpu(), view)


@pytest.mark.parametrize("momentum, nesterov, weight_decay", [(0.9, False, 0.0), (0.9, True, 1e-2), (0.0, False, 0.0)])
def test_default_sgd_matches_float64(opencl_device, momentum, nesterov, weight_decay):
    """torch.optim.SGD as constructed by default (its foreach path) on the device."""
    torch.manual_seed(0)
    start = [torch.randn(s, dtype=torch.float64) for s in SHAPES]
    grads = [[torch.randn(s, dtype=torch.float64) for s in SHAPES] for _ in range(3)]
    results = []
    for device, dtype in (("cpu", torch.float64), ("opencl", torch.float32)):
        params = [torch.nn.Parameter(p.to(device, dtype, copy=True)) for p in start]
        opt = torch.optim.SGD(params, lr=0.1, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay)
        for step in grads:
            for p, g in zip(params, step):
                p.grad = g.to(device, dtype)
            opt.step()
        results.append(torch.cat([p.detach().cpu().double().flatten() for p in params]))
        if device == "opencl" and momentum:
            torch.opencl.synchronize()
            before = opencl_device.memory_stats()["kernel_launches"]
            opt.step()  # (grads + decay · params), buffers × momentum + grads, (+ Nesterov), params -= lr · …
            assert opencl_device.memory_stats()["kernel_launches"] - before == (10 if weight_decay else 6)
    torch.testing.assert_close(results[1], results[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("found", [0.0, 1.0])
@pytest.mark.parametrize("op", ["_fused_adam_", "_fused_adamw_", "_fused_sgd_"])
def test_grad_scale_and_found_inf_as_torch(opencl_device, op, found):
    """Gradients divided by the scale (and stored back so); nothing changes when found_inf is set."""
    gen = torch.Generator().manual_seed(1)

    def state(device):
        gen.manual_seed(1)
        tensors = {name: [torch.randn(s, generator=gen).abs().to(device) for s in SHAPES[:5]]
                   for name in ("params", "grads", "a", "b", "c")}
        tensors["steps"] = [torch.tensor(3.0).to(device) for _ in SHAPES[:5]]
        return tensors

    results = {}
    for device in ("cpu", "opencl"):
        t = state(device)
        scaling = dict(grad_scale=torch.tensor(4.0).to(device), found_inf=torch.tensor(found).to(device))
        if op == "_fused_sgd_":
            torch._fused_sgd_(t["params"], t["grads"], t["a"], weight_decay=0.01, momentum=0.9, lr=0.1,
                              dampening=0.0, nesterov=False, maximize=False, is_first_step=False, **scaling)
        else:
            getattr(torch, op)(t["params"], t["grads"], t["a"], t["b"], t["c"], t["steps"], lr=0.01, beta1=0.9,
                               beta2=0.999, weight_decay=0.1, eps=1e-8, amsgrad=True, maximize=False, **scaling)
        results[device] = {k: [x.cpu() for x in v] for k, v in t.items()}
    for name, tensors in results["cpu"].items():
        for want, got in zip(tensors, results["opencl"][name]):
            torch.testing.assert_close(got, want, msg=f"{op} {name}")


def test_what_the_kernels_do_not_take_runs_on_the_cpu(opencl_device, monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "silent")
    base = torch.randn(6, 4)
    p_cpu = torch.nn.Parameter(base.t().clone())        # transposed: not contiguous on the device either
    p_dev = torch.nn.Parameter(base.to("opencl").t())
    for p in (p_cpu, p_dev):
        p.grad = torch.full(p.shape, 0.5, device=p.device)
        torch.optim.Adam([p], lr=0.1, fused=True).step()
    torch.testing.assert_close(p_dev.detach().cpu(), p_cpu.detach())


@pytest.mark.parametrize("make", [
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, fused=True),
    lambda p: torch.optim.Adam(p, lr=0.01, fused=True),
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),                 # foreach
], ids=["fused SGD", "fused Adam", "foreach SGD"])
def test_steps_move_version_counters(opencl_device, make):
    """A step writes parameters in place: their versions move, so the copies the device keeps
    derived from them (a conv's packed weights, a linear layer's transposed one) are made
    again, and the next forward uses the new weights."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(8 * 6 * 6, 4))
    dev = copy.deepcopy(model).to("opencl")
    opt, opt_dev = make(model.parameters()), make(dev.parameters())
    x, t = torch.randn(5, 3, 8, 8), torch.tensor([0, 1, 2, 3, 0])
    for _ in range(3):
        for m, o, xx, tt in ((model, opt, x, t), (dev, opt_dev, x.to("opencl"), t.to("opencl"))):
            o.zero_grad()
            before = [p._version for p in m.parameters()]
            torch.nn.functional.cross_entropy(m(xx), tt).backward()
            o.step()
            if m is dev:                                # (torch's CPU fused steps leave them)
                assert all(p._version > v for p, v in zip(m.parameters(), before))
    with torch.no_grad():
        torch.testing.assert_close(dev(x.to("opencl")).cpu(), model(x), atol=1e-4, rtol=1e-4)
