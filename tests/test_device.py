"""Device selection by OCL_DEVICE (each choice in a fresh Python process, since a process
keeps the device it opened first), `python -m opencl_functions.info`, and kernel build errors read
through OCL_KERNEL_DIR: the message carries the CL_* name, the file, the options and the
build log, and a fixed file builds again without a restart."""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Prints the index of the selected device as JSON, or the OpenCLError it raised.
SELECT = """
import json, opencl_functions as ocl
try:
    print(json.dumps({"index": ocl.device_info()["index"]}))
except ocl.OpenCLError as err:
    print(json.dumps({"error": str(err), "type": type(err).__name__}))
"""

# Devices that cannot be chosen raise OpenCLError on every call (the runtime is only
# created once a choice succeeds), so one process tries two bad values, then "0:0".
RETRY = """
import json, os, torch, opencl_functions as ocl
out = {}
for value in ["no-such-device-xyz", "9:9"]:
    os.environ["OCL_DEVICE"] = value
    try:
        ocl.ocl_matmul(torch.ones(2, 3), torch.ones(3, 4))
    except ocl.OpenCLError as err:
        out[value] = {"error": str(err), "type": type(err).__name__}
os.environ["OCL_DEVICE"] = "0:0"
out["result"] = ocl.ocl_matmul(torch.ones(2, 3), torch.ones(3, 4)).tolist()
out["index"] = ocl.device_info()["index"]
print(json.dumps(out))
"""


def start_python(args, device=None):
    env = dict(os.environ)
    for name in ("OCLF_DEVICE", "OCL_DEVICE", "OCLF_KERNEL_DIR", "OCL_KERNEL_DIR"):  # the names and their aliases
        env.pop(name, None)
    if device is not None:
        env["OCL_DEVICE"] = device
    return subprocess.Popen(
        [sys.executable, *args], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.fixture(scope="module")
def devices(ocl):
    return ocl.list_devices()


def name_to_try(devices):
    """The OCL_DEVICE name to try: PoCL where PoCL is installed (matched through its vendor,
    "The pocl project"), else the last device's platform name in capitals."""
    if any(d["platform"] == "Portable Computing Language" for d in devices):
        return "PoCL"
    return devices[-1]["platform"].upper()


@pytest.fixture(scope="module")
def runs(ocl, devices):
    """Starts the child processes at once (each spends seconds importing torch) and
    returns {name: (returncode, stdout, stderr)}, waiting for all of them."""
    started = {
        "info": start_python(["-m", "opencl_functions.info"]),
        "retry": start_python(["-c", RETRY], "no-such-device-xyz"),
        "name": start_python(["-c", SELECT], name_to_try(devices)),
    }
    results = {}
    for name, proc in started.items():
        stdout, stderr = proc.communicate(timeout=300)
        results[name] = (proc.returncode, stdout, stderr)
    return results


def last_json(runs, name):
    returncode, stdout, stderr = runs[name]
    assert returncode == 0, stderr
    return json.loads(stdout.strip().splitlines()[-1])


def test_info_lists_devices_and_the_default(runs, devices):
    """`python -m opencl_functions.info` (make info) marks the default: the first GPU, else the first device."""
    returncode, stdout, stderr = runs["info"]
    assert returncode == 0, stderr
    for d in devices:
        assert f"{d['index']}  {d['type']:<4} {d['platform']} / {d['device']}" in stdout
    marked = [line.split()[1] for line in stdout.splitlines() if line.startswith(" *")]
    gpus = [d["index"] for d in devices if d["type"] == "GPU"]
    assert marked == [(gpus or [devices[0]["index"]])[0]]
    assert "selected: " in stdout
    assert "host CPU: " in stdout  # speed figures are recorded with it


def test_select_by_index(runs):
    result = last_json(runs, "retry")
    assert result["index"] == "0:0"
    assert result["result"] == [[3.0] * 4] * 2


def test_select_by_name_case_insensitive(runs, devices):
    value = name_to_try(devices)
    index = last_json(runs, "name")["index"]
    if value == "PoCL":
        assert index in [d["index"] for d in devices if d["platform"] == "Portable Computing Language"]
    else:
        assert index == next(d["index"] for d in devices if d["platform"].upper() == value)


@pytest.mark.parametrize("value", ["no-such-device-xyz", "9:9"])
def test_bogus_device_raises_and_lists_the_devices(runs, devices, value):
    result = last_json(runs, "retry")[value]
    assert result["type"] == "OpenCLError"
    assert f"OCL_DEVICE={value} matches no OpenCL device" in result["error"]
    for d in devices:
        assert f"{d['index']}  {d['platform']} / {d['device']}" in result["error"]


# ---------------------------------------------------------------------------------
# Kernel files read at run time from OCL_KERNEL_DIR

BROKEN_LINE = "__kernel void broken_on_purpose(__global float* y) { y[0] = undeclared_name_xyz; }\n"


@pytest.fixture
def kernel_dir(ocl, tmp_path, monkeypatch):
    """A copy of the .cl files in a temporary folder that OCL_KERNEL_DIR points to; conv2d
    runs the student's kernel of conv2d.cl (OCLF_CONV_KERNEL=tiled), whose edits these
    tests make."""
    for source in pathlib.Path(ocl.KERNEL_DIR).glob("*.cl"):
        shutil.copy(source, tmp_path / source.name)
    monkeypatch.delenv("OCLF_KERNEL_DIR", raising=False)  # it would win over its alias
    monkeypatch.setenv("OCL_KERNEL_DIR", str(tmp_path))
    monkeypatch.setenv("OCLF_CONV_KERNEL", "tiled")
    return tmp_path


def small_conv(ocl):
    torch.manual_seed(0)
    x, w, b = torch.randn(1, 3, 6, 5), torch.randn(4, 3, 3, 3), torch.randn(4)
    return ocl.ocl_conv2d(x, w, b), F.conv2d(x, w, b)


def test_kernel_dir_copy_is_used(ocl, kernel_dir):
    assert ocl._core.kernel_dir() == str(kernel_dir)
    actual, expected = small_conv(ocl)
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)


def test_build_error_reports_log_path_and_options(ocl, kernel_dir):
    source = kernel_dir / "conv2d.cl"
    good = source.read_text()
    source.write_text(good + BROKEN_LINE)
    with pytest.raises(ocl.KernelBuildError) as info:
        small_conv(ocl)
    message = str(info.value)
    assert isinstance(info.value, ocl.OpenCLError)
    assert message.startswith("CL_BUILD_PROGRAM_FAILURE (-11)")
    assert str(source) in message
    assert "options: -cl-std=CL1.2" in message
    assert "build log:" in message and "undeclared_name_xyz" in message
    assert "error" in message.split("build log:")[1].lower()

    # The student loop: fix the file, call again, no rebuild of the extension.
    source.write_text(good)
    actual, expected = small_conv(ocl)
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)


def test_missing_kernel_file(ocl, kernel_dir):
    (kernel_dir / "conv2d.cl").unlink()
    with pytest.raises(ocl.OpenCLError, match=r"cannot find kernel file .*conv2d\.cl .*OCL_KERNEL_DIR"):
        small_conv(ocl)


def test_missing_kernel_name_carries_cl_status(ocl, kernel_dir):
    """A file that builds but lacks the kernel: clCreateKernel's CL_INVALID_KERNEL_NAME."""
    (kernel_dir / "conv2d.cl").write_text("__kernel void something_else(__global float* y) { y[0] = 1.0f; }\n")
    with pytest.raises(ocl.OpenCLError, match=r"^CL_INVALID_KERNEL_NAME \(-46\) in clCreateKernel") as info:
        small_conv(ocl)
    assert not isinstance(info.value, ocl.KernelBuildError)
    assert "conv2d.cl" in str(info.value)


def test_library_works_after_kernel_errors(ocl):
    """Errors from another kernel folder leave the default one working."""
    actual, expected = small_conv(ocl)
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------------------------
# What the selected device reports


def test_device_info_fields(ocl):
    info = ocl.device_info()
    for key in ("platform", "device", "version"):
        assert isinstance(info[key], str) and info[key]
    assert info["version"].startswith("OpenCL ")
    assert info["max_work_group_size"] >= 1 and info["local_mem_size"] >= 1024
    assert info["index"] in [d["index"] for d in ocl.list_devices()]


def test_kernel_time_is_measured(ocl):
    small_conv(ocl)
    conv_ns = ocl.last_kernel_time_ns()
    ocl.ocl_matmul(torch.randn(64, 64), torch.randn(64, 64))
    assert conv_ns > 0 and ocl.last_kernel_time_ns() > 0
