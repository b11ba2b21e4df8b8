// The opencl device's functions of the process's devices, as OpenReg's OpenRegFunctions are.
// The devices themselves are the runtime's (runtime/device.hpp: one Device, context and
// in-order queue per index, in the Runtime that the library shares); here is what torch's
// device asks of them: how many there are, whether one opens, what the calling thread's
// current one computes, the kernels it builds there (the device's files and the library's,
// through the runtime's program cache), refusing a forked child, and the process's end.
// What the device enqueues on each queue is its Stream's (stream.h).
#pragma once

#include <string>

#include "opencl_functions/runtime/runtime.hpp"

namespace oclf::device {

// How many devices the process has; 0 when no OpenCL device can be found. Never throws.
int device_count();
// Whether the calling thread's current device can be opened; never throws.
bool device_available();

// Of the calling thread's current device: whether it is a CPU device, and whether it computes
// in double precision (it reports cl_khr_fp64).
bool is_cpu();
bool has_fp64();

// A kernel of a device file on the calling thread's current device, e.g.
// device_kernel("elementwise.cl", "ew_contig", "-DOP_add ..."): built once per (file, options)
// by the runtime's program cache from kernels_dir() and kept for the process, with
// -I kernels_dir() (for dtypes.h) and -DHAS_FP64 on fp64 devices added. Throws BuildError
// with the build log.
cl_kernel device_kernel(const std::string& file, const std::string& name, const std::string& options);
// A kernel of one of the student-facing files next to the library (conv2d.cl,
// conv2d_backward.cl), read from OCLF_KERNEL_DIR when set, else the library's folder.
cl_kernel library_kernel(const std::string& file, const std::string& name, const std::string& options);
// The hash of a library kernel file's text, as the library's tuning cache keys it (once per path).
std::string library_source_hash(const std::string& file);
// Whether library_kernel(file, name, options) builds on the current device, learned once (a
// capability probe: the reference's tensor-core build, whose inline PTX only NVIDIA's
// compiler takes).
bool library_kernel_builds(const std::string& file, const std::string& name, const std::string& options);
// Folder of the device's .cl files, and of the library's (the opencl_functions package beside it).
std::string kernels_dir();
std::string library_dir();

// A child process forked after a device opened has the parent's OpenCL state but not the
// driver's threads (nor the submission threads): a call into it could wait for ever. The
// device's entry points (allocation, launches, reads, writes, waits) call this, which throws
// in such a child, as CUDA refuses a forked child.
void refuse_in_forked_child();
bool in_forked_child();
// Called once a device opens: from then on a forked child is refused.
void watch_forks();
// At the interpreter's exit, before it frees the tensors (a Python exit handler, _C's
// finish_at_exit): every open device's waiting commands enqueued and its queue finished, so
// no command runs while buffers are freed or the driver is torn down under it.
void finish_at_exit();

}  // namespace oclf::device
