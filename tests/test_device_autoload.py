"""The opencl device loaded by `import torch` (torch's "torch.backends" entry point,
torch_opencl_autoload.py), in child interpreters:

- with the entry point installed (a dist-info folder on the path, as pip leaves it), `import
  torch` alone gives the device, its torch.opencl module and its torch.distributed backend,
  also where the package itself was imported first; TORCH_DEVICE_BACKEND_AUTOLOAD=0 leaves
  it out;
- `import torch` never fails for the device's sake: a tree without torch_opencl (the handout)
  or with it not built yet imports nothing, a device that cannot
  load gives one warning (none where warnings are errors), and without an OpenCL driver the
  first use names the package to install;
- (slow) the wheel of make wheel installed into a fresh virtual environment: the library
  and the device from outside the source tree, and the device with no import of its own."""
import os
import pathlib
import subprocess
import sys
import sysconfig
import warnings
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
ENTRY_POINT = "torch_opencl = torch_opencl_autoload:load"


def installed_entry_point(folder: pathlib.Path) -> pathlib.Path:
    """A dist-info folder declaring the package's entry point, as pip installs it."""
    info = folder / "opencl_functions-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: opencl_functions\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(f"[torch.backends]\n{ENTRY_POINT}\n")
    return folder


def child(tmp_path, script: str, *path: pathlib.Path, flags=(), **env) -> subprocess.CompletedProcess:
    """`script` in a new interpreter run from tmp_path, with `path` (and the tree) on PYTHONPATH."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in (*path, ROOT)), **env}
    return subprocess.run([sys.executable, *flags, "-c", script], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)


LOADED = """
import sys
import torch
x = torch.randn(3, 2, device="opencl")
assert "torch_opencl" in sys.modules and x.device.type == "opencl"
assert torch.opencl.is_available() and (x * 2).sum().item() == 2 * x.sum().item()
print(torch.distributed.get_default_backend_for_device("opencl"))
"""


def test_import_torch_loads_the_device(opencl_device, tmp_path):
    run = child(tmp_path, LOADED, installed_entry_point(tmp_path / "site"), flags=("-W", "error"))
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["oclf"]


def test_the_package_imported_first_still_loads_the_device(opencl_device, tmp_path):
    """`import opencl_functions` imports torch, whose entry point then imports the device
    while the package is still importing: it loads from the modules, not the package."""
    run = child(tmp_path, "import opencl_functions\n" + LOADED, installed_entry_point(tmp_path / "site"),
                flags=("-W", "error"))
    assert run.returncode == 0, run.stderr[-3000:]


def test_autoload_off_leaves_the_device_out(opencl_device, tmp_path):
    script = ("import sys, torch\n"
              "assert not any(m.startswith(('opencl_functions', 'torch_opencl')) for m in sys.modules)\n"
              "try:\n    torch.randn(2, device='opencl')\nexcept RuntimeError as err:\n    print('refused')\n")
    run = child(tmp_path, script, installed_entry_point(tmp_path / "site"), TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["refused"]


@pytest.mark.parametrize("tree_has", ["no device", "the device unbuilt"])
def test_a_tree_without_a_built_device_imports_nothing(tmp_path, tree_has):
    """A students' tree (no torch_opencl) or a source tree before make device (torch_opencl
    without its native module) on the path: the entry point imports nothing at all."""
    tree = tmp_path / "tree"
    (tree / "opencl_functions").mkdir(parents=True)
    (tree / "opencl_functions" / "__init__.py").write_text("raise AssertionError('imported')\n")
    if tree_has == "the device unbuilt":
        (tree / "torch_opencl").mkdir()
        (tree / "torch_opencl" / "__init__.py").write_text("raise AssertionError('imported')\n")
    (tree / "torch_opencl_autoload.py").write_text((ROOT / "torch_opencl_autoload.py").read_text())
    script = ("import sys, warnings\nwarnings.simplefilter('error')\nimport torch_opencl_autoload\n"
              "torch_opencl_autoload.load()\n"
              "print(sorted(m for m in sys.modules if m.startswith(('opencl_functions', 'torch_opencl.'))))\n")
    run = subprocess.run([sys.executable, "-c", script], cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["[]"]


def test_a_device_that_cannot_load_warns_and_never_raises(monkeypatch):
    """The device's import failing (no ICD loader, say): one warning naming the error and the
    switch; with warnings made errors, silence. torch's import goes on either way."""
    import torch_opencl_autoload

    def fails(name):
        raise ImportError("libOpenCL.so.1: cannot open shared object file")

    monkeypatch.setattr(torch_opencl_autoload, "_has_device", lambda: True)
    monkeypatch.setattr(torch_opencl_autoload.importlib, "import_module", fails)
    with pytest.warns(RuntimeWarning, match=r"not loaded with torch \(libOpenCL.so.1.*TORCH_DEVICE_BACKEND_AUTOLOAD=0"):
        torch_opencl_autoload.load()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch_opencl_autoload.load()


def test_without_a_driver_torch_imports_and_first_use_says_what_to_install(opencl_device, tmp_path):
    """No driver registered (an empty vendors folder for the ICD loader)."""
    script = ("import torch\nassert not torch.opencl.is_available()\n"
              "try:\n    torch.ones(2).to('opencl')\nexcept RuntimeError as err:\n    print(err)\n")
    (tmp_path / "vendors").mkdir()
    run = child(tmp_path, script, installed_entry_point(tmp_path / "site"), OCL_ICD_VENDORS=str(tmp_path / "vendors"))
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.startswith("no OpenCL platform found: install a driver") and "pocl-opencl-icd" in run.stdout


# Run by the installed package's interpreter from a folder outside the source tree.
INSTALLED = """
import pathlib, sys
import torch, torch.nn.functional as F
import opencl_functions as ocl, torch_opencl
tree = pathlib.Path(sys.argv[1])
for module in (ocl, torch_opencl):
    assert tree not in pathlib.Path(module.__file__).resolve().parents, module.__file__
torch.manual_seed(0)
x, w, b = torch.randn(2, 3, 11, 9), torch.randn(5, 3, 3, 3), torch.randn(5)
torch.testing.assert_close(ocl.ocl_conv2d(x, w, b, stride=2), F.conv2d(x, w, b, stride=2), rtol=1e-4, atol=1e-4)
a = torch.randn(33, 7)
torch.testing.assert_close((a.to("opencl") * 2 + 1).relu().sum(0).cpu(), (a * 2 + 1).relu().sum(0),
                           rtol=1e-5, atol=1e-5)
print(pathlib.Path(ocl.__file__).parent)
"""
# The device through torch's entry point alone, then with autoloading off.
AUTOLOADED = "import torch; print(torch.randn(2, device='opencl').device)"
AUTOLOAD_OFF = ("import sys, torch\n"
                "assert not any(m.startswith(('opencl_functions', 'torch_opencl')) for m in sys.modules)\n"
                "try:\n    torch.randn(2, device='opencl')\nexcept RuntimeError:\n    print('refused')\n")


@pytest.mark.slow
def test_wheel_installs_and_runs_outside_the_tree(opencl_device, tmp_path):
    """make wheel into a temporary folder (the kernels' OpenCL C headers in it, no C++
    sources), the wheel installed into a fresh virtual environment (torch and numpy seen through a .pth file, so nothing is downloaded), then
    a convolution through the library and a device operator, run from outside the tree; and
    the device loaded by `import torch` alone, unless TORCH_DEVICE_BACKEND_AUTOLOAD=0."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    dist = tmp_path / "dist"
    build = subprocess.run(["make", "-o", ".venv/.requirements", "wheel", f"DIST={dist}"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=3600)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    (wheel,) = dist.glob("opencl_functions-*.whl")
    # The build's metadata stays in build/package: an egg-info folder here would hand the
    # entry point to every interpreter started in the tree.
    assert not list(ROOT.glob("*.egg-info")), "the package build left metadata in the source tree"
    archive = zipfile.ZipFile(wheel)
    names = archive.namelist()
    for wanted in ("opencl_functions/_core", "torch_opencl/_C", "opencl_functions/conv2d.cl",
                   "opencl_functions/conv2d_backward.cl", "torch_opencl/kernels/elementwise.cl",
                   "opencl_functions/clblast_params/", "torch_opencl_autoload.py"):
        assert any(name.startswith(wanted) for name in names), wanted
    # No C++ sources; the kernels' OpenCL C headers, read at run time, are there.
    assert not any(name.endswith((".cpp", ".hpp", ".o")) for name in names)
    headers = {name for name in names if name.endswith(".h")}
    kernel_headers = [*(ROOT / "opencl_functions" / "reference").glob("*.h"),
                      *(ROOT / "torch_opencl" / "kernels").glob("*.h")]
    assert headers == {path.relative_to(ROOT).as_posix() for path in kernel_headers}, headers
    (entry_points,) = [name for name in names if name.endswith(".dist-info/entry_points.txt")]
    declared = archive.read(entry_points).decode()
    assert "[torch.backends]" in declared and ENTRY_POINT in declared

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
    for script, off, want in ((AUTOLOADED, "1", "opencl:0"), (AUTOLOAD_OFF, "0", "refused")):
        run = subprocess.run([str(python), "-c", script], cwd=outside, capture_output=True, text=True, timeout=600,
                             env={**env, "TORCH_DEVICE_BACKEND_AUTOLOAD": off})
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        assert run.stdout.split() == [want]


def test_the_projects_own_venv_loads_the_device(opencl_device, tmp_path):
    """make run installs this tree into .venv editable (scripts/setup.sh): there, from any
    folder and with nothing on PYTHONPATH, `import torch` alone gives the device."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    run = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-c", AUTOLOADED], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert run.stdout.split() == ["opencl:0"]


LATE_CHOICE = ("import os, sys, torch\n"
               "assert 'torch_opencl' in sys.modules\n"
               "os.environ['OCLF_DEVICE'] = 'no-such-device'\n"
               "try:\n    torch.randn(2, device='opencl')\nexcept RuntimeError as err:\n"
               "    print('no-such-device' in str(err))\n")


def test_the_autoloaded_device_is_chosen_at_first_use(opencl_device, tmp_path):
    """Loaded with torch, the device opens nothing at import: a program (a demo's --device)
    may still choose it after `import torch`, and its choice is the one the first use meets."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "OCLF_DEVICE", "OCL_DEVICE")}
    run = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-c", LATE_CHOICE], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert run.stdout.split() == ["True"]
