"""Thousands of calls do not grow memory: device buffers all go back (bytes_in_use
returns to 0), the reuse pool stays at what one round of shapes needs, and the process's
resident memory (VmRSS) stays within a small bound. Failed calls give their buffers back
too, and calls from several threads at once are safe."""
import pathlib
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

ROUNDS = 500  # each round: 3 conv2d and 3 matmul shapes, so 3000 calls in all
RSS_SLACK = 6 * 2**20


def rss_bytes():
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    pytest.skip("no VmRSS in /proc/self/status")


def make_inputs():
    torch.manual_seed(0)
    # Each call moves tens of KiB: one buffer leaked per call would show in VmRSS.
    convs = [
        (torch.randn(1, 8, 32, 33), torch.randn(4, 8, 1, 1), torch.randn(4), 1),
        (torch.randn(1, 16, 16, 18), torch.randn(16, 1, 3, 3), None, 16),
        (torch.randn(1, 64, 9, 8), torch.randn(33, 64, 1, 1), torch.randn(33), 1),
    ]
    matmuls = [
        (torch.randn(70, 65), torch.randn(65, 90)),
        (torch.randn(2, 40, 64), torch.randn(80, 64).t()),
        (torch.randn(4, 1100), torch.randn(1100, 8)),
    ]
    return convs, matmuls


def one_round(ocl, convs, matmuls):
    for x, w, b, groups in convs:
        ocl.ocl_conv2d(x, w, b, groups=groups)
    for a, b in matmuls:
        ocl.ocl_matmul(a, b)


def test_many_calls_do_not_grow_memory(ocl):
    convs, matmuls = make_inputs()
    for _ in range(5):  # warm up: kernels built, pool filled, allocators settled
        one_round(ocl, convs, matmuls)
    pooled_after_warmup = ocl.memory_stats()["bytes_pooled"]
    rss_before = rss_bytes()

    for _ in range(ROUNDS):
        one_round(ocl, convs, matmuls)
        assert ocl.memory_stats()["bytes_in_use"] == 0

    stats = ocl.memory_stats()
    assert stats["bytes_in_use"] == 0
    assert stats["bytes_pooled"] <= pooled_after_warmup
    growth = rss_bytes() - rss_before
    assert growth < RSS_SLACK, f"resident memory grew by {growth / 2**20:.1f} MiB over {ROUNDS * 6} calls"


def test_pool_reuses_buffers_of_the_same_size(ocl):
    x, w = torch.randn(1, 3, 9, 7), torch.randn(5, 3, 3, 3)
    ocl.ocl_conv2d(x, w)
    pooled = ocl.memory_stats()["bytes_pooled"]
    for _ in range(50):
        ocl.ocl_conv2d(x, w)
    assert ocl.memory_stats()["bytes_pooled"] == pooled


def test_clear_pool_frees_pooled_buffers(ocl):
    def use_buffers():
        # CLBlast's Convgemm baseline writes into a device buffer of the pool on every device
        # (library code: whatever the student's conv2d does, zero-copy or not).
        from bench.baselines import clblast_convgemm

        x = torch.randn(1, 3, 9, 7)
        ocl.ocl_conv2d(x, torch.randn(5, 3, 3, 3))
        clblast_convgemm(x, torch.randn(5, 3, 3, 3))

    use_buffers()
    ocl._core.clear_pool()
    assert ocl.memory_stats() == {"bytes_in_use": 0, "bytes_pooled": 0}
    use_buffers()
    assert ocl.memory_stats()["bytes_pooled"] > 0


def test_failed_calls_release_their_buffers(ocl, tmp_path, monkeypatch):
    """A conv2d whose kernel cannot be created fails after its buffers were taken: they
    must still go back to the pool, call after call."""
    (tmp_path / "conv2d.cl").write_text("__kernel void something_else(__global float* y) { y[0] = 1.0f; }\n")
    monkeypatch.setenv("OCL_KERNEL_DIR", str(tmp_path))
    monkeypatch.setenv("OCLF_CONV_KERNEL", "tiled")  # the student's kernel, of that conv2d.cl
    x, w, b = torch.randn(1, 3, 9, 7), torch.randn(5, 3, 3, 3), torch.randn(5)
    with pytest.raises(ocl.OpenCLError):
        ocl.ocl_conv2d(x, w, b)
    pooled = ocl.memory_stats()["bytes_pooled"]
    for _ in range(200):
        with pytest.raises(ocl.OpenCLError, match="CL_INVALID_KERNEL_NAME"):
            ocl.ocl_conv2d(x, w, b)
        assert ocl.memory_stats()["bytes_in_use"] == 0
    assert ocl.memory_stats()["bytes_pooled"] == pooled


def test_calls_from_several_threads(ocl):
    """Threads may call at once (the runtime serialises them): right results, no buffer left in use."""
    torch.manual_seed(0)
    jobs = [(torch.randn(7 + i, 33), torch.randn(33, 9 + i)) for i in range(8)]

    def work(job):
        a, b = job
        return [ocl.ocl_matmul(a, b) for _ in range(20)]

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(work, jobs))
    for (a, b), outs in zip(jobs, results):
        for out in outs:
            torch.testing.assert_close(out, a @ b, atol=1e-4, rtol=1e-4)
    assert ocl.memory_stats()["bytes_in_use"] == 0
