"""torch's device-backend entry point of the installed package: `import torch` imports
torch_opencl, so the `opencl` device works with no import of its own.

    pip install --no-build-isolation .         # or the wheel of make wheel
    python -c "import torch; print(torch.randn(2, device='opencl'))"
    TORCH_DEVICE_BACKEND_AUTOLOAD=0 python ...  # torch loads no backend extension

torch calls load() (entry point group "torch.backends", setup.py) near the end of its own
import, and an exception there would make `import torch` fail. So this module is apart from
the package (importing torch_opencl runs its __init__, which loads the OpenCL libraries and
the device's native module), and load() never raises:
- where the torch_opencl that Python would import is not built (a source tree before `make
  device`) or absent (the students' handout), nothing is imported;
- where importing the device fails (no OpenCL ICD loader, a device built against another
  torch), one warning says why and how to turn autoloading off; `import torch_opencl`
  raises the same error again, in full.
Without an OpenCL driver the device imports, is_available() is False, and the first use
raises the message naming the package to install.
"""
from __future__ import annotations

import glob
import importlib
import importlib.util
import os
import warnings


def _has_device() -> bool:
    """Whether the torch_opencl package on the path is there and built (found without
    importing it)."""
    spec = importlib.util.find_spec("torch_opencl")
    folders = (spec.submodule_search_locations or []) if spec is not None else []
    return any(glob.glob(os.path.join(folder, "_C.*")) for folder in folders)


def load() -> None:
    """Imports torch_opencl (its import registers the device); never raises."""
    try:
        if _has_device():
            importlib.import_module("torch_opencl")
    except Exception as err:  # noqa: BLE001 (import torch must not fail for the device's sake)
        try:
            warnings.warn(f"torch_opencl: the opencl device was not loaded with torch ({err}). "
                          f"TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns loading backends with torch off.",
                          RuntimeWarning, stacklevel=2)
        except Exception:  # noqa: BLE001 (warnings made errors: import torch still succeeds)
            pass
