"""The opencl device plans each product and convolution once per shape and settings
(device/csrc/aten/plans.h): later calls of a shape run the configuration kept, without the
candidate lists, the kernel files' hashes and the tuning cache's lookup. What must hold:
a kept plan gives the same values; a new shape, a changed OCLF_* setting that steers
planning, and a change to the tuning cache each plan again; the configuration used is still
the one a forced setting names."""
import pytest
import torch
import torch.nn.functional as F

import opencl_functions as ocl  # its _core (the tuning cache) and devices (the launch log)


@pytest.fixture(autouse=True)
def device(opencl_device, monkeypatch):
    for name in ("OCLF_MATMUL", "OCLF_DEVICE_MATMUL", "OCLF_CONV_KERNEL", "OCLF_CPU_BLOCK", "OCLF_GPU_TILE",
                 "OCLF_DEVICE_CONV"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OCLF_FALLBACK", "error")
    return opencl_device


def made() -> int:
    return torch.ops.oclf.plans_made()


def launches(fn) -> list:
    """(kernel, build options) of each launch fn() makes."""
    ocl.devices.launch_log_start()
    try:
        fn()
        torch.opencl.synchronize()
        return [(launch["kernel"], launch["options"]) for launch in ocl.devices.launch_log_take()]
    finally:
        ocl.devices.launch_log_stop()


def kernels_of(fn) -> list:
    return [kernel for kernel, _ in launches(fn)]


def test_a_repeated_product_is_planned_once_and_gives_the_same_values():
    x, w, b = torch.randn(5, 24), torch.randn(7, 24), torch.randn(7)
    dx, dw, db = (t.to("opencl") for t in (x, w, b))
    first = F.linear(dx, dw, db).cpu()
    before = made()
    for _ in range(3):
        again = F.linear(dx, dw, db).cpu()
        assert torch.equal(again, first)
    assert made() == before
    torch.testing.assert_close(first, F.linear(x, w, b))
    F.linear(dx[:3], dw, db)  # another shape
    assert made() == before + 1


def test_a_changed_setting_plans_a_kept_shape_again(monkeypatch):
    x, w = torch.randn(4, 32), torch.randn(9, 32)
    dx, dw = x.to("opencl"), w.to("opencl")
    ref = x @ w.t()
    assert "gemm_rows" in kernels_of(lambda: dx @ dw.t())  # the default on every device: rows
    monkeypatch.setenv("OCLF_MATMUL", "clblast")
    assert "gemm_rows" not in kernels_of(lambda: dx @ dw.t())
    torch.testing.assert_close((dx @ dw.t()).cpu(), ref)
    monkeypatch.setenv("OCLF_MATMUL", "rows VW=4 MR=2 RN=1 LX=1 LY=1")
    options = [o.split() for k, o in launches(lambda: dx @ dw.t()) if k == "gemm_rows"]
    assert len(options) == 1 and {"-DVW=4", "-DMR=2", "-DRN=1"} <= set(options[0]), options
    torch.testing.assert_close((dx @ dw.t()).cpu(), ref)
    monkeypatch.delenv("OCLF_MATMUL")
    assert "gemm_rows" in kernels_of(lambda: dx @ dw.t())


def test_a_repeated_convolution_is_planned_once_and_follows_its_settings(monkeypatch):
    x, w, b = torch.randn(2, 3, 9, 8), torch.randn(5, 3, 3, 3), torch.randn(5)
    dx, dw, db = (t.to("opencl") for t in (x, w, b))
    ref = F.conv2d(x, w, b, padding=1)
    first = F.conv2d(dx, dw, db, padding=1).cpu()
    torch.testing.assert_close(first, ref, rtol=1e-4, atol=1e-4)
    before = made()
    assert torch.equal(F.conv2d(dx, dw, db, padding=1).cpu(), first)
    assert made() == before
    monkeypatch.setenv("OCLF_CONV_KERNEL", "gpu")  # the GPU kernel on any device
    assert "conv2d_gpu" in kernels_of(lambda: F.conv2d(dx, dw, db, padding=1))
    assert made() == before + 1
    torch.testing.assert_close(F.conv2d(dx, dw, db, padding=1).cpu(), ref, rtol=1e-4, atol=1e-4)


def test_a_change_to_the_tuning_cache_plans_again():
    x, w = torch.randn(3, 16).to("opencl"), torch.randn(6, 16).to("opencl")
    F.linear(x, w)
    before = made()
    F.linear(x, w)
    assert made() == before
    ocl._core.tuning_forget()
    F.linear(x, w)
    assert made() == before + 1


def test_gradients_as_on_a_gpu_are_planned_once(monkeypatch):
    """The GPU paths' weight gradients (conv2d_gpu over swapped layouts) and input gradients
    keep their plans too."""
    monkeypatch.setenv("OCLF_DEVICE_CONV", "gpu")
    x, w = torch.randn(2, 4, 7, 6), torch.randn(6, 4, 3, 3)

    def step():
        dx, dw = x.to("opencl").requires_grad_(), w.to("opencl").requires_grad_()
        F.conv2d(dx, dw, padding=1).square().sum().backward()
        return dx.grad.cpu(), dw.grad.cpu()

    first = step()
    before = made()
    again = step()
    assert made() == before
    cx, cw = x.clone().requires_grad_(), w.clone().requires_grad_()
    F.conv2d(cx, cw, padding=1).square().sum().backward()
    for got, same_again, ref in zip(first, again, (cx.grad, cw.grad)):
        assert torch.equal(got, same_again)
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)
