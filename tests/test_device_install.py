"""The opencl device where it is not set up as in this tree: without an OpenCL driver or
its libraries (imports work, and every use says in one message what to install), and, opt-in
(slow), the wheel installed into a fresh virtual environment and used from outside the
source tree."""
import os
import pathlib
import subprocess
import sys
import sysconfig
import zipfile

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent

NO_PLATFORM = """
import torch, opencl_functions as ocl, opencl_functions.device
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
message("opencl_functions.device", "opencl_functions.device._C", "_C.so: undefined symbol: _ZN3c104cuda")
"""


def test_missing_libraries_say_what_to_install(opencl_device):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", MISSING_LIBRARY], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    loader, clblast, device = proc.stdout.splitlines()
    assert "ocl-icd-libopencl1 pocl-opencl-icd" in loader and "libOpenCL.so.1" in loader
    assert "libclblast1" in clblast
    assert "built against the torch it runs with" in device and torch.__version__ in device


# Run by the installed package's interpreter from a folder outside the source tree.
INSTALLED = """
import pathlib, sys
import torch, torch.nn.functional as F
import opencl_functions as ocl, opencl_functions.device
tree = pathlib.Path(sys.argv[1])
for module in (ocl, opencl_functions.device):
    assert tree not in pathlib.Path(module.__file__).resolve().parents, module.__file__
torch.manual_seed(0)
x, w, b = torch.randn(2, 3, 11, 9), torch.randn(5, 3, 3, 3), torch.randn(5)
torch.testing.assert_close(ocl.ocl_conv2d(x, w, b, stride=2), F.conv2d(x, w, b, stride=2), rtol=1e-4, atol=1e-4)
a = torch.randn(33, 7)
torch.testing.assert_close((a.to("opencl") * 2 + 1).relu().sum(0).cpu(), (a * 2 + 1).relu().sum(0),
                           rtol=1e-5, atol=1e-5)
print(pathlib.Path(ocl.__file__).parent)
"""


@pytest.mark.slow
def test_wheel_installs_and_runs_outside_the_tree(opencl_device, tmp_path):
    """make wheel into a temporary folder, the wheel installed into a fresh virtual
    environment (torch and numpy seen through a .pth file, so nothing is downloaded), then
    a convolution through the library and a device operator, run from outside the tree."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    dist = tmp_path / "dist"
    build = subprocess.run(["make", "-o", ".venv/.requirements", "wheel", f"DIST={dist}"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=3600)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    (wheel,) = dist.glob("opencl_functions-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for wanted in ("opencl_functions/_core", "opencl_functions/device/_C", "opencl_functions/conv2d.cl",
                   "opencl_functions/conv2d_backward.cl", "opencl_functions/device/kernels/elementwise.cl",
                   "opencl_functions/clblast_params/"):
        assert any(name.startswith(wanted) for name in names), wanted
    assert not any(name.endswith((".cpp", ".hpp", ".h", ".o")) for name in names)

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    (venv / "lib" / version / "site-packages" / "outer.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True,
                   env=env, timeout=300)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    run = subprocess.run([str(python), "-c", INSTALLED, str(ROOT)], cwd=outside, env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert pathlib.Path(run.stdout.split()[-1]).is_relative_to(venv)
