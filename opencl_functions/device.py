"""The opencl torch device's former name: `import opencl_functions.device` is `import
torch_opencl` (the device's package, beside this one). Programs written for the old name keep
working; the module it gives is torch_opencl itself, so its submodules are imported by their
own names (`torch_opencl.compile`)."""
import sys

import torch_opencl

sys.modules[__name__] = torch_opencl
