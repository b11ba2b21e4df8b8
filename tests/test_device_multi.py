"""One runtime per OpenCL device, shared by the library and the opencl device, and every
device of the platform in one process:

- the library (_core) and the device (_C) hold the same runtime: one context, queue and
  program cache, so a program one builds is found by the other, and one Python module
  (opencl_functions.devices) names the devices for both; a device tensor passed to
  ocl_conv2d / ocl_matmul is computed in place, with no copy to the host;
- with two OpenCL devices (the platform's own when it has two, as a 2-GPU machine does;
  else PoCL's two with POCL_DEVICES="pthread pthread"; each check runs in a child process,
  since a process reads its devices once), opencl:0 and opencl:1 hold tensors and compute on both, copies between them are right, each has its
  own memory statistics and graphs, the current device is per thread and per block, and an
  operator given tensors of two devices raises a clear error;
- OCLF_VISIBLE_DEVICES narrows and orders the devices, and a bad value says why.
"""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


def run_child(code: str, env: dict) -> dict:
    """Runs `code` in a fresh Python with the environment `env` adds; it prints one JSON
    object, returned here."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=dict(os.environ, **env),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def two_devices(ocl) -> dict:
    """The environment of a child process with two devices of one platform: this platform's,
    when it has two or more (the device selection stays as it is); else PoCL's two."""
    if ocl.device_count() >= 2:
        return {}
    if not any("Portable Computing Language" in d["platform"] for d in ocl.list_devices()):
        pytest.skip("one OpenCL device, and no PoCL to make two with POCL_DEVICES")
    return {"POCL_DEVICES": "pthread pthread", "OCLF_DEVICE": "pocl", "OCLF_VISIBLE_DEVICES": ""}


def test_library_and_device_share_one_runtime(ocl, opencl_device):
    """The device's native module runs on the runtime _core holds, not a copy of its own: in a
    fresh process, the kernels the device's first operator builds are counted by the library's
    program cache, on the device the library names current."""
    got = run_child("""
        import json, torch, torch_opencl
        from opencl_functions import _core, devices
        index = devices.current_device()
        before = _core.program_cache(index)["fixed_kernels"]
        (torch.ones(7, device="opencl") * 3).cpu()
        print(json.dumps({"before": before, "after": _core.program_cache(index)["fixed_kernels"],
                          "index": index, "torch": torch.opencl.current_device()}))
    """, {})
    assert got["after"] > got["before"], got
    assert got["torch"] == got["index"]


def test_a_program_built_by_the_library_serves_the_device(ocl, opencl_device):
    """The library builds the convolution's program for a shape; the device then runs the
    same convolution (same kernel and options, the shared launch layer) without building."""
    from opencl_functions import _core

    index = _core.current_device()
    torch.manual_seed(0)
    x, w, b = torch.randn(2, 5, 11, 13), torch.randn(7, 5, 3, 3), torch.randn(7)
    expected = torch.nn.functional.conv2d(x, w, b)
    assert torch.allclose(ocl.ocl_conv2d(x, w, b), expected, atol=1e-4, rtol=1e-4)
    built = _core.program_cache(index)["programs_built"]
    xd, wd, bd = x.to("opencl"), w.to("opencl"), b.to("opencl")
    got = torch.nn.functional.conv2d(xd, wd, bd).cpu()
    assert torch.allclose(got, expected, atol=1e-4, rtol=1e-4)
    assert _core.program_cache(index)["programs_built"] == built, "the device built a program the library had"


def test_device_tensors_reach_the_library_without_a_host_copy(ocl, opencl_device):
    torch.manual_seed(1)
    x, w, b = torch.randn(3, 4, 9, 10), torch.randn(6, 2, 3, 2), torch.randn(6)
    a, m = torch.randn(2, 5, 7), torch.randn(7, 3)
    xd, wd, bd, ad, md = (t.to("opencl") for t in (x, w, b, a, m))
    opencl_device.synchronize()
    read_before = opencl_device.memory_stats()["bytes_to_host"]
    with opencl_device.fallback_scope() as report:
        y = ocl.ocl_conv2d(xd, wd, bd, stride=(2, 1), dilation=(1, 2), groups=2)
        c = ocl.ocl_matmul(ad, md)
        dx = ocl.ocl_conv2d_backward_input(y, wd, tuple(x.shape), (2, 1), (1, 2), 2)
    opencl_device.synchronize()
    assert opencl_device.memory_stats()["bytes_to_host"] == read_before, "a device tensor went through the host"
    assert not report.ops, f"fell back to the CPU: {report.ops}"
    assert y.device.type == c.device.type == dx.device.type == "opencl"
    ref = torch.nn.functional.conv2d(x, w, b, stride=(2, 1), dilation=(1, 2), groups=2)
    assert torch.allclose(y.cpu(), ref, atol=1e-4, rtol=1e-4)
    assert torch.allclose(c.cpu(), a @ m, atol=1e-4, rtol=1e-4)
    ref_dx = torch.nn.grad.conv2d_input(tuple(x.shape), w, ref, (2, 1), 0, (1, 2), 2)
    assert torch.allclose(dx.cpu(), ref_dx, atol=1e-3, rtol=1e-4)


def test_library_refuses_tensors_on_two_devices(ocl, opencl_device):
    with pytest.raises(ValueError, match=r"one device, got x on opencl:\d, weight on cpu"):
        ocl.ocl_conv2d(torch.randn(1, 2, 5, 5).to("opencl"), torch.randn(3, 2, 3, 3))


TWO_DEVICES = """
import json, threading, torch
import opencl_functions as ocl
import torch_opencl as dev
from opencl_functions import _core

out = {"count": torch.opencl.device_count(), "library_count": _core.device_count(),
       "accelerator_count": torch.accelerator.device_count(), "current": torch.opencl.current_device()}
torch.manual_seed(0)
a, b = torch.randn(33, 17), torch.randn(17, 9)
x, w = torch.randn(2, 3, 12, 11), torch.randn(5, 3, 3, 3)
a0, b0 = a.to("opencl:0"), b.to("opencl:0")
a1, b1 = a.to("opencl:1"), b.to("opencl:1")
out["devices"] = [str(a0.device), str(a1.device)]
out["mm_0"] = (a0 @ b0).cpu().sub(a @ b).abs().max().item()
out["mm_1"] = (a1 @ b1).cpu().sub(a @ b).abs().max().item()
y1 = torch.nn.functional.conv2d(x.to("opencl:1"), w.to("opencl:1"), padding=1).relu()
out["conv_1"] = y1.cpu().sub(torch.nn.functional.conv2d(x, w, padding=1).relu()).abs().max().item()
out["result_device"] = str(y1.device)
# Copies between the devices, both ways, strided ones too.
moved = a0.t().to("opencl:1")
out["copy_0_to_1"] = [str(moved.device), moved.cpu().equal(a.t())]
back = y1[:, 1:4].to("opencl:0")
out["copy_1_to_0"] = [str(back.device), back.cpu().equal(y1[:, 1:4].cpu())]
c = torch.empty(33, 17, device="opencl:1")
c.copy_(a0)
out["copy_into"] = c.cpu().equal(a)
# Memory statistics per device.
big = torch.empty(1 << 20, device="opencl:1")
out["allocated"] = [torch.opencl.memory_allocated(0), torch.opencl.memory_allocated(1)]
out["accelerator_allocated"] = [torch.accelerator.memory_allocated(0), torch.accelerator.memory_allocated(1)]
del big
# The current device: per block, per thread, and what the library uses.
with torch.opencl.device(1):
    out["in_block"] = [torch.opencl.current_device(), _core.current_device(), str(torch.empty(2, device="opencl").device)]
    out["library_on_1"] = _core.device_info()["device_index"]
    out["library_conv_on_1"] = ocl.ocl_conv2d(x, w).sub(torch.nn.functional.conv2d(x, w)).abs().max().item()
out["after_block"] = torch.opencl.current_device()
seen = []
def other():
    seen.append(torch.opencl.current_device())
torch.opencl.set_device(1)
t = threading.Thread(target=other); t.start(); t.join()
out["thread_starts_on_default"] = seen[0]
out["set_device"] = torch.opencl.current_device()
torch.opencl.set_device(0)
try:
    a0 + a1
    out["mixed"] = "no error"
except RuntimeError as err:
    out["mixed"] = str(err)
try:
    torch.opencl.set_device(2)
    out["out_of_range"] = "no error"
except ValueError as err:
    out["out_of_range"] = str(err)
# A recorded graph belongs to its device, and the autograd engine serves both devices.
g = dev.Graph()
with torch.opencl.device(1):
    static = torch.randn(4, 4).to("opencl:1")
    with dev.graph(g):
        result = static * 2 + 1
static.copy_(torch.ones(4, 4))
g.replay()
out["graph_on_1"] = result.cpu().eq(3).all().item()
p = torch.nn.Parameter(torch.randn(5, 3).to("opencl:1"))
(p * p).sum().backward()
out["grad_on_1"] = [str(p.grad.device), p.grad.cpu().sub(2 * p.detach().cpu()).abs().max().item()]
torch.opencl.synchronize(0); torch.opencl.synchronize(1)
print(json.dumps(out))
"""


def test_two_devices_in_one_process(ocl, opencl_device):
    out = run_child(TWO_DEVICES, two_devices(ocl))
    assert out["count"] == out["library_count"] == out["accelerator_count"] >= 2
    assert out["current"] == 0
    assert out["devices"] == ["opencl:0", "opencl:1"]
    assert out["mm_0"] < 1e-4 and out["mm_1"] < 1e-4 and out["conv_1"] < 1e-4
    assert out["result_device"] == "opencl:1"
    assert out["copy_0_to_1"] == ["opencl:1", True] and out["copy_1_to_0"] == ["opencl:0", True]
    assert out["copy_into"] is True
    assert out["allocated"][1] >= 4 << 20 and out["allocated"][0] < out["allocated"][1]
    assert out["accelerator_allocated"] == out["allocated"]
    assert out["in_block"] == [1, 1, "opencl:1"]
    assert out["library_on_1"] == 1 and out["library_conv_on_1"] < 1e-4
    assert out["after_block"] == 0
    assert out["thread_starts_on_default"] == 0 and out["set_device"] == 1
    assert "two devices, opencl:0 and opencl:1" in out["mixed"]
    assert "no device 2" in out["out_of_range"]
    assert out["graph_on_1"] is True
    assert out["grad_on_1"][0] == "opencl:1" and out["grad_on_1"][1] < 1e-5


VISIBLE = """
import json, torch
import torch_opencl
from opencl_functions import _core
print(json.dumps({"count": torch.opencl.device_count(), "index": _core.device_info(0)["index"]}))
"""


def test_visible_devices_narrow_and_order(ocl, opencl_device):
    env = two_devices(ocl)
    platform = run_child(VISIBLE, env)["index"].split(":")[0]
    out = run_child(VISIBLE, {**env, "OCLF_VISIBLE_DEVICES": "1", "OCLF_DEVICE": f"{platform}:1"})
    assert out == {"count": 1, "index": f"{platform}:1"}
    out = run_child(VISIBLE, {**env, "OCLF_VISIBLE_DEVICES": "1,0"})
    assert out["count"] == 2 and out["index"] == f"{platform}:1"


@pytest.mark.parametrize("value, message", [("77", "the platform has no device 77"), ("0,0", "listed twice"),
                                            ("x", "'x' is not an index")])
def test_bad_visible_devices_say_why(ocl, value, message):
    code = """
    import json, opencl_functions as ocl
    try:
        ocl.device_info()
        print(json.dumps({"error": None}))
    except ocl.OpenCLError as err:
        print(json.dumps({"error": str(err)}))
    """
    out = run_child(code, {"OCLF_VISIBLE_DEVICES": value})
    assert out["error"] and "OCLF_VISIBLE_DEVICES=" + value in out["error"] and message in out["error"]
