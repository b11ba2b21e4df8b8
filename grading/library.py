"""The library's pure-Python modules, for the course tools: opencl_functions/settings.py
(every setting) and opencl_functions/geometry.py (a convolution's geometry), loaded by path. `import opencl_functions.settings` would import the package
first, and with it the compiled module _core: the course tools run where it is not built
yet (a fresh checkout, the tests' handout trees), and the grader never loads it into its own
process (it holds the student's code). These modules import nothing of the package.

    from grading.library import geometry, settings
    settings.get("GRADER_TIMEOUT")
    geometry.conv2d_geometry(x.shape, weight.shape, stride, dilation, groups).output_shape
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

LIBRARY = Path(__file__).resolve().parent.parent / "opencl_functions"


def _load(name: str) -> ModuleType:
    """opencl_functions/<name>.py as the module oclf_<name>, loaded once per process."""
    key = f"oclf_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, LIBRARY / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module  # before it runs: its dataclasses look their module up there
        spec.loader.exec_module(module)
    return sys.modules[key]


settings = _load("settings")
geometry = _load("geometry")
