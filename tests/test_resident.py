"""Resident parameters: nn.Parameter weights stay on the device between calls, follow
in-place changes (version counter), and are freed when the tensor goes away."""
import gc

import torch
import torch.nn.functional as F


def force_kernel(monkeypatch, path: str) -> None:
    """Forces one of the host code's conv2d kernels ("" lets it choose)."""


KERNELS = ("",)
# BEGIN STAFF
KERNELS = ("", "tiled", "cpu", "gpu")  # the reference's kernels


def force_kernel(monkeypatch, path: str) -> None:  # noqa: F811
    monkeypatch.setenv("OCLF_CONV_KERNEL", path)
# END STAFF


def test_resident_weight_reused_and_updated(ocl, monkeypatch):
    torch.manual_seed(0)
    x = torch.randn(2, 7, 9, 8)
    conv = torch.nn.Conv2d(7, 33, 3, bias=True)
    for path in KERNELS:
        force_kernel(monkeypatch, path)
        before = ocl.resident_bytes()
        out = ocl.ocl_conv2d(x, conv.weight, conv.bias)
        torch.testing.assert_close(out, F.conv2d(x, conv.weight, conv.bias), atol=1e-4, rtol=1e-4)
        handle = ocl.resident_handle(conv.weight)
        assert handle and ocl.resident_handle(conv.weight) == handle
        assert ocl.resident_bytes() >= before
        with torch.no_grad():
            conv.weight.mul_(-2)  # bumps the version: the next call must see it
            conv.bias.add_(1)
        out = ocl.ocl_conv2d(x, conv.weight, conv.bias)
        torch.testing.assert_close(out, F.conv2d(x, conv.weight, conv.bias), atol=1e-4, rtol=1e-4)
        assert ocl.resident_handle(conv.weight) != handle


def test_resident_freed_with_tensor(ocl):
    gc.collect()
    start = ocl.resident_bytes()
    x = torch.randn(1, 16, 6, 6)
    for _ in range(20):
        w = torch.nn.Parameter(torch.randn(32, 16, 3, 3))
        ocl.ocl_conv2d(x, w)
        assert ocl.resident_bytes() > start
        del w
        gc.collect()
    assert ocl.resident_bytes() == start


def test_plain_tensors_not_kept(ocl):
    start = ocl.resident_bytes()
    ocl.ocl_conv2d(torch.randn(1, 3, 5, 5), torch.randn(4, 3, 3, 3))
    assert ocl.resident_bytes() == start


def test_linear_weight_resident_through_its_transpose(ocl):
    """ocl_matmul(x, weight.t()) keeps the nn.Parameter behind the transposed view resident,
    for one row (the GEMV path) and for many, and follows in-place changes."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(37, 21)
    for rows in (1, 5):
        x = torch.randn(rows, 37)
        before = ocl.resident_bytes()
        torch.testing.assert_close(ocl.ocl_matmul(x, lin.weight.t()), x @ lin.weight.detach().t(),
                                   atol=1e-4, rtol=1e-4)
        handle = ocl.resident_handle(lin.weight)
        assert handle and ocl.resident_bytes() >= before
        with torch.no_grad():
            lin.weight.mul_(-2)
        torch.testing.assert_close(ocl.ocl_matmul(x, lin.weight.t()), x @ lin.weight.detach().t(),
                                   atol=1e-4, rtol=1e-4)
        assert ocl.resident_handle(lin.weight) != handle


def test_views_of_part_of_a_parameter_not_kept(ocl):
    """A view of only some of a parameter (weight[:5].t()) is not its whole storage: it is
    uploaded per call and computed right."""
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(9, 13))
    x = torch.randn(3, 13)
    start = ocl.resident_bytes()
    torch.testing.assert_close(ocl.ocl_matmul(x, w[2:7].t()), x @ w.detach()[2:7].t(), atol=1e-4, rtol=1e-4)
    assert ocl.resident_bytes() == start
