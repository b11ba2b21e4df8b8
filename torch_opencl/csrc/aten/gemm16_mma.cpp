// 16-bit products on NVIDIA tensor cores (kernels/gemm16_mma.cl): whether the device takes
// them (NVIDIA's compute capability query, a probe build of the inline PTX), the operands'
// layouts (a copy for one the kernel does not read), the block per shape (tuned at first use,
// as the reference's products are: reference/tuning.hpp) and the launch.
#include "gemm16_mma.h"

#include <cstdio>
#include <map>
#include <mutex>
#include <vector>

#include "opencl_functions/reference/tuning.hpp"
#include "opencl_functions/runtime/settings.hpp"
#include "device_launcher.h"
#include "kernel_launch.h"
#include "plans.h"
#include "tensors.h"

namespace oclf::device {

namespace {

constexpr const char* kFile = "gemm16_mma.cl";

// CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV and _MINOR_NV (cl_nv_device_attribute_query).
constexpr cl_device_info kCapabilityMajor = 0x4000, kCapabilityMinor = 0x4001;

enum class Mode { off, hardware, emulated };

// OCLF_MMA: 0 off, emulate the kernel's warp instructions in plain OpenCL C (any device),
// else (auto) tensor cores where the device has them.
Mode mode() {
  const std::string value = setting("MMA");
  DEVICE_CHECK(value.empty() || value == "auto" || value == "0" || value == "emulate", "opencl: ",
               setting_variable("MMA"), " must be auto, 0 or emulate, got \"", value, "\"");
  return value == "0" ? Mode::off : value == "emulate" ? Mode::emulated : Mode::hardware;
}

// The device's NVIDIA compute capability as major·10 + minor; 0 where it reports none.
int compute_capability(const Runtime& rt) {
  if (rt.info().platform.find("NVIDIA") == std::string::npos) return 0;
  cl_uint major = 0, minor = 0;
  if (clGetDeviceInfo(rt.device(), kCapabilityMajor, sizeof(major), &major, nullptr) != CL_SUCCESS ||
      clGetDeviceInfo(rt.device(), kCapabilityMinor, sizeof(minor), &minor, nullptr) != CL_SUCCESS)
    return 0;
  return int(major * 10 + minor);
}

// A block of gemm16_mma.cl: BM × BN outputs per work-group of WM × WN warps, STAGES slices of BK
// values of k in local memory, k split SK ways (split-K: SK work-groups per block, their
// partial sums added by gemm16_mma_sum). Its text is the plan's configuration:
// "mma BM=128 BN=128 BK=32 WM=2 WN=2 S=3 SK=1".
struct Tile {
  int bm = 128, bn = 128, wm = 2, wn = 2, stages = 3, bk = 32, splits = 1;
  int threads() const { return 32 * wm * wn; }
  size_t stage_bytes() const { return size_t(bm + bn) * bk * 2; }
  std::string text() const {
    char out[128];
    std::snprintf(out, sizeof(out), "mma BM=%d BN=%d BK=%d WM=%d WN=%d S=%d SK=%d", bm, bn, bk, wm, wn, stages,
                  splits);
    return out;
  }
  static Tile of(const std::string& config) {
    using reference::config_value;
    return {config_value(config, "BM", 128), config_value(config, "BN", 128), config_value(config, "WM", 2),
            config_value(config, "WN", 2),   config_value(config, "S", 3),    config_value(config, "BK", 32),
            config_value(config, "SK", 1)};
  }
  bool fits(const DeviceInfo& info) const {
    auto power_of_two = [](int v) { return v > 0 && (v & (v - 1)) == 0; };
    return power_of_two(bm) && power_of_two(bn) && power_of_two(wm) && power_of_two(wn) && bm % (16 * wm) == 0 &&
           bn % (16 * wn) == 0 && (bk == 16 || bk == 32 || bk == 64) && stages >= 2 && stages <= 5 && splits >= 1 &&
           splits <= 64 && size_t(threads()) <= info.max_work_group_size &&
           stages * stage_bytes() <= info.local_mem_size;
  }
};

// The blocks tried (BM, BN, WM, WN, BK), in order of preference. On the H200 (NVIDIA's 48 KB
// of local memory per work-group, 248 registers a work-item for 64×64 outputs per warp), the
// 4096³ float16 product ran at 339 TFLOP/s on 4 warps of 64×64 outputs over 128×128 with 3
// slices of 32 in flight, 313 on 8 warps, 270-290 on 128×256 and 256×128 blocks of 8 warps (2
// slices of 32 in flight) and 270-300 on smaller blocks; slices of 16 (4 in flight) ran the
// large blocks at 218-222 and 128×128 at 290, so they come last (sweeps only). Smaller blocks
// serve products that would leave compute units idle, blocks of 16 or 32 rows products of
// few rows (a batch of tokens).
constexpr int kTiles[][5] = {{128, 128, 2, 2, 32}, {128, 128, 2, 4, 32}, {128, 256, 2, 4, 32}, {256, 128, 4, 2, 32},
                             {128, 64, 2, 2, 32},  {64, 128, 2, 2, 32},  {64, 64, 2, 2, 32},   {32, 128, 1, 4, 32},
                             {32, 64, 1, 2, 32},   {16, 128, 1, 4, 32},  {16, 64, 1, 2, 32},   {256, 128, 4, 2, 16},
                             {128, 256, 2, 4, 16}, {128, 128, 2, 2, 16}};

// The candidates for an m × n × k product over `batch` matrices, the default first: blocks no
// taller than m (rounded up to a power of two), each with as many slices in flight as fit (up
// to 4); the default is the first that makes a work-group for every compute unit, else the
// one that makes the most. Where that makes fewer than two work-groups per compute unit, k
// is split until it does (each split at least 8 slices long), the block unsplit and split
// half as much next (on the H200, 16 rows of float16 over 64 columns: 16×4096×11008 in 36.9 µs
// split 2 ways, 41.0 unsplit; 16×11008×4096 in 33.3 µs split 8 ways, 38.0 4 ways, 88.8
// unsplit). `full`: all of them (a sweep), else the default and three more.
std::vector<std::string> candidates(const DeviceInfo& info, int64_t m, int64_t n, int64_t k, int64_t batch,
                                    bool full) {
  int64_t rows = 16;
  while (rows < m && rows < 256) rows *= 2;
  std::vector<Tile> tiles;
  for (const auto& [bm, bn, wm, wn, bk] : kTiles) {
    Tile t{bm, bn, wm, wn, 2, bk};
    while (t.stages < 4 && (t.stages + 1) * t.stage_bytes() <= info.local_mem_size) ++t.stages;
    if (bm <= rows && t.fits(info)) tiles.push_back(t);
  }
  if (tiles.empty()) return {};
  const int64_t units = std::max<int64_t>(info.compute_units, 1);
  auto blocks = [&](const Tile& t) { return (m + t.bm - 1) / t.bm * ((n + t.bn - 1) / t.bn) * batch; };
  size_t pick = 0;
  while (pick < tiles.size() && blocks(tiles[pick]) < units) ++pick;
  if (pick == tiles.size()) {
    pick = 0;
    for (size_t i = 1; i < tiles.size(); ++i)
      if (blocks(tiles[i]) > blocks(tiles[pick])) pick = i;
  }
  std::vector<Tile> first;
  if (blocks(tiles[pick]) < 2 * units) {
    Tile split = tiles[pick];
    split.splits = int(std::min<int64_t>({(2 * units + blocks(split) - 1) / blocks(split), k / (8 * split.bk), 16}));
    if (split.splits > 1 && batch * split.splits <= 65535) {
      first.push_back(split);
      first.push_back(tiles[pick]);
      if (split.splits >= 4) split.splits /= 2, first.push_back(split);
    }
  }
  if (first.empty()) first.push_back(tiles[pick]);
  std::vector<std::string> out;
  for (const Tile& t : first) out.push_back(t.text());
  for (size_t i = 0; i < tiles.size() && (full || out.size() < 4); ++i)
    if (i != pick) out.push_back(tiles[i].text());
  return out;
}

// OCLF_MMA_TILE="BM,BN,WM,WN,STAGES[,BK,SPLITS]" as a configuration, "" when unset.
std::string forced_tile(const DeviceInfo& info) {
  const std::string env = setting("MMA_TILE");
  if (env.empty()) return "";
  Tile t;
  int used = 0;
  const int read = std::sscanf(env.c_str(), "%d,%d,%d,%d,%d%n,%d,%d%n", &t.bm, &t.bn, &t.wm, &t.wn, &t.stages, &used,
                               &t.bk, &t.splits, &used);
  DEVICE_CHECK((read == 5 || read == 7) && size_t(used) == env.size() && t.fits(info), "opencl: ",
               setting_variable("MMA_TILE"), " must be BM,BN,WM,WN,STAGES or BM,BN,WM,WN,STAGES,BK,SPLITS: powers ",
               "of two, BM a multiple of 16·WM, BN of 16·WN, BK 16, 32 or 64, 2 to 5 stages that fit the device's ",
               "local memory, 1 to 64 splits of k, got \"", env, "\"");
  return t.text();
}

// An operand as gemm16_mma.cl reads it: the tensor (or a copy with rows 16-byte aligned),
// whether its k is the contiguous dimension (A_KC, B_KC), its row, column and batch strides.
struct Operand {
  at::Tensor t;
  bool kc = false;
  int64_t rs = 0, cs = 0, bs = 0;
};

// t's last two dimensions are rows × cols: m × k for A (k_along_rows false), k × n for B.
// Read in place where one of them is contiguous and the other's stride, the offset and the
// batch stride are multiples of 8 elements; else copied with contiguous rows padded to 8.
Operand operand(const at::Tensor& t, bool k_along_rows) {
  const bool batched = t.dim() == 3;
  auto aligned = [&](const at::Tensor& x, int64_t stride) {
    return stride % 8 == 0 && arg(x).offset % 8 == 0 && (!batched || x.stride(0) % 8 == 0);
  };
  const int64_t rs = t.stride(-2), cs = t.stride(-1), bs = batched ? t.stride(0) : 0;
  if (cs == 1 && aligned(t, rs)) return {t, !k_along_rows, rs, cs, bs};
  if (rs == 1 && aligned(t, cs)) return {t, k_along_rows, rs, cs, bs};
  std::vector<int64_t> shape = t.sizes().vec();
  const int64_t cols = shape.back();
  shape.back() = int64_t(round_up(size_t(cols), 8));
  const at::Tensor view = empty_device(shape, t.scalar_type()).narrow(-1, 0, cols);
  view.copy_(t);
  return {view, !k_along_rows, view.stride(-2), 1, batched ? view.stride(0) : 0};
}

// Whether this device runs gemm16_mma.cl on tensor cores: NVIDIA, compute capability 8.0 or
// later (cp.async, ldmatrix, mma.sync m16n8k16 in bfloat16), and its compiler builds the
// kernel; learned once per device. A build that fails is warned about with its log.
bool hardware_ready(Runtime& rt) {
  static std::map<int, bool> ready;  // by device index, under the device's lock (device_kernel() takes it too)
  std::lock_guard<std::recursive_mutex> lock(rt.mutex());
  auto it = ready.find(rt.index());
  if (it != ready.end()) return it->second;
  bool ok = compute_capability(rt) >= 80;
  if (ok) {
    try {
      device_kernel(kFile, "gemm16_mma", "-DT=bfloat -DT_IS_BFLOAT -DBM=64 -DBN=64 -DBK=32 -DWM=2 -DWN=2 -DSTAGES=2 -DA_KC");
    } catch (const Error& e) {
      TORCH_WARN("opencl: 16-bit products run without tensor cores: ", kFile, " does not build on ",
                 rt.info().device, ": ", e.what());
      ok = false;
    }
  }
  ready.emplace(rt.index(), ok);
  return ok;
}

// Launches the product on block `tile` (split-K: gemm16_mma's partial sums in a float scratch
// tensor, then gemm16_mma_sum).
void run_tile(const Tile& tile, const Operand& A, const Operand& B, const at::Tensor& c, const at::Tensor& row,
              float alpha, float beta, Activation act, bool emulated) {
  const int64_t batch = c.dim() == 3 ? c.size(0) : 1, m = c.size(-2), n = c.size(-1), k = A.t.size(-1);
  // k_chunk: a whole number of slices; splits: as many as k then needs.
  int64_t k_chunk = int64_t(round_up(size_t((k + tile.splits - 1) / tile.splits), size_t(tile.bk)));
  // (the split sum's NDRange has m rows and batch · splits work-group rows: at most 65535 each)
  const int64_t splits = m <= 65535 && batch * tile.splits <= 65535 ? (k + k_chunk - 1) / k_chunk : 1;
  if (splits == 1) k_chunk = k;
  const at::Tensor parts = splits > 1 ? empty_device({batch * splits, m, n}, at::kFloat) : at::Tensor();
  const TensorArg ta = arg(A.t), tb = arg(B.t), tc = arg(c), tr = row.defined() ? arg(row) : tc;
  const TensorArg tp = splits > 1 ? arg(parts) : tc;
  const int64_t c_bs = c.dim() == 3 ? c.stride(0) : 0;
  const bool pairs = c.stride(-2) % 2 == 0 && tc.offset % 2 == 0 && c_bs % 2 == 0;
  const bool bf16 = c.scalar_type() == at::kBFloat16;
  char blocks[128];
  std::snprintf(blocks, sizeof(blocks), " -DBM=%d -DBN=%d -DBK=%d -DWM=%d -DWN=%d -DSTAGES=%d", tile.bm, tile.bn,
                tile.bk, tile.wm, tile.wn, tile.stages);
  const std::string options = std::string("-DT=") + cl_storage_type(c.scalar_type()) + (bf16 ? " -DT_IS_BFLOAT" : "") +
                              blocks + (A.kc ? " -DA_KC" : "") + (B.kc ? " -DB_KC" : "") + (pairs ? " -DC_PAIRS" : "") +
                              (splits > 1 ? " -DSPLIT_K" : "") + (emulated ? " -DMMA_EMULATE" : "") +
                              activation_option(act);
  const size_t tiles = size_t((m + tile.bm - 1) / tile.bm) * size_t((n + tile.bn - 1) / tile.bn);
  const size_t global[2] = {tiles * size_t(tile.threads()), size_t(batch * splits)};
  const size_t local[2] = {size_t(tile.threads()), 1};
  const cl_int kc = cl_int(k_chunk), sk = cl_int(splits);
  auto run = [&](const char* name, const NDRange& range) {
    launch(device_kernel(kFile, name, options), range, ta, tb, tc, tr, cl_int(m), cl_int(n), cl_int(k),
           cl_int(A.rs), cl_int(A.cs), cl_long(A.bs), cl_int(B.rs), cl_int(B.cs), cl_long(B.bs), cl_int(c.stride(-2)),
           cl_long(c_bs), alpha, beta, cl_int(row.defined()), tp, sk, kc);
  };
  run("gemm16_mma", NDRange(2, global, local));
  if (splits > 1) {
    const size_t sum_global[3] = {round_up(size_t(n), 64), size_t(m), size_t(batch)}, sum_local[3] = {64, 1, 1};
    run("gemm16_mma_sum", NDRange(3, sum_global, sum_local));
  }
}

}  // namespace

TensorCores tensor_cores() {
  const Mode how = mode();
  if (how == Mode::emulated) return TensorCores::emulated;
  return how == Mode::hardware && hardware_ready(Runtime::get()) ? TensorCores::hardware : TensorCores::off;
}

bool gemm16_mma(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, float alpha, float beta,
                const at::Tensor& row, Activation act) {
  const TensorCores where = tensor_cores();
  if (where == TensorCores::off) return false;
  Runtime& rt = Runtime::get();
  const int64_t batch = c.dim() == 3 ? c.size(0) : 1, m = c.size(-2), n = c.size(-1), k = a.size(-1);
  if (k == 0 || batch > 65535) return false;  // (a batch is the NDRange's second dimension)
  const Operand A = operand(a, false), B = operand(b, true);
  if (arg(A.t).offset % 8 || arg(B.t).offset % 8) return false;  // a copy the allocator did not align

  const DeviceInfo& info = rt.info();
  const std::string forced = forced_tile(info);
  plans::Key key("gemm16_mma");
  key << m << n << k << batch << int64_t(A.kc) << int64_t(B.kc) << int64_t(c.scalar_type()) << setting("MMA")
      << forced;
  const plans::Plan plan = plans::remembered(key, [&] {
    if (!forced.empty()) return plans::Plan{forced, "setting"};
    const std::vector<std::string> quick = candidates(info, m, n, k, batch, false);
    const std::vector<std::string> full = candidates(info, m, n, k, batch, true);
    if (quick.empty()) return plans::Plan{"", ""};
    DeviceLauncher launcher;
    at::Tensor trial;  // trial runs write a scratch result (c may be read: beta · c)
    auto run = [&](const std::string& config) {
      if (!trial.defined()) trial = empty_device(c.sizes(), c.scalar_type());
      run_tile(Tile::of(config), A, B, trial, at::Tensor(), 1.0f, 0.0f, Activation::kNone, where == TensorCores::emulated);
    };
    char tuning_key[160];
    std::snprintf(tuning_key, sizeof(tuning_key), "gemm16_mma.v2 M=%lld N=%lld K=%lld B=%lld A_KC=%d B_KC=%d %s",
                  (long long)m, (long long)n, (long long)k, (long long)batch, int(A.kc), int(B.kc),
                  cl_storage_type(c.scalar_type()));
    const std::string hash = rt.programs().source_hash(kernels_dir() + "/" + kFile);
    const bool worth = 2.0 * double(m) * double(n) * double(k) * double(batch) >= double(1 << 27) &&
                       where == TensorCores::hardware;
    const reference::Choice choice = reference::choose(launcher, tuning_key, hash, quick, full, run, worth);
    return plans::Plan{choice.config, choice.origin};
  });
  if (plan.config.empty()) return false;
  run_tile(Tile::of(plan.config), A, B, c, row, alpha, beta, act, where == TensorCores::emulated);
  return true;
}

}  // namespace oclf::device
