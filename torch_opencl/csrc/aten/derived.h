// Tensors derived from a device tensor (a weight packed, transposed or transformed for a
// kernel), kept with it while its storage lives and is unchanged.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <string>

namespace oclf::device {

// A tensor derived from `source` (a weight packed for conv2d_cpu, transposed for
// gemm_rows): made by make() once and kept while source's storage lives, its version is
// unchanged and no operator wrote its storage (through a view or .data, say), under `layout` (what it was made for; the source's address is added, so
// views of one storage keep their own). Inference derives each weight once.
at::Tensor derived_from(const at::Tensor& source, const std::string& layout,
                        const std::function<at::Tensor()>& make);

// Whether anything is kept derived from the storage holding `address`.
bool has_derived(const void* address);

// A float32 copy of a 16-bit device tensor, for kernels that compute in float32 only.
// Parameters (leaves that require grad) keep theirs while their version is unchanged, so
// inference converts each weight once.
at::Tensor float32_copy(const at::Tensor& t);

}  // namespace oclf::device
