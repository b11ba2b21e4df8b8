"""The opencl device's user tools: seeded random numbers, torch.save/torch.load of device
tensors and state dicts, the CPU fallback's record (dict, table, scopes), memory statistics
(peaks, resets, the summary), events timed on the queue, the kernel profile; strided copies
across the CPU kernels' chunks. Without a driver and as an installed wheel:
test_device_install.py."""
import io
import time

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

# Operators with a CPU kernel only, so that on opencl tensors they always take the CPU
# fallback, whatever the device implements natively: one copies after sleeping `ms`, one
# adds two tensors in place.
LIB = "oclf_tools_test"


@torch.library.custom_op(f"{LIB}::sleepy_copy", mutates_args=(), device_types="cpu")
def sleepy_copy(x: torch.Tensor, ms: float) -> torch.Tensor:
    time.sleep(ms / 1e3)
    return x.clone()


@torch.library.custom_op(f"{LIB}::add_into", mutates_args=("out",), device_types="cpu")
def add_into(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    torch.add(a, b, out=out)


@pytest.fixture
def quiet_fallback(opencl_device, monkeypatch):
    """The fallback without its once-per-operator warning (pytest makes warnings errors)."""
    monkeypatch.setenv("OCLF_FALLBACK", "silent")
    return opencl_device


# --- random numbers -------------------------------------------------------------------

def dropout_mask(seed: int) -> torch.Tensor:
    torch.manual_seed(seed)
    x = torch.ones(37, 129, device="opencl")
    return F.dropout(x, p=0.5, training=True).cpu() != 0


def test_seeded_dropout_repeats(opencl_device):
    first, again = dropout_mask(3), dropout_mask(3)
    assert torch.equal(first, again)
    assert 0.3 < first.float().mean().item() < 0.7  # a real mask, neither all kept nor all dropped
    assert not torch.equal(first, dropout_mask(4))


def test_seeded_randn_repeats(opencl_device):
    def draw(seed):
        torch.manual_seed(seed)
        return torch.randn(5, 7, device="opencl").cpu()

    assert torch.equal(draw(11), draw(11))
    assert not torch.equal(draw(11), draw(12))
    torch.opencl.manual_seed(0)  # the current device's generator alone, as torch.cuda.manual_seed


# --- torch.save / torch.load ----------------------------------------------------------

def round_trip(obj, **load_args):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, **load_args)


@pytest.mark.parametrize("map_location", [None, "opencl", "cpu"])
def test_save_load_tensor(opencl_device, map_location):
    x = torch.randn(3, 33)
    view = x.to("opencl")[1:, 5:20]  # a view: its storage offset and strides survive too
    loaded = round_trip(view, map_location=map_location)
    assert loaded.device.type == (map_location or "opencl")
    assert loaded.shape == (2, 15) and loaded.stride() == view.stride()
    assert torch.equal(loaded.cpu(), x[1:, 5:20])


def small_model() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(),
                         nn.Linear(8 * 7 * 7, 5))


def test_save_load_state_dict(opencl_device):
    torch.manual_seed(0)
    model = small_model().to("opencl").eval()
    model[1].running_mean.add_(0.5)  # buffers travel too
    x = torch.randn(2, 3, 7, 7)
    expected = model(x.to("opencl")).cpu()
    saved = model.state_dict()

    on_cpu = round_trip(saved, map_location="cpu")
    assert all(t.device.type == "cpu" for t in on_cpu.values())
    for name, tensor in saved.items():
        assert torch.equal(on_cpu[name], tensor.cpu()), name

    on_device = round_trip(saved, map_location="opencl")
    assert all(t.device.type == "opencl" for t in on_device.values())
    fresh = small_model().to("opencl").eval()
    fresh.load_state_dict(on_device)
    torch.testing.assert_close(fresh(x.to("opencl")).cpu(), expected, rtol=0, atol=0)

    cpu_model = small_model().eval()
    cpu_model.load_state_dict(on_cpu)
    torch.testing.assert_close(cpu_model(x), expected, rtol=1e-4, atol=1e-5)


# --- the CPU fallback's record ----------------------------------------------------------

def test_fallback_stats_time_calls_and_bytes(quiet_fallback):
    device = quiet_fallback
    device.reset_fallback_ops()
    x = torch.randn(10, 33).to("opencl")
    for _ in range(2):
        y = sleepy_copy(x, 30.0)
    assert torch.equal(y.cpu(), x.cpu())
    name = f"{LIB}::sleepy_copy"
    stat = device.fallback_stats()[name]
    assert stat.calls == 2
    assert 0.06 <= stat.seconds < 5.0  # two 30 ms sleeps inside, and not the whole test
    assert stat.bytes_to_host == stat.bytes_to_device == 2 * x.numel() * 4
    assert device.fallback_ops()[name] == 2


def test_fallback_counts_in_place_results(quiet_fallback):
    device = quiet_fallback
    device.reset_fallback_ops()
    a, b = torch.randn(7, 5), torch.randn(7, 5)
    out = torch.empty(7, 5, device="opencl")
    add_into(out, a.to("opencl"), b.to("opencl"))
    torch.testing.assert_close(out.cpu(), a + b)
    stat = device.fallback_stats()[f"{LIB}::add_into"]
    assert stat.calls == 1
    assert stat.bytes_to_host == 3 * 7 * 5 * 4  # out, a and b go to the host


def test_fallback_report_sorted_by_time(quiet_fallback):
    device = quiet_fallback
    device.reset_fallback_ops()
    x = torch.randn(4).to("opencl")
    add_into(torch.empty(4, device="opencl"), x, x)
    sleepy_copy(x, 40.0)
    report = device.fallback_report()
    lines = report.splitlines()
    assert "2 operator(s), 2 call(s)" in lines[0]
    names = [line.split()[0] for line in lines[2:]]
    assert names == [f"{LIB}::sleepy_copy", f"{LIB}::add_into"]
    device.reset_fallback_ops()
    assert device.fallback_stats() == {} and "no operator ran on the CPU" in device.fallback_report()


def test_fallback_scopes_nest(quiet_fallback):
    device = quiet_fallback
    x = torch.randn(6).to("opencl")
    with device.fallback_scope() as outer:
        sleepy_copy(x, 1.0)
        with device.fallback_scope() as inner:
            add_into(torch.empty(6, device="opencl"), x, x)
            add_into(torch.empty(6, device="opencl"), x, x)
            device.reset_fallback_ops()  # the global record's reset leaves scopes alone
        assert set(inner.ops) == {f"{LIB}::add_into"} and inner.ops[f"{LIB}::add_into"].calls == 2
        sleepy_copy(x, 1.0)
    sleepy_copy(x, 1.0)  # after the scopes closed: theirs stay as they were
    assert outer.ops[f"{LIB}::sleepy_copy"].calls == 2
    assert outer.ops[f"{LIB}::add_into"].calls == 2
    assert outer.calls == 4 and outer.seconds >= 0.002
    assert inner.calls == 2
    text = str(outer)
    assert f"{LIB}::sleepy_copy" in text and f"{LIB}::add_into" in text and "4 call(s)" in text
    assert device.fallback_ops()[f"{LIB}::sleepy_copy"] == 2  # since the reset


def test_no_fallback_scope_is_empty(opencl_device):
    x = torch.randn(9, 9).to("opencl")
    with opencl_device.fallback_scope() as report:
        (x @ x + 1).relu().sum().cpu()
    assert report.ops == {} and report.calls == 0
    assert "no operator ran on the CPU" in str(report)


# --- memory statistics ----------------------------------------------------------------

MiB = 2**20


def test_peak_reset(opencl_device):
    torch.opencl.synchronize()
    big = torch.empty(4 * MiB // 4, device="opencl")
    peak_with_big = torch.opencl.max_memory_allocated()
    assert peak_with_big >= torch.opencl.memory_allocated() >= 4 * MiB
    del big
    assert torch.opencl.max_memory_allocated() == peak_with_big
    torch.opencl.reset_peak_memory_stats()
    assert torch.opencl.max_memory_allocated() == torch.opencl.memory_allocated()
    assert torch.opencl.max_memory_reserved() == torch.opencl.memory_reserved()
    small = torch.empty(1000, device="opencl")
    assert torch.opencl.max_memory_allocated() == torch.opencl.memory_allocated()
    del small


def test_peak_reserved_follows_new_buffers(opencl_device):
    torch.opencl.empty_cache()
    torch.opencl.reset_peak_memory_stats()
    before = torch.opencl.memory_reserved()
    x = torch.empty(3 * MiB // 4 + 7, device="opencl")  # a size no cached buffer serves
    assert torch.opencl.max_memory_reserved() >= before + 3 * MiB
    del x
    torch.opencl.empty_cache()
    assert torch.opencl.memory_reserved() == torch.opencl.memory_allocated()
    assert torch.opencl.max_memory_reserved() >= before + 3 * MiB


def test_accumulated_reset_and_counts(opencl_device):
    torch.opencl.reset_accumulated_memory_stats()
    stats = torch.opencl.memory_stats()
    assert stats["allocations"] == stats["cache_hits"] == stats["frees"] == stats["buffers_created"] == 0
    live = stats["live_buffers"]
    tensors = [torch.empty(1000 + i, device="opencl") for i in range(3)]
    stats = torch.opencl.memory_stats()
    assert stats["allocations"] == 3 and stats["live_buffers"] == live + 3
    del tensors
    stats = torch.opencl.memory_stats()
    assert stats["frees"] == 3 and stats["live_buffers"] == live and stats["cached_buffers"] >= 3
    torch.opencl.empty_cache()
    stats = torch.opencl.memory_stats()
    assert stats["cached_buffers"] == 0 and stats["buffers_released"] >= 3


def test_memory_summary(opencl_device):
    x = torch.empty(MiB // 4, device="opencl")
    text = torch.opencl.memory_summary()
    assert torch.opencl.get_device_name() in text
    rows = {line.split()[0]: line for line in text.splitlines() if line.strip()}
    for row in ("allocated", "reserved", "allocations", "frees", "kernel"):
        assert row in rows, row
    allocated_mib = torch.opencl.memory_allocated() / MiB
    assert f"{allocated_mib:.1f} MiB" in rows["allocated"]
    assert "kernel" not in torch.opencl.memory_summary(abbreviated=True)
    del x


# --- events -----------------------------------------------------------------------------

def test_event_times_queued_work(opencl_device):
    x = torch.randn(384, 384).to("opencl")
    (x @ x).cpu()  # the product's program is built before timing
    start, end = torch.opencl.Event(enable_timing=True), torch.opencl.Event(enable_timing=True)
    torch.opencl.synchronize()
    t0 = time.perf_counter()
    start.record()
    y = x
    for _ in range(8):
        y = (y @ x) * (1.0 / 384)
    end.record()
    end.synchronize()
    wall_ms = (time.perf_counter() - t0) * 1e3
    assert start.query() and end.query()
    ms = start.elapsed_time(end)
    assert 0 < ms <= wall_ms + 1.0
    # Eight 384^3 products take time on any device: at least 1 microsecond.
    assert ms > 1e-3
    assert torch.isfinite(y.cpu()).all()


def test_event_on_the_current_stream(opencl_device):
    stream = torch.opencl.current_stream()
    assert stream.device == torch.device("opencl", 0) and stream == torch.opencl.default_stream()
    event = torch.opencl.Event()
    event.record(stream)
    event.synchronize()
    assert event.query()
    generic = torch.Event(device="opencl", enable_timing=True)
    generic.record()
    generic.synchronize()
    assert generic.query()


def test_event_errors(opencl_device):
    untimed = [torch.opencl.Event(), torch.opencl.Event()]
    for event in untimed:
        event.record()
        event.synchronize()
    with pytest.raises(ValueError, match="enable_timing"):
        untimed[0].elapsed_time(untimed[1])
    never = torch.opencl.Event(enable_timing=True)
    timed = torch.opencl.Event(enable_timing=True)
    timed.record()
    timed.synchronize()
    with pytest.raises(ValueError, match="recorded"):
        timed.elapsed_time(never)
    with pytest.raises(ValueError, match="interprocess"):
        torch.opencl.Event(interprocess=True)


# --- kernel profile -------------------------------------------------------------------------

def test_kernel_profile_names_ops_and_kernels(opencl_device):
    x = torch.randn(2, 8, 12, 12, requires_grad=True)
    conv = nn.Conv2d(8, 16, 3, padding=1).to("opencl")
    xd = x.detach().to("opencl").requires_grad_()
    conv(xd).sum().backward()  # programs built before timing
    with opencl_device.kernel_profile() as prof:
        y = conv(xd)
        y.sum().backward()
        z = xd.transpose(0, 1).contiguous()
    assert prof.launches and all(launch.seconds >= 0 for launch in prof.launches)
    ops = {launch.op for launch in prof.launches}
    assert {"aten::convolution_overrideable", "aten::convolution_backward_overrideable"} <= ops
    # The copy inside transpose(...).contiguous() is named by the device operator that runs it.
    assert any(launch.kernel.startswith("ew_") and "copy" in launch.op for launch in prof.launches)
    assert prof.seconds == pytest.approx(sum(launch.seconds for launch in prof.launches))
    by_op = prof.totals("op")
    assert sum(calls for calls, _ in by_op.values()) == len(prof.launches)
    assert sum(seconds for _, seconds in prof.totals("kernel").values()) == pytest.approx(prof.seconds)
    table = prof.table(rows=3)
    assert table.startswith(f"opencl kernel profile: {len(prof.launches)} command(s)")
    assert len(table.splitlines()) <= 2 + 3 + 1
    assert "KernelProfile(" in repr(prof)
    with pytest.raises(ValueError, match="by must be"):
        prof.totals("layer")
    # Work outside the block is not timed, and a new block starts empty.
    (z * 2).cpu()
    with opencl_device.kernel_profile() as empty:
        with pytest.raises(RuntimeError, match="one runs at a time"):
            with opencl_device.kernel_profile():
                pass
    assert empty.launches == [] and "no kernel ran" in empty.table()


def test_kernel_profile_times_library_calls(opencl_device):
    a = torch.randn(96, 80).to("opencl")
    b = torch.randn(80, 72).to("opencl")
    (a @ b).cpu()
    with opencl_device.kernel_profile() as prof:
        c = a @ b
    assert torch.allclose(c.cpu(), a.cpu() @ b.cpu(), rtol=1e-4, atol=1e-4)
    assert [launch.op for launch in prof.launches] and all(launch.op == "aten::mm" for launch in prof.launches)


def test_kernel_profile_refused_while_recording(opencl_device):
    x = torch.randn(64).to("opencl")
    (x + 1).cpu()
    with opencl_device.graph():
        with pytest.raises(RuntimeError, match="kernel timing"):
            with opencl_device.kernel_profile():
                pass
        x + 1


@pytest.mark.parametrize("shape, dims", [((512, 7, 3, 3), (1, 0, 2, 3)), ((5, 6, 7), (2, 0, 1)),
                                         ((3, 1, 17, 2), (3, 2, 0, 1)), ((33, 5), (1, 0))])
def test_strided_copies_across_chunk_ends(opencl_device, shape, dims):
    # ew_strided steps its index through 16-element chunks on CPUs: chunks that end inside,
    # at and across the ends of dimensions, with broadcast operands too.
    x = torch.randn(shape)
    d = x.to("opencl")
    assert torch.equal(d.permute(dims).contiguous().cpu(), x.permute(dims).contiguous())
    y = torch.randn(shape[-1])
    assert torch.allclose((d.permute(dims) * y.to("opencl")[0]).cpu(), x.permute(dims) * y[0])
    t = x.permute(dims)
    bias = torch.randn(t.shape[-1])
    assert torch.allclose((d.permute(dims) + bias.to("opencl")).cpu(), t + bias)
