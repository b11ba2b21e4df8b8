"""What torch's own utilities expect of a device module, on the opencl device: torch.profiler
(the device's kernels with their device times per operator, its memory with
profile_memory=True; the legacy profiler's device times), deterministic mode's
fill_uninitialized_memory, device properties and capability, free memory, sparse layouts
refused with a message, and the CPU fallback naming the dtype its kernel does not take."""
import json
import math
import warnings

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function


def _work(n=96):
    a = torch.randn(n, n + 5).to("opencl")
    b = torch.randn(n + 5, n - 7).to("opencl")
    return (a @ b).relu().sum(1)


# ---- torch.profiler --------------------------------------------------------------------------

@pytest.fixture
def kineto(opencl_device):
    """The device's Kineto activity: torch releases with the PrivateUse1 profiler registry (2.14;
    2.11 has none, and only the legacy profiler's device times are there)."""
    if torch.__version__ < "2.14":
        pytest.skip(f"torch {torch.__version__} has no Kineto registry for a PrivateUse1 profiler")
    return opencl_device


def test_profiler_lists_the_device_activity(kineto):
    assert ProfilerActivity.PrivateUse1 in torch.profiler.supported_activities()


def test_profiler_charges_each_operator_with_its_kernels(kineto):
    _work().cpu()  # kernels built before the profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        with record_function("step"):
            y = _work()
        y.cpu()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.PrivateUse1]
    assert kernels, "no device activity recorded"
    assert all(e.device_index == 0 and e.time_range.elapsed_us() >= 0 for e in kernels)
    names = {e.name for e in kernels}
    assert any("relu" in n or "ew_" in n for n in names), names
    averages = {e.key: e for e in prof.key_averages()}
    # relu's and sum's kernels are charged to their operators, and to the user's range.
    for op in ("aten::relu", "aten::sum"):
        assert averages[op].self_device_time_total > 0, (op, averages[op])
    assert averages["step"].device_time_total >= averages["aten::relu"].device_time_total
    table = prof.key_averages().table(sort_by="device_time_total", row_limit=12)
    assert "Self OPENCL time total" in table and "aten::relu" in table


def test_profiler_device_times_fall_inside_the_profile(kineto):
    _work().cpu()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        y = _work()
        y.cpu()
    events = prof.events()
    cpu = [e for e in events if e.device_type == torch.autograd.DeviceType.CPU]
    device = [e for e in events if e.device_type == torch.autograd.DeviceType.PrivateUse1]
    first, last = min(e.time_range.start for e in cpu), max(e.time_range.end for e in cpu)
    slack = 5000  # µs: the device clock is mapped onto the host's with a marker's wait
    assert all(first - slack <= e.time_range.start <= e.time_range.end <= last + slack for e in device)


def test_profiler_trace_shows_the_device_kernels(kineto, tmp_path):
    _work().cpu()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        _work().cpu()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())
    kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]
    assert kernels and all(e["dur"] >= 0 and "operator" in e.get("args", {}) for e in kernels)


def test_profiler_records_device_memory(kineto):
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], profile_memory=True) as prof:
        x = torch.empty(1000, 250, device="opencl")  # 1 MB
        del x
    averages = {e.key: e for e in prof.key_averages()}
    assert averages["aten::empty"].device_memory_usage >= 1_000_000
    frees = [e for e in prof.events() if e.name == "[memory]" and e.device_memory_usage < 0]
    assert any(e.device_memory_usage <= -1_000_000 for e in frees)


def test_profiler_times_every_device_in_use(ocl, kineto):
    """Two devices (PoCL's two where the platform has one): each one's kernels under its index."""
    from test_device_multi import run_child, two_devices

    got = run_child("""
        import json, torch, torch_opencl
        from torch.profiler import profile, ProfilerActivity
        a, b = torch.randn(50, 50).to("opencl:1"), torch.randn(50, 50).to("opencl:0")
        (a @ a).cpu(), (b * 2).cpu()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
            (a @ a).relu().cpu(), (b * 2).cpu()
        device = torch.autograd.DeviceType.PrivateUse1
        print(json.dumps(sorted({e.device_index for e in prof.events() if e.device_type == device})))
    """, two_devices(ocl))
    assert got == [0, 1]


def test_profiler_does_not_disturb_kernel_profile(kineto):
    with kineto.kernel_profile() as kp:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]):
            _work().cpu()
    assert kp.launches, "the kernel profile lost its launches to torch's profiler"


def test_legacy_profiler_gives_device_times(opencl_device):
    _work().cpu()
    with torch.autograd.profiler.profile(use_device="opencl", use_kineto=False) as prof:
        _work().cpu()
    mm = [e for e in prof.function_events if e.name == "aten::mm"]
    assert mm and all(e.device_time_total > 0 for e in mm)


# ---- deterministic mode ----------------------------------------------------------------------

@pytest.mark.parametrize("dtype, filler", [(torch.float32, math.nan), (torch.float16, math.nan),
                                           (torch.int64, 2 ** 63 - 1), (torch.int32, 2 ** 31 - 1)])
def test_empty_is_filled_under_deterministic_mode(opencl_device, dtype, filler):
    stale = torch.full((33,), 7, dtype=dtype, device="opencl")
    del stale  # its buffer goes back to the cache, to be handed out again
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        x = torch.empty(33, dtype=dtype, device="opencl")
        y = torch.empty_strided((3, 5), (1, 3), dtype=dtype, device="opencl")
        z = torch.empty(0, dtype=dtype, device="opencl").resize_(7, 3)
    finally:
        torch.use_deterministic_algorithms(previous)
    for t in (x, y, z):
        expected = torch.full(t.shape, filler, dtype=dtype)
        torch.testing.assert_close(t.cpu(), expected, equal_nan=True)


def test_empty_is_not_filled_without_fill_uninitialized_memory(opencl_device):
    previous = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = False
    try:
        torch.full((7777,), 3.0, device="opencl")  # a size of its own: its buffer comes back to empty()
        x = torch.empty(7777, device="opencl")
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = previous
        torch.use_deterministic_algorithms(False)
    assert (x.cpu() == 3.0).all()  # what the freed buffer held


# ---- properties, capability, memory ----------------------------------------------------------

def test_device_properties(opencl_device):
    props = torch.opencl.get_device_properties()
    assert props.name and props.total_memory > 2 ** 20 and props.multi_processor_count >= 1
    assert props.max_work_group_size >= 1 and props.local_memory > 0
    assert torch.opencl.get_device_properties("opencl:0") == torch.opencl.get_device_properties(0)
    assert props.opencl_version.startswith(f"OpenCL {props.major}.{props.minor}")
    assert torch.opencl.get_device_capability() == (props.major, props.minor) and props.major >= 1
    assert props.name in torch.opencl.get_device_name()
    with pytest.raises(ValueError, match="there is no device 99"):
        torch.opencl.get_device_properties(99)


def test_accelerator_capability_lists_the_device_dtypes(opencl_device):
    dtypes = torch.accelerator.get_device_capability("opencl:0")["supported_dtypes"]
    assert {torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.bool,
            torch.complex64} <= set(dtypes)
    assert torch.qint8 not in dtypes and torch.float8_e4m3fn not in dtypes


def test_mem_get_info_counts_what_the_process_holds(opencl_device):
    free, total = torch.opencl.mem_get_info()
    assert total == torch.opencl.get_device_properties().total_memory and 0 < free <= total
    held = torch.empty(2 ** 22, device="opencl")  # 16 MiB
    free_after, _ = torch.opencl.mem_get_info()
    assert free - free_after >= held.numel() * 4
    assert torch.accelerator.get_memory_info(0) == torch.opencl.mem_get_info(0)


# ---- sparse layouts ----------------------------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda: torch.eye(3).to_sparse().to("opencl"),
    lambda: torch.eye(3).to("opencl").to_sparse(),
    lambda: torch.eye(3).to("opencl").to_sparse_csr(),
    lambda: torch.eye(4).to("opencl").to_sparse(layout=torch.sparse_bsr, blocksize=(2, 2)),
    lambda: torch.sparse_coo_tensor(torch.tensor([[0, 1]]), torch.tensor([1.0, 2.0]), (3,), device="opencl"),
    lambda: torch.eye(3).to_sparse_csr().to("opencl").to_dense(),
], ids=["coo-copied", "to_sparse", "to_sparse_csr", "to_sparse_bsr", "sparse_coo_tensor", "csr-copied-to_dense"])
@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_sparse_layouts_are_refused_with_a_message(opencl_device, make):
    with pytest.raises(NotImplementedError, match="the opencl device holds dense \\(strided\\) tensors only"):
        make()


# ---- the CPU fallback names the dtype --------------------------------------------------------

def test_fallback_names_the_dtype_a_kernel_does_not_take(opencl_device, monkeypatch):
    monkeypatch.delenv("OCLF_FALLBACK", raising=False)
    monkeypatch.delenv("OCL_FALLBACK", raising=False)
    a = torch.randn(5, 3, dtype=torch.float64)
    b = torch.randn(3, 4, dtype=torch.float64)
    opencl_device.reset_fallback_ops()
    with pytest.warns(UserWarning, match=r"aten::mm has no OpenCL kernel for float64; it runs on the CPU"):
        got = a.to("opencl") @ b.to("opencl")
    torch.testing.assert_close(got.cpu(), a @ b)
    assert opencl_device.fallback_ops() == {"aten::mm (float64)": 1}
    assert "aten::mm (float64)" in opencl_device.fallback_report()
    monkeypatch.setenv("OCLF_FALLBACK", "error")
    with pytest.raises(NotImplementedError, match="aten::mm has no OpenCL kernel for float64 and OCLF_FALLBACK=error"):
        a.to("opencl") @ b.to("opencl")


def test_fallback_without_a_kernel_names_no_dtype(opencl_device, monkeypatch):
    monkeypatch.setenv("OCLF_FALLBACK", "silent")
    opencl_device.reset_fallback_ops()
    x = torch.randn(6, 5).to("opencl")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.kthvalue(x, 2, dim=1)
    assert list(opencl_device.fallback_ops()) == ["aten::kthvalue.values"]
