"""torch's conventions for an out-of-tree accelerator, on the opencl device: programs find it
through torch.accelerator alone (device count, current device, synchronize, streams and
events, memory statistics through the DeviceAllocator), integer devices resolve to it
(model.to(0)), torch.Generator(device="opencl") and the default generators that
torch.manual_seed seeds, pinned host memory (tensor.pin_memory(), DataLoader(pin_memory=True))
with non_blocking copies."""
import pytest
import torch


@pytest.fixture(autouse=True)
def device(opencl_device):
    return opencl_device


def test_accelerator_is_the_device():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator().type == "opencl"
    assert torch.accelerator.device_count() == torch.opencl.device_count()
    assert torch.accelerator.current_device_index() == torch.opencl.current_device()
    torch.accelerator.set_device_index(torch.opencl.current_device())
    torch.accelerator.synchronize()


def test_integer_devices_resolve_to_the_accelerator():
    model = torch.nn.Linear(3, 2)
    model.to(0)
    assert model.weight.device == torch.device("opencl", 0)
    x = torch.ones(4, 3).to(0)
    assert x.device.type == "opencl"
    assert torch.allclose(model(x).cpu(), model.cpu()(torch.ones(4, 3)), atol=1e-6)


def test_memory_statistics_through_the_accelerator():
    torch.accelerator.empty_cache()
    before = torch.accelerator.memory_allocated()
    # Reserved and not allocated after empty_cache: memory that recorded graphs kept by
    # earlier tests hold (a graph's pool); this test adds none.
    held = torch.opencl.memory_reserved() - torch.opencl.memory_allocated()
    block = torch.empty(1 << 18, device="opencl")  # 1 MiB
    assert torch.accelerator.memory_allocated() >= before + (1 << 20)
    assert torch.accelerator.max_memory_allocated() >= torch.accelerator.memory_allocated()
    assert torch.accelerator.memory_reserved() >= torch.accelerator.memory_allocated()
    stats = torch.accelerator.memory_stats()
    assert stats["allocated_bytes.all.current"] == torch.accelerator.memory_allocated()
    assert torch.accelerator.memory_allocated() == torch.opencl.memory_allocated()
    del block
    assert torch.accelerator.memory_allocated() == before
    torch.accelerator.reset_peak_memory_stats()
    assert torch.accelerator.max_memory_allocated() == before
    torch.accelerator.empty_cache()
    assert torch.opencl.memory_reserved() - torch.opencl.memory_allocated() == held


def test_streams_and_events_of_the_device():
    stream = torch.accelerator.current_stream()
    assert stream.device.type == "opencl"
    start, end = torch.Event(device="opencl", enable_timing=True), torch.Event(device="opencl", enable_timing=True)
    start.record(stream)
    y = torch.randn(64, 64, device="opencl") @ torch.randn(64, 64, device="opencl")
    end.record(stream)
    end.synchronize()
    assert start.elapsed_time(end) >= 0 and end.query()
    assert y.shape == (64, 64)


def test_generators_of_the_device_repeat_and_differ():
    g = torch.Generator(device="opencl")
    assert g.device.type == "opencl"
    g.manual_seed(7)
    a = torch.randn(1000, device="opencl", generator=g)
    g.manual_seed(7)
    b = torch.randn(1000, device="opencl", generator=g)
    c = torch.randn(1000, device="opencl", generator=g)
    assert torch.equal(a.cpu(), b.cpu()) and not torch.equal(b.cpu(), c.cpu())
    assert abs(a.mean().item()) < 0.15 and abs(a.std().item() - 1) < 0.15
    state = g.get_state()
    d = torch.rand(10, device="opencl", generator=g)
    g.set_state(state)
    assert torch.equal(torch.rand(10, device="opencl", generator=g).cpu(), d.cpu())


def test_manual_seed_seeds_the_default_generators():
    torch.manual_seed(123)
    assert torch.opencl.initial_seed() == 123
    a = torch.rand(50, device="opencl")
    torch.manual_seed(123)
    assert torch.equal(torch.rand(50, device="opencl").cpu(), a.cpu())
    state = torch.opencl.get_rng_state()
    b = torch.nn.functional.dropout(torch.ones(200, device="opencl"), 0.5)
    torch.opencl.set_rng_state(state)
    assert torch.equal(torch.nn.functional.dropout(torch.ones(200, device="opencl"), 0.5).cpu(), b.cpu())
    torch.opencl.set_rng_state(state)
    with torch.random.fork_rng(devices=[torch.opencl.current_device()], device_type="opencl"):
        torch.rand(5, device="opencl")
    assert torch.equal(torch.opencl.get_rng_state(), state)


def test_cpu_generators_still_serve_device_tensors():
    g = torch.Generator().manual_seed(3)
    a = torch.empty(20, device="opencl").uniform_(generator=g)
    g.manual_seed(3)
    assert torch.equal(torch.empty(20, device="opencl").uniform_(generator=g).cpu(), a.cpu())


def test_pinned_memory_and_non_blocking_copies():
    host = torch.arange(1000, dtype=torch.float32).reshape(10, 100)
    pinned = host.pin_memory()
    assert pinned.is_pinned() and not host.is_pinned()
    assert torch.equal(pinned, host)
    moved = pinned.to("opencl", non_blocking=True)
    back = torch.empty(10, 100).pin_memory()
    back.copy_(moved * 2, non_blocking=True)
    torch.accelerator.synchronize()
    assert torch.equal(back, host * 2)
    assert pinned[3:5].is_pinned()  # a view of a pinned block
    with pytest.raises(RuntimeError, match="pin_memory=True is for host"):
        torch.empty(3, device="opencl", pin_memory=True)


def test_dataloader_with_pin_memory():
    data = torch.utils.data.TensorDataset(torch.randn(20, 3), torch.arange(20))
    loader = torch.utils.data.DataLoader(data, batch_size=8, pin_memory=True)
    seen = 0
    for x, y in loader:
        assert x.is_pinned() and y.is_pinned()
        seen += int(y.to("opencl", non_blocking=True).numel())
    assert seen == 20
