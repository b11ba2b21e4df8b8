// index_copy (out[..., index[i], ...] = source[..., i, ...] along one dimension) on the
// opencl device: how transformers' StaticCache writes each new token's keys and values
// into its fixed-size cache, so a decoding step stays on the device (and can be recorded
// as a graph). A scatter along the dimension with the index broadcast over the others.
#include <ATen/native/CPUFallback.h>
#include <ATen/WrapDimUtils.h>
#include <torch/library.h>

#include "common.h"
#include "dispatch.h"
#include "fallback.h"

namespace oclf::device {

namespace {

at::Tensor& index_copy_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                           at::Tensor& out) {
  const int64_t d = at::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  DEVICE_CHECK(index.dim() <= 1, "opencl: index_copy: index must be a vector or a number, got ", index.sizes());
  DEVICE_CHECK(index.scalar_type() == at::kLong, "opencl: index_copy: index must be int64, got ", index.scalar_type());
  DEVICE_CHECK(source.scalar_type() == self.scalar_type(), "opencl: index_copy: source (", source.scalar_type(),
              ") and self (", self.scalar_type(), ") must have one dtype");
  DEVICE_CHECK(source.dim() == self.dim() || (self.dim() <= 1 && source.dim() <= 1),
              "opencl: index_copy: source ", source.sizes(), " and self ", self.sizes(), " differ in rank");
  if (self.dim() > 0) {
    for (int64_t k = 0; k < self.dim(); ++k) {
      const int64_t want = k == d ? index.numel() : self.size(k);
      DEVICE_CHECK(source.size(k) == want, "opencl: index_copy: source ", source.sizes(), " must be ", self.sizes(),
                  " with ", index.numel(), " along dimension ", d);
    }
  }
  if (!out.is_same(self)) {
    at::native::resize_output(out, self.sizes());
    out.copy_(self);
  }
  if (index.numel() == 0) return out;
  if (self.dim() == 0) {  // one element: a number indexed by 0
    return at::native::call_fallback_fn<&fallback_boxed, at::_ops::index_copy_out>::call(self, dim, index, source,
                                                                                       out);
  }
  std::vector<int64_t> view(self.dim(), 1);
  view[d] = index.numel();
  const at::Tensor idx = index.reshape({-1}).view(view).expand(source.sizes());
  out.scatter_(d, idx, source);
  return out;
}

}  // namespace

REGISTER_DEVICE_OPS(m) { m.impl("index_copy.out", index_copy_out); }

}  // namespace oclf::device
