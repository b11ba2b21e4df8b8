"""The opencl torch device: registration, torch.opencl, creating, moving, viewing and
printing tensors, and the CPU fallback's warning and OCLF_FALLBACK=error."""
import os
import subprocess
import sys

import pytest
import torch


def test_device_module(opencl_device):
    from opencl_functions import _core

    assert torch.opencl.is_available()
    assert torch.opencl.device_count() == _core.device_count() >= 1
    assert torch.opencl.current_device() == _core.current_device()
    assert "/" in torch.opencl.get_device_name()
    assert torch.device("opencl").type == "opencl"
    torch.opencl.synchronize()


def test_import_of_library_alone_does_not_register_the_device(opencl_device):
    """The library never imports the device (torch's entry point, off here, is what does)."""
    code = "import torch, opencl_functions; print(torch._C._get_privateuse1_backend_name())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert out.stdout.strip() == "privateuseone"


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.int32, torch.bool, torch.uint8, torch.float64])
def test_round_trip(opencl_device, dtype):
    host = (torch.arange(35).reshape(5, 7) % 3).to(dtype)
    dev = host.to("opencl")
    assert dev.device.type == "opencl" and dev.dtype == dtype and dev.shape == (5, 7)
    assert torch.equal(dev.cpu(), host)


def test_factories_and_fill(opencl_device):
    x = torch.empty(2, 3, device="opencl")
    assert x.device == torch.device("opencl", 0)
    assert torch.equal(torch.zeros(4, 5, device="opencl").cpu(), torch.zeros(4, 5))
    assert torch.equal(torch.full((3, 1), 2.5, device="opencl").cpu(), torch.full((3, 1), 2.5))
    assert torch.equal(torch.ones(7, dtype=torch.int64, device="opencl").cpu(), torch.ones(7, dtype=torch.int64))
    empty = torch.empty(0, 3, device="opencl")
    assert empty.cpu().shape == (0, 3)


def test_views_read_back_as_in_torch(opencl_device):
    host = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(2, 3, 4, 5)
    dev = host.to("opencl")
    for view in [lambda t: t.transpose(1, 3), lambda t: t[:, 1:, ::2, 3], lambda t: t.view(6, 20)[1:5:3],
                 lambda t: t.permute(3, 0, 2, 1).reshape(5, -1), lambda t: t.unsqueeze(2).expand(2, 3, 7, 4, 5),
                 lambda t: t.select(2, 1)[1].t(), lambda t: t.flatten()[7:50]]:
        assert torch.equal(view(dev).cpu(), view(host))
        assert torch.equal(view(dev).contiguous().cpu(), view(host).contiguous())


def test_copies_into_strided_destinations(opencl_device):
    host = torch.zeros(4, 6)
    dev = host.to("opencl")
    src = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    host[1:, ::2][:, :3] = src[:, :3]
    dev[1:, ::2][:, :3] = src[:, :3]  # host to strided device
    assert torch.equal(dev.cpu(), host)
    host[0] = host[3]
    dev[0] = dev[3]  # device to device
    assert torch.equal(dev.cpu(), host)
    out = torch.empty(6, 4)
    out.t().copy_(dev)  # device to strided host
    assert torch.equal(out.t(), host)


def test_dtype_conversions_on_device(opencl_device):
    host = torch.tensor([-2.5, -0.0, 0.3, 1.0, 7.9])
    dev = host.to("opencl")
    assert torch.equal(dev.long().cpu(), host.long())
    assert torch.equal(dev.bool().cpu(), host.bool())
    assert torch.equal(dev.long().float().cpu(), host.long().float())
    assert torch.equal(dev.double().cpu(), host.double())


def test_item_and_printing(opencl_device):
    dev = torch.arange(6, dtype=torch.float32).reshape(2, 3).to("opencl")
    assert dev[1, 2].item() == 5.0
    assert torch.tensor(7, device="opencl").item() == 7
    text = repr(dev.t())
    assert "device='opencl:0'" in text and "[0., 3.]" in text
    assert "requires_grad=True" in repr(torch.nn.Parameter(dev))
    assert "size=(0, 3)" in repr(torch.empty(0, 3, device="opencl"))


def test_module_to_device(opencl_device):
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    model.to("opencl")
    assert all(p.device.type == "opencl" for p in model.parameters())
    assert all(b.device.type == "opencl" for b in model.buffers())
    assert model[0].weight.is_opencl
    assert torch.equal(model.cpu()[0].bias, model[0].bias)


def test_fallback_warns_once_per_op(opencl_device, monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "warn")
    opencl_device.reset_fallback_ops()
    x = torch.arange(6, dtype=torch.float32).to("opencl")
    with pytest.warns(UserWarning, match=r"aten::kthvalue.values has no OpenCL kernel; it runs on the CPU"):
        values, indices = torch.kthvalue(x, 5)
    assert values.item() == 4.0 and indices.item() == 4
    assert values.device.type == "opencl" and indices.device.type == "opencl"
    torch.kthvalue(x, 5)  # the second call does not warn (warnings are errors here)
    assert opencl_device.fallback_ops() == {"aten::kthvalue.values": 2}


def test_fallback_error_mode(opencl_device, monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "error")
    x = torch.arange(6, dtype=torch.float32).to("opencl")
    with pytest.raises(NotImplementedError,
                       match=r"aten::kthvalue.values has no OpenCL kernel and OCLF_FALLBACK=error"):
        torch.kthvalue(x, 2)


def test_bad_device_index(opencl_device):
    n = torch.opencl.device_count()
    with pytest.raises(RuntimeError, match=rf"there is no device {n}; the process has {n}"):
        torch.empty(2, device=f"opencl:{n}")


def test_manual_seed_does_not_warn(opencl_device):
    torch.manual_seed(0)


def test_save_load_and_deepcopy(opencl_device, tmp_path):
    import copy

    model = torch.nn.Linear(3, 2).to("opencl")
    path = tmp_path / "weights.pt"
    torch.save(model.state_dict(), path)
    loaded = torch.load(path)
    assert loaded["weight"].device.type == "opencl"
    assert torch.equal(loaded["weight"].cpu(), model.weight.detach().cpu())
    assert torch.load(path, map_location="cpu")["bias"].device.type == "cpu"
    clone = copy.deepcopy(model)
    assert clone.weight.device.type == "opencl" and torch.equal(clone.weight.cpu(), model.weight.cpu())
    assert torch.randn(2, device="opencl").opencl().is_opencl
