"""Torch-side glue for opencl_functions: autograd-aware ops (functional), the
nn.Conv2d forward mimic (conv2d_forward) and reversible layer patching (patching)."""
