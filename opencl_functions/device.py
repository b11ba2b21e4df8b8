"""The opencl torch device's former name, kept for the programs that use it: a program that
imports opencl_functions.device gets the device's package, torch_opencl (beside this one, and
depending on this one: the only import of this package from the one above it). The module it
gives is torch_opencl itself, so its submodules go by their own names (torch_opencl.compile)."""
import sys

import torch_opencl

sys.modules[__name__] = torch_opencl
