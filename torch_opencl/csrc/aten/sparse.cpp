// Sparse layouts, refused: the opencl device holds dense (strided) tensors only. Every
// operator reaching the device's sparse dispatch keys (a COO tensor made or copied onto the
// device; any operator on a CSR/CSC/BSR/BSC tensor whose parts are device tensors, which torch
// builds without asking the device) and every conversion of a device tensor to a sparse layout
// raises a NotImplementedError that says so and what to do, where torch's dispatcher would
// name a 'Sparseopencl' backend that has no kernel.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <string>

#include "../check.h"

namespace oclf::device {

namespace {

void refuse_sparse(const c10::OperatorHandle& op, torch::jit::Stack*) {
  const c10::OperatorName& id = op.schema().operator_name();
  const std::string name = id.overload_name.empty() ? id.name : id.name + "." + id.overload_name;
  DEVICE_CHECK_NOT_IMPLEMENTED(false, "opencl: ", name, ": the opencl device holds dense (strided) tensors only; "
                               "sparse layouts (sparse_coo, sparse_csr, sparse_csc, sparse_bsr, sparse_bsc) stay "
                               "on the CPU: keep the sparse tensor there (or make it dense there, tensor.to_dense(), and move that)");
}

}  // namespace

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_sparse>());
}

TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_sparse>());
}

// Conversions of a dense device tensor (which would otherwise run on the CPU fallback and
// fail only when the sparse result came back).
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* name : {"_to_sparse", "_to_sparse.sparse_dim", "_to_sparse_csr", "_to_sparse_csc",
                           "_to_sparse_bsr", "_to_sparse_bsc"})
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&refuse_sparse>());
}

}  // namespace oclf::device
