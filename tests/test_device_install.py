"""The opencl device where it is not set up as in this tree: without an OpenCL driver or
its libraries, imports work and every use says in one message what to install. (The wheel
in a fresh virtual environment: test_device_autoload.py.)"""
import os
import pathlib
import subprocess
import sys

import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent

NO_PLATFORM = """
import torch, opencl_functions as ocl, torch_opencl
assert not torch.opencl.is_available()
for call in (lambda: ocl.ocl_matmul(torch.ones(2, 3), torch.ones(3, 2)), lambda: torch.ones(2).to("opencl")):
    try:
        call()
    except RuntimeError as err:  # OpenCLError is one
        print(err)
"""


def test_no_platform_says_what_to_install(opencl_device, tmp_path):
    """With no driver registered (an empty vendors folder for the ICD loader), imports work,
    is_available() is False and every use raises one message naming the package."""
    env = {**os.environ, "OCL_ICD_VENDORS": str(tmp_path), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", NO_PLATFORM], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert len(lines) == 2, proc.stdout
    for line in lines:
        assert line.startswith("no OpenCL platform found: install a driver") and "pocl-opencl-icd" in line


# Imports of the native modules failing as the dynamic loader fails them (a finder raises
# its error), then the messages users see.
MISSING_LIBRARY = """
import importlib.abc, sys
import torch

class Missing(importlib.abc.MetaPathFinder):
    def __init__(self, module, text):
        self.module, self.text = module, text
    def find_spec(self, name, path=None, target=None):
        if name == self.module:
            raise ImportError(self.text)

def message(package, module, text):
    sys.meta_path.insert(0, Missing(module, text))
    for name in [m for m in sys.modules if m.startswith("opencl_functions")]:
        del sys.modules[name]
    try:
        __import__(package)
    except ImportError as err:
        print(err)
    sys.meta_path.pop(0)

message("opencl_functions", "opencl_functions._core", "libOpenCL.so.1: cannot open shared object file")
message("opencl_functions", "opencl_functions._core", "libclblast.so.1: cannot open shared object file")
message("torch_opencl", "torch_opencl._C", "_C.so: undefined symbol: _ZN3c104cuda")
"""


def test_missing_libraries_say_what_to_install(opencl_device):
    # (not loaded with torch: each import below is the first of its package)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    proc = subprocess.run([sys.executable, "-c", MISSING_LIBRARY], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    loader, clblast, device = proc.stdout.splitlines()
    assert "ocl-icd-libopencl1 pocl-opencl-icd" in loader and "libOpenCL.so.1" in loader
    assert "libclblast1" in clblast
    assert "built against the torch it runs with" in device and torch.__version__ in device
