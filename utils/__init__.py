"""The patched layers: nn.Conv2d's forward on OpenCL (conv2d_forward, the file the assignment
names), the autograd-aware ops it and nn.Linear's replacement call (functional), and the
reversible patching of torch's layers (patching.opencl_layers)."""
