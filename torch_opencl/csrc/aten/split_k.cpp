// Products over a long K as sums of short partial products (split_k.h).
#include "split_k.h"

#include <clblast.h>

#include <algorithm>
#include <vector>

#include "dispatch.h"
#include "tensors.h"

namespace oclf::device {

namespace {
// The partial products' scratch is kept under this many bytes by fewer, longer parts
// (never fewer than two).
constexpr size_t kScratchBytes = size_t(256) << 20;
}  // namespace

bool split_k_product(const GemmOperand& a, const GemmOperand& b, const at::Tensor& c, size_t batch, size_t m,
                     size_t n, size_t k, float alpha, float beta) {
  if (m < 2 || k <= kSumK || batch == 0 || n == 0) return false;
  size_t parts = (k + kSumK - 1) / kSumK;
  parts = std::min(parts, std::max<size_t>(2, kScratchBytes / (batch * m * n * sizeof(float))));
  const size_t kc = (k + parts - 1) / parts;  // k per part; the last part may be shorter
  parts = (k + kc - 1) / kc;
  const size_t full = k / kc, rest = k - full * kc;
  // Where part j of op(a) and op(b) begins: columns j·kc of op(a), rows j·kc of op(b).
  const size_t a_step = a.trans ? kc * a.ld : kc, b_step = b.trans ? kc : kc * b.ld;

  const at::Tensor partial = empty_device({int64_t(batch), int64_t(parts), int64_t(m), int64_t(n)}, at::kFloat);
  const DeviceSpan sa = span(a.t), sb = span(b.t), sp = span(partial);
  // Every (matrix, part) of one length of k as one CLBlast batch: offsets per entry.
  auto run = [&](size_t first, size_t count, size_t kk) {
    std::vector<size_t> oa, ob, op;
    for (size_t i = 0; i < batch; ++i)
      for (size_t j = first; j < first + count; ++j) {
        oa.push_back(sa.offset + i * a.stride + j * a_step);
        ob.push_back(sb.offset + i * b.stride + j * b_step);
        op.push_back(sp.offset + (i * parts + j) * m * n);
      }
    const std::vector<float> ones(oa.size(), 1.0f), zeros(oa.size(), 0.0f);
    const clblast::Transpose ta = a.trans ? clblast::Transpose::kYes : clblast::Transpose::kNo;
    const clblast::Transpose tb = b.trans ? clblast::Transpose::kYes : clblast::Transpose::kNo;
    const size_t lda = a.ld, ldb = b.ld;
    Stream& stream = Stream::get();
    std::lock_guard<std::recursive_mutex> lock(stream.mutex());
    stream.run_enqueuing([=, &stream] {
      CLBLAST_CHECK(clblast::GemmBatched(clblast::Layout::kRowMajor, ta, tb, m, n, kk, ones.data(), sa.mem, oa.data(),
                                         lda, sb.mem, ob.data(), ldb, zeros.data(), sp.mem, op.data(), n, oa.size(),
                                         stream.queue_ptr(), nullptr));
    });
  };
  run(0, full, kc);
  if (rest) run(full, 1, rest);

  const at::Tensor total = partial.sum(1);  // the device's sums add runs too (kernels/reduce.cl)
  const at::Tensor out = c.view({int64_t(batch), int64_t(m), int64_t(n)});
  if (beta == 0.0f) {
    out.copy_(total);  // c's old values (NaN included) are not read
    if (alpha != 1.0f) out.mul_(alpha);
  } else {
    if (beta != 1.0f) out.mul_(beta);
    out.add_(total, alpha);
  }
  return true;
}

}  // namespace oclf::device
