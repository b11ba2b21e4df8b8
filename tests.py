"""Student-facing correctness checks (make run): ocl_conv2d against
torch.nn.functional.conv2d and ocl_matmul against @, on awkward sizes."""
import pytest
import torch
import torch.nn.functional as F


def test_conv2d_small(ocl):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 17, 19)
    w = torch.randn(5, 3, 3, 3)
    b = torch.randn(5)
    torch.testing.assert_close(ocl.ocl_conv2d(x, w, b), F.conv2d(x, w, b), atol=1e-4, rtol=1e-4)


def test_matmul_small(ocl):
    torch.manual_seed(0)
    a, b = torch.randn(7, 33), torch.randn(33, 9)
    torch.testing.assert_close(ocl.ocl_matmul(a, b), a @ b, atol=1e-4, rtol=1e-4)
