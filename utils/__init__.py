"""Torch-side glue for opencl_functions: autograd-aware ops (functional), the
nn.Conv2d forward mimic (conv2d_forward), reversible layer patching (patching), the one
table of settings (config) and the one definition of a correct result (testing)."""
