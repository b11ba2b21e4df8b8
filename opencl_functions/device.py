"""The opencl torch device's former name: `import opencl_functions.device` is `import
torch_opencl` (the device's package, beside this one, which depends on this one: the name is
resolved when a program imports it). Programs written for the old name keep working; the module
it gives is torch_opencl itself, so its submodules are imported by their own names
(`torch_opencl.compile`)."""
import importlib
import sys

sys.modules[__name__] = importlib.import_module("torch_opencl")
