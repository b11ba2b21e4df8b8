"""Every kernel path of the reference under Oclgrind: the forward conv2d kernels (tiled,
CPU, GPU with and without split-K, depthwise v2 and v3, Winograd), the backward kernels,
the CLBlast calls (GEMM, and GEMV for one-row products) and our own products
(reference/matmul.cl). No data race, no out-of-bounds access, no read of a write-only
buffer, and the results still match torch. The opencl device's kernels under Oclgrind:
test_device_oclgrind.py."""
import shutil
import textwrap

import pytest

from oclgrind_checks import run_under_oclgrind

pytestmark = pytest.mark.skipif(shutil.which("oclgrind") is None, reason="oclgrind is not installed")

SCRIPT = textwrap.dedent("""
    if what == "conv":
        # A 3x3 conv over 32 channels: K = 288 is long enough for split-K to cut it.
        x, w, b = torch.randn(1, 32, 6, 7), torch.randn(8, 32, 3, 3), torch.randn(8)
        close(ocl.ocl_conv2d(x, w, b), F.conv2d(x, w, b))
        # Depthwise, strided and dilated, rows wider than a vector, two images.
        x, w, b = torch.randn(2, 3, 9, 21), torch.randn(3, 1, 3, 2), torch.randn(3)
        for s, d in (((1, 1), (1, 1)), ((2, 2), (1, 2)), ((1, 3), (2, 1))):
            close(ocl.ocl_conv2d(x, w, b, s, d, 3), F.conv2d(x, w, b, s, 0, d, 3))
        for c in cases():
            args = dict(stride=tuple(c["stride"]), dilation=tuple(c["dilation"]), groups=c["groups"])
            expected = F.conv2d(c["x"], c["weight"], c["bias"], **args)
            close(ocl.ocl_conv2d(c["x"], c["weight"], c["bias"], **args), expected)
    elif what == "backward":
        x, w = torch.randn(2, 4, 7, 6), torch.randn(6, 2, 3, 2)
        args = dict(stride=(2, 1), dilation=(1, 2), groups=2)
        xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
        y = F.conv2d(xg, wg, None, **args)
        g = torch.randn_like(y)
        y.backward(g)
        for variant in ("direct", "tiled"):
            close(ocl.ocl_conv2d_backward_input(g, w, x.shape, variant=variant, **args), xg.grad)
            close(ocl.ocl_conv2d_backward_weight(x, g, w.shape, variant=variant, **args), wg.grad)
        close(ocl.ocl_conv2d_backward_bias(g), g.sum((0, 2, 3)))
    elif what == "fast_matmul":
        # Our own products (OCLF_MATMUL picks the path): one row and three rows, B stored N×K
        # (a weight's transpose), K×N resident (transposed once for rows), A transposed.
        # K = 70 is long enough for gemm_cols to split K over work-groups (LX·LY > 1).
        for m in (1, 3):
            a, w = torch.randn(m, 70), torch.randn(9, 70)
            close(ocl.ocl_matmul(a, w.t()), a @ w.t())
            p = torch.nn.Parameter(torch.randn(70, 9), requires_grad=False)
            close(ocl.ocl_matmul(a, p), a @ p)
            close(ocl.ocl_matmul(a.t().contiguous().t(), p.detach()), a @ p)
    elif what == "matmul":
        a, b = torch.randn(5, 33), torch.randn(33, 7)
        close(ocl.ocl_matmul(a, b), a @ b)
        close(ocl.ocl_matmul(a[:1], b), a[:1] @ b)
        bt = torch.randn(7, 33)
        close(ocl.ocl_matmul(a[:1], bt.t()), a[:1] @ bt.t())
        close(ocl.ocl_matmul(a.t().contiguous().t(), bt.t()), a @ bt.t())
    else:
        raise ValueError(what)
""")


@pytest.mark.parametrize("kernel", ["tiled", "cpu", "gpu", "gpu_split_k", "depthwise", "depthwise_cpu",
                                    "cpu COV=8 PX=5", "cpu COV=8 PX=3 KC=5 NS=3", "dw_rows VW=8 RY=3",
                                    "dw_tiled TX=8 TY=2 TZ=2 RY=2", "dw_tiled TX=16 TY=1 TZ=1 RY=4", "wino"])
def test_conv2d_paths_under_oclgrind(kernel, tmp_path, ocl):
    # Split-K runs when the output tiles do not fill the device: a device of 64 compute units.
    args = ("--compute-units", "64") if kernel == "gpu_split_k" else ()
    run_under_oclgrind(SCRIPT, "conv", tmp_path, args, OCLF_CONV_KERNEL=kernel.replace("_split_k", ""))


@pytest.mark.parametrize("path", ["rows VW=16 MR=3 RN=4 LX=1 LY=1", "rows VW=4 MR=1 RN=2 LX=8 LY=2",
                                  "rows VW=4 MR=3 RN=2 LX=8 LY=2 KF=1",
                                  "cols VW=8 MR=3 CPW=2 LX=1 LY=1", "cols VW=4 MR=1 CPW=1 LX=4 LY=4", "conv",
                                  "conv TM=32 TN=64 WM=4 WN=4 TK=32 ST=4"])
def test_fast_matmul_under_oclgrind(path, tmp_path, ocl):
    # Split K over work-groups (gemm_cols with LX·LY > 1) runs when the columns do not fill
    # the device twice: a device of 64 compute units.
    run_under_oclgrind(SCRIPT, "fast_matmul", tmp_path, ("--compute-units", "64"), OCLF_MATMUL=path)


def test_backward_kernels_under_oclgrind(tmp_path, ocl):
    run_under_oclgrind(SCRIPT, "backward", tmp_path)


def test_clblast_calls_under_oclgrind(tmp_path, ocl):
    run_under_oclgrind(SCRIPT, "matmul", tmp_path)
