// Launcher: where one operation's kernels run, as the shared launch functions see it. The
// kernels that the library's host code and the opencl device both launch (the gradients in
// gradients.hpp, and the staff's own) are launched by one set of functions that take a
// Launcher, cl_mem operands, a Conv2dGeometry and a configuration. Two implementations
// adapt it:
//   RuntimeLauncher (runtime_launcher.hpp)  the course runtime: its programs, its profiling
//                                          queue, its buffer pool, resident parameters;
//   the opencl device's DeviceLauncher      its own queue, caching allocator and tensors
//                                          derived from weights.
// Arguments are set with the course runtime's set_args (runtime/programs.hpp), the one way
// to set them: set_args(launcher.kernel(...), a, b, c); launcher.launch(...).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <utility>

#include "../runtime/runtime.hpp"
#include "geometry.hpp"

namespace oclf {

// Device memory for one operation's intermediate results (partial sums, say),
// given back when the last copy of the handle goes. Its work is queued before that, on the
// launcher's in-order queue, so the memory may be reused by later work at once.
class Scratch {
 public:
  Scratch() = default;
  Scratch(cl_mem mem, std::shared_ptr<void> owner) : mem_(mem), owner_(std::move(owner)) {}
  cl_mem get() const { return mem_; }

 private:
  cl_mem mem_ = nullptr;
  std::shared_ptr<void> owner_;
};

class Launcher {
 public:
  virtual ~Launcher() = default;

  virtual const DeviceInfo& info() const = 0;
  virtual cl_device_id device() const = 0;
  // The kernel `name` of the .cl file `file`, a path relative to the kernel folder
  // ("conv2d_backward.cl"; OCLF_KERNEL_DIR replaces the folder, subfolders included).
  virtual cl_kernel kernel(const std::string& file, const std::string& name, const std::string& options) = 0;
  // The hash of a kernel file's text, which keys the tuning cache's entries.
  virtual std::string source_hash(const std::string& file) = 0;
  // Enqueues an NDRange (`local` may be null; an empty range enqueues nothing).
  virtual void launch(cl_kernel kernel, cl_uint dims, const size_t* global, const size_t* local) = 0;
  virtual Scratch scratch(size_t bytes) = 0;
  // A buffer derived from the operation's weight (packed, transformed, transposed) under
  // `tag`: made by fill(buffer) on first use and kept with the weight where the caller keeps
  // derived buffers (a resident parameter, a device tensor), else made for this call and
  // held in *scratch.
  virtual cl_mem derived(const std::string& tag, size_t bytes, const std::function<void(cl_mem)>& fill,
                         Scratch* scratch) = 0;
  // Tuning's trial runs: after each, work the runtime's profiler does not see (the opencl
  // device's own queue) is waited for, so that the wall clock times it.
  virtual void trial_done() {}
  virtual Tuning& tuning() = 0;
  // Whether kernel(file, name, options) builds on this device: a capability probe (inline
  // PTX, say). Launchers that keep state per device remember the answer; this one asks again.
  virtual bool builds(const std::string& file, const std::string& name, const std::string& options) {
    try {
      kernel(file, name, options);
      return true;
    } catch (const Error&) {
      return false;
    }
  }
};

// What a convolution does to each output before storing it (reference/epilogue.h): add a
// residual laid out as y, then apply an activation. The opencl device's fused convolutions
// (torch.ops.oclf.conv2d_fused) set it, and its products take the activation
// (torch.ops.oclf.addmm_act); everything else stores the plain sums.
enum class Activation : int {
  kNone = 0, kRelu = 1, kRelu6 = 2, kSilu = 3, kGelu = 4, kHardswish = 5, kGeluTanh = 6, kSigmoid = 7, kTanh = 8
};

// The build option of a kernel that applies `act` as it stores ("" for none).
inline std::string activation_option(Activation act) {
  return act == Activation::kNone ? "" : " -DEPI_ACT=" + std::to_string(int(act));
}

struct Epilogue {
  cl_mem residual = nullptr;
  Activation act = Activation::kNone;

  bool empty() const { return residual == nullptr && act == Activation::kNone; }
  // The build options of a kernel that applies it ("" when empty).
  std::string options() const {
    if (empty()) return "";
    return (residual ? " -DEPI_RES" : "") + std::string(" -DEPI_ACT=") + std::to_string(int(act));
  }
};

// A kernel built with an epilogue's options takes its residual as its last argument:
// set_args(kernel, ..., epilogue) sets it, or nothing when there is none.
inline void set_arg_at(cl_kernel kernel, cl_uint* index, const Epilogue& e) {
  if (e.residual) set_arg(kernel, (*index)++, sizeof(cl_mem), &e.residual);
}

// A convolution's buffers: x, w and y as Conv2dGeometry describes them, bias (c_out) or
// nullptr; and what to do to y's values before they are stored.
struct ConvOperands {
  cl_mem x, w, bias, y;
  Epilogue epilogue{};
  // The element type of x, w, bias and y: "float", or "half" / "bfloat" (16-bit values,
  // computed in float) for the kernels that take them.
  std::string io = "float";

  bool is_float() const { return io == "float"; }
  // The build options of a kernel reading and writing io ("" for float).
  std::string io_options() const {
    if (io == "half") return " -DIO_HALF";
    if (io == "bfloat") return " -DIO_BFLOAT";
    return "";
  }
};

// set_args with a convolution's geometry in the middle, as the kernels take it: `head`'s
// values, then the 14 ints batch, c_in, h, w, c_out, k_h, k_w, stride_h, stride_w,
// dilation_h, dilation_w, groups, h_out, w_out, then `tail`'s. Flags are ints, not bools.
template <typename... Head, typename... Tail>
void set_conv_args(cl_kernel kernel, const std::tuple<Head...>& head, const Conv2dGeometry& g,
                   const Tail&... tail) {
  std::apply(
      [&](const Head&... h) {
        set_args(kernel, h..., g.batch, g.c_in, g.h, g.w, g.c_out, g.k_h, g.k_w, g.stride_h, g.stride_w,
                 g.dilation_h, g.dilation_w, g.groups, g.h_out, g.w_out, tail...);
      },
      head);
}

}  // namespace oclf
