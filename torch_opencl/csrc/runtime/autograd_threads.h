#pragma once

namespace oclf::device {

// Makes sure torch's autograd engine has a device queue (and worker thread) for every opencl device,
// also when the process ran a backward pass before the device registered.
void ensure_autograd_threads();

// At the interpreter's exit, with the GIL released: each opencl device's autograd worker done
// with the backward passes it ran (see autograd_threads.cpp).
void settle_autograd_threads();

}  // namespace oclf::device
