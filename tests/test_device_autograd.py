"""Autograd on the opencl device: gradients land on the device, accumulate, flow through
views and in-place ops; module.to("opencl") keeps tied parameters tied; optimizers
(SGD with momentum, Adam, AdamW; foreach and single-tensor paths) step on the device."""
import copy
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F


@pytest.fixture(autouse=True)
def native_only(opencl_device, monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "error")


def test_gradients_stay_on_the_device_and_accumulate():
    w = torch.randn(4, 3).to("opencl").requires_grad_()
    x = torch.randn(5, 3).to("opencl")
    for _ in range(2):
        (x @ w.t()).relu().sum().backward()
    assert w.grad.device.type == "opencl"
    w_cpu = w.detach().cpu().requires_grad_()
    for _ in range(2):
        (x.cpu() @ w_cpu.t()).relu().sum().backward()
    assert torch.allclose(w.grad.cpu(), w_cpu.grad, atol=1e-5)


def python_output(code: str) -> str:
    """What a fresh Python process running code prints (it must succeed)."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip()


def test_backward_works_when_a_cpu_backward_ran_before_the_import(opencl_device):
    # torch's autograd engine sizes its device queues at the first backward pass of the
    # process; the device adds its own when that happened before it registered.
    code = ("import torch\n"
            "x = torch.ones(3, requires_grad=True); (x * 2).sum().backward()\n"
            "import torch_opencl\n"
            "y = torch.ones(3, device='opencl', requires_grad=True); (y * 3).sum().backward()\n"
            "print(y.grad.cpu().tolist())\n")
    assert python_output(code) == "[3.0, 3.0, 3.0]"
    # The import itself starts no autograd thread: a fork-based child (a data loader's
    # worker, say) can still run autograd on the CPU.
    code = ("import torch, torch_opencl, multiprocessing as mp\n"
            "def child(q):\n"
            "    y = torch.ones(2, requires_grad=True); (y * 5).sum().backward()\n"
            "    q.put(y.grad.tolist())\n"
            "q = mp.get_context('fork').Queue(); p = mp.get_context('fork').Process(target=child, args=(q,))\n"
            "p.start(); print(q.get(timeout=120)); p.join()\n")
    assert python_output(code) == "[5.0, 5.0]"


def test_gradients_through_views_and_in_place_ops():
    base = torch.randn(6, 8)
    grads = []
    for device in ("cpu", "opencl"):
        x = base.clone().to(device).requires_grad_()
        y = x.t()[2:, ::2] * 3
        y = y.clone()
        y[1].mul_(2)
        y.add_(x[:1, :4].t().sum())
        (y.sigmoid() * y).sum().backward()
        grads.append(x.grad.cpu())
    assert torch.allclose(grads[1], grads[0], atol=1e-5, rtol=1e-5)


def test_tied_parameters_stay_tied():
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False))
    model[1].weight = model[0].weight
    model.to("opencl")
    assert model[1].weight is model[0].weight
    assert model[0].weight.device.type == "opencl"


@pytest.mark.parametrize("make", [
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-4),
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, foreach=False),
    lambda p: torch.optim.Adam(p, lr=1e-2),
    lambda p: torch.optim.Adam(p, lr=1e-2, foreach=False, amsgrad=True),
    lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1),
])
def test_optimizer_steps_match_the_cpu(make):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))
    dev = copy.deepcopy(model).to("opencl")
    opt, opt_dev = make(model.parameters()), make(dev.parameters())
    x, t = torch.randn(8, 5), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    for _ in range(3):
        for m, o, xx, tt in ((model, opt, x, t), (dev, opt_dev, x.to("opencl"), t.to("opencl"))):
            o.zero_grad()
            F.cross_entropy(m(xx), tt).backward()
            o.step()
    for p, q in zip(dev.parameters(), model.parameters()):
        assert p.device.type == "opencl"
        assert torch.allclose(p.detach().cpu(), q.detach(), atol=1e-5, rtol=1e-5)


def test_clip_grad_norm():
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 4)
    dev = copy.deepcopy(model).to("opencl")
    x = torch.randn(3, 6)
    model(x).pow(2).sum().backward()
    dev(x.to("opencl")).pow(2).sum().backward()
    n_cpu = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    n_dev = torch.nn.utils.clip_grad_norm_(dev.parameters(), 0.5)
    assert torch.allclose(n_dev.cpu(), n_cpu, rtol=1e-5)
    assert torch.allclose(dev.weight.grad.cpu(), model.weight.grad, atol=1e-6)
