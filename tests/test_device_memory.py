"""The opencl device's caching allocator: buckets, reuse without creating buffers,
memory counters, empty_cache, storage resizes."""
import pytest
import torch


def test_buckets(opencl_device):
    bucket = torch.ops.oclf.bucket_bytes
    assert bucket(1) == 512 and bucket(512) == 512 and bucket(513) == 1024
    assert bucket(2**20) == 2**20
    big = 3 * 2**20 + 1
    assert big <= bucket(big) <= big * 1.125 + 1
    assert bucket(bucket(big)) == bucket(big)


def test_freed_buffers_are_reused(opencl_device):
    torch.opencl.synchronize()
    x = torch.empty(1000, 37, device="opencl")
    del x
    before = torch.opencl.memory_stats()
    for _ in range(5):
        y = torch.empty(1000, 37, device="opencl")
        del y
    after = torch.opencl.memory_stats()
    assert after["buffers_created"] == before["buffers_created"]
    assert after["cache_hits"] - before["cache_hits"] == 5


def test_counters_follow_tensors(opencl_device):
    base = torch.opencl.memory_allocated()
    x = torch.empty(256, 1024, device="opencl")  # 1 MiB
    assert torch.opencl.memory_allocated() - base == 2**20
    assert torch.opencl.memory_reserved() >= torch.opencl.memory_allocated()
    assert torch.opencl.max_memory_allocated() >= torch.opencl.memory_allocated()
    del x
    assert torch.opencl.memory_allocated() == base


def test_empty_cache(opencl_device):
    x = torch.empty(3, 2**18, device="opencl")
    del x
    torch.opencl.empty_cache()
    assert torch.opencl.memory_reserved() == torch.opencl.memory_allocated()


def test_views_share_storage(opencl_device):
    x = torch.zeros(4, 4, device="opencl")
    v = x[1:3, 2:]
    assert v.data_ptr() == x.data_ptr() + (4 + 2) * 4
    v.fill_(1.0)
    assert x.cpu().sum().item() == 4.0


def test_resize_keeps_values(opencl_device):
    x = torch.arange(6, dtype=torch.float32).to("opencl")
    x.resize_(4, 5)
    assert x.shape == (4, 5)
    assert torch.equal(x.flatten()[:6].cpu(), torch.arange(6, dtype=torch.float32))
    s = torch.arange(3, dtype=torch.float32).to("opencl")
    s.untyped_storage().resize_(64)
    assert torch.equal(s.cpu(), torch.arange(3, dtype=torch.float32))


def test_set_storage(opencl_device):
    x = torch.arange(12, dtype=torch.float32).to("opencl")
    y = torch.empty(0, device="opencl")
    y.set_(x.untyped_storage(), 2, (2, 3), (3, 1))
    assert torch.equal(y.cpu(), torch.arange(12, dtype=torch.float32)[2:8].view(2, 3))


def test_out_of_memory_is_an_error(opencl_device):
    with pytest.raises(RuntimeError):
        torch.empty(2**62, dtype=torch.uint8, device="opencl")
