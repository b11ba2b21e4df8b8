// Kernels generated at run time: torch.compile's OpenCL code generator
// (torch_opencl/compile/) writes each fused kernel's OpenCL C to a file named by
// the hash of its text, and these two operators build and launch it:
//
//   torch.ops.oclf.generated_kernel(path, name) -> int
//       builds the kernel `name` of the file at `path` for the calling thread's current
//       device through the runtime's program cache (once per path, name and device) and
//       returns a handle for launches.
//   torch.ops.oclf.generated_launch(handle, tensors, scalars, global_size, local_size, written)
//       sets the kernel's arguments in order: each tensor as two arguments (its buffer,
//       then its first element's offset in elements, as every kernel of the device takes
//       tensors), then each scalar as a 64-bit integer, then, for a kernel that checks
//       indices read through tensors (two parameters more: compile/kernel.py's
//       check_bounds), the device's index record and the kernel's code in it; and enqueues
//       it over global_size (1 to 3 dimensions) in work-groups of local_size (empty: the
//       driver picks). The storages of the tensors `written` indexes count a write, as an
//       operator's outputs do (dispatch.cpp): buffers derived from the old values (a
//       convolution's packed weights, derived.h) are made again. A version counter alone
//       does not tell: Inductor reuses a freed buffer under a new tensor whose counter
//       starts again, and a folded weight written there found the packing of the weight
//       written there before (compiled ResNet-50's bottleneck at 64×64: off by 150 %).
//
// Launches go through the device's queue like every other kernel, so a graph recording
// (graph.h) keeps them, and replaying it issues them with no Python or dispatcher.
//
// A replayed compiled graph (compile/replay.py) returns its outputs in the memory the
// recording owns; two more operators keep what the caller holds apart from that memory:
//
//   torch.ops.oclf.storage_alias(t) -> Tensor
//       t's elements (same sizes, strides and offset) under a storage of their own that
//       does not own the memory: the caller's handle on a recorded output.
//   torch.ops.oclf.storage_relocate(t)
//       moves t's storage to memory of its own (a copy on the device's queue), for every
//       tensor and view sharing that storage: done to outputs a caller still holds before
//       the next replay writes the recorded memory again.
//
// and one more lets a recording follow an input to a new storage (graph_rebind):
//
//   torch.ops.oclf.storage_locations(tensors) -> int[]
//       for each tensor, its storage's buffer, its first element's byte offset there and
//       whether buffers derived from it are kept (see below).
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "derived.h"
#include "kernel_launch.h"
#include "tensors.h"

namespace oclf::device {

namespace {

struct Built {
  int device = 0;
  cl_kernel kernel = nullptr;
  std::string name;
  cl_uint num_args = 0;  // two more than the launch sets: the kernel checks indices (check_bounds)
  int64_t code = 0;      // the kernel's name in the device's index record
};

std::mutex registry_mutex;
std::vector<Built>& registry() {
  static std::vector<Built> built;  // never shrinks: handles stay valid for the process
  return built;
}

int64_t generated_kernel(const std::string& path, const std::string& name) {
  DEVICE_CHECK_VALUE(!path.empty() && !name.empty(), "opencl: generated_kernel: a path and a kernel name are needed");
  Stream& stream = Stream::get();
  // kernels/compiled.h and dtypes.h come from the device's kernel folder.
  const std::string options = "-I" + kernels_dir() + (has_fp64() ? " -DHAS_FP64" : "");
  cl_kernel kernel = nullptr;
  {
    std::lock_guard<std::recursive_mutex> lock(stream.mutex());
    kernel = stream.runtime().programs().kernel_fixed(path, name, options);
  }
  std::lock_guard<std::mutex> lock(registry_mutex);
  std::vector<Built>& built = registry();
  for (size_t i = 0; i < built.size(); ++i) {
    if (built[i].kernel == kernel && built[i].device == stream.index()) return static_cast<int64_t>(i);
  }
  cl_uint num_args = 0;
  CL_CHECK(clGetKernelInfo(kernel, CL_KERNEL_NUM_ARGS, sizeof num_args, &num_args, nullptr));
  built.push_back(Built{stream.index(), kernel, name, num_args,
                        Stream::index_op_code(("compiled kernel " + name).c_str(), "index")});
  return static_cast<int64_t>(built.size() - 1);
}

void generated_launch(int64_t handle, at::TensorList tensors, at::IntArrayRef scalars, at::IntArrayRef global_size,
                      at::IntArrayRef local_size, at::IntArrayRef written) {
  Built target;
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    DEVICE_CHECK_VALUE(handle >= 0 && handle < static_cast<int64_t>(registry().size()),
                       "opencl: generated_launch: no generated kernel has handle ", handle);
    target = registry()[handle];
  }
  const cl_uint dims = static_cast<cl_uint>(global_size.size());
  DEVICE_CHECK_VALUE(dims >= 1 && dims <= 3, "opencl: generated_launch: ", target.name, ": global_size has ", dims,
                     " dimensions, expected 1 to 3");
  DEVICE_CHECK_VALUE(local_size.empty() || local_size.size() == global_size.size(), "opencl: generated_launch: ",
                     target.name, ": local_size ", local_size, " does not match global_size ", global_size);
  size_t global[3] = {1, 1, 1}, local[3] = {1, 1, 1};
  for (cl_uint d = 0; d < dims; ++d) {
    DEVICE_CHECK_VALUE(global_size[d] >= 0, "opencl: generated_launch: ", target.name, ": negative global size ",
                       global_size);
    global[d] = static_cast<size_t>(global_size[d]);
    if (global[d] == 0) return;  // an empty tensor: nothing to compute
    if (!local_size.empty()) {
      DEVICE_CHECK_VALUE(local_size[d] > 0 && global_size[d] % local_size[d] == 0, "opencl: generated_launch: ",
                         target.name, ": global size ", global_size, " is not a multiple of local size ", local_size);
      local[d] = static_cast<size_t>(local_size[d]);
    }
  }
  std::vector<TensorArg> args;
  args.reserve(tensors.size());
  for (const at::Tensor& t : tensors) args.push_back(arg(t));  // checks each is a device tensor
  Stream& stream = Stream::get();
  DEVICE_CHECK(stream.index() == target.device, "opencl: generated_launch: ", target.name, " was built for opencl:",
               target.device, ", the current device is opencl:", stream.index());
  std::lock_guard<std::recursive_mutex> lock(stream.mutex());
  cl_uint index = 0;
  for (const TensorArg& a : args) set_arg_at(target.kernel, &index, a);
  for (int64_t value : scalars) {
    const cl_long v = value;
    set_arg(target.kernel, index++, sizeof(v), &v);
  }
  if (index + 2 == target.num_args) {  // indices read through tensors are checked: the record
    cl_mem record = stream.index_record();
    const cl_long code = target.code;
    set_arg(target.kernel, index++, sizeof(record), &record);
    set_arg(target.kernel, index++, sizeof(code), &code);
  }
  stream.launch(target.kernel, dims, global, local_size.empty() ? nullptr : local);
  for (int64_t i : written) {
    DEVICE_CHECK_VALUE(i >= 0 && i < static_cast<int64_t>(tensors.size()), "opencl: generated_launch: ", target.name,
                       ": written index ", i, " of ", tensors.size(), " tensors");
    Allocator::get().note_write(tensors[i].storage().data());
  }
}

at::Tensor storage_alias(const at::Tensor& t) {
  DEVICE_CHECK(is_device(t), "opencl: storage_alias: expected an opencl tensor, got one on ", t.device());
  const c10::Storage& storage = t.storage();
  void* data = storage.mutable_data();
  c10::DataPtr borrowed(data, data, [](void*) {}, storage.device());  // the recording keeps the memory
  c10::Storage alias(c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), storage.nbytes(),
                                                           std::move(borrowed), nullptr, /*resizable=*/false));
  return at::empty({0}, t.options()).set_(alias, t.storage_offset(), t.sizes(), t.strides());
}

void storage_relocate(const at::Tensor& t) {
  DEVICE_CHECK(is_device(t), "opencl: storage_relocate: expected an opencl tensor, got one on ", t.device());
  c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  const size_t bytes = storage->nbytes();
  if (bytes == 0 || storage->data() == nullptr) return;
  c10::DeviceGuard guard(t.device());
  c10::Allocator* allocator = c10::GetAllocator(kType);
  c10::DataPtr fresh = allocator->allocate(bytes);
  const Location from = Allocator::get().locate(storage->data());
  const Location to = Allocator::get().locate(fresh.get());
  Stream::get().copy(from.mem, to.mem, from.offset, to.offset, bytes);
  storage->set_data_ptr_noswap(std::move(fresh));
  storage->set_allocator(allocator);
}

// Where each tensor's elements lie, three numbers a tensor: its storage's buffer (the
// handle), the byte offset of its first element in that buffer, and 1 when the device keeps
// buffers derived from the storage (a packed or transposed weight), else 0.
std::vector<int64_t> storage_locations(const std::vector<at::Tensor>& tensors) {
  std::vector<int64_t> out;
  out.reserve(3 * tensors.size());
  for (const at::Tensor& t : tensors) {
    DEVICE_CHECK(is_device(t), "opencl: storage_locations: expected opencl tensors, got one on ", t.device());
    const Location at = Allocator::get().locate(t.data_ptr());
    out.push_back(int64_t(reinterpret_cast<uintptr_t>(at.mem)));
    out.push_back(int64_t(at.offset));
    out.push_back(has_derived(t.data_ptr()) ? 1 : 0);
  }
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(oclf, m) {
  m.def("generated_kernel(str path, str name) -> int", &generated_kernel);
  m.def("generated_launch(int handle, Tensor[] tensors, int[] scalars, int[] global_size, int[] local_size, "
        "int[] written=[]) -> ()");
  m.def("storage_alias(Tensor t) -> Tensor");
  m.def("storage_relocate(Tensor t) -> ()");
  m.def("storage_locations(Tensor[] tensors) -> int[]");
}

TORCH_LIBRARY_IMPL(oclf, PrivateUse1, m) {
  m.impl("generated_launch", &generated_launch);
  m.impl("storage_alias", &storage_alias);
  m.impl("storage_relocate", &storage_relocate);
  m.impl("storage_locations", &storage_locations);
}

}  // namespace oclf::device
