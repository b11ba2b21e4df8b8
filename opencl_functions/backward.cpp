// Host code for the backward pass of conv2d: uploads the operands, picks a kernel
// version of conv2d_backward.cl (direct or tiled) and the number of splits of the
// weight gradient's pixel sum, launches, and reads the gradient back.
#include "backward.hpp"

#include <algorithm>
#include <stdexcept>

#include "runtime/runtime.hpp"

namespace oclf {

namespace {

const char* kFile = "conv2d_backward.cl";

size_t round_up(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

size_t tile_size() { return Runtime::get().info().max_work_group_size >= 256 ? 16 : 8; }

std::string build_options() { return "-DTILE=" + std::to_string(tile_size()); }

// A tile is worth it when the GEMM's rows (channels per group) fill at least half of it.
bool use_tiled(BackwardVariant variant, size_t rows, size_t cols) {
  if (variant != BackwardVariant::kAuto) return variant == BackwardVariant::kTiled;
  const size_t half = tile_size() / 2;
  return rows >= half && cols >= half;
}

// How many slices the weight gradient's sum over `pixels` output pixels is cut into, so
// that `base_items` work-items become about `target_items`, each slice at least `min_chunk`
// pixels long. Returns the chunk length (a multiple of `align`) and sets splits.
int split_pixels(size_t pixels, size_t base_items, size_t target_items, size_t min_chunk, size_t align,
                 int* splits) {
  size_t want = std::max<size_t>(1, (target_items + base_items - 1) / base_items);
  want = std::min<size_t>({want, std::max<size_t>(1, pixels / min_chunk), 256});
  size_t chunk = round_up((pixels + want - 1) / want, align);
  *splits = static_cast<int>((pixels + chunk - 1) / chunk);
  return static_cast<int>(chunk);
}

void set_shape_args(cl_kernel kernel, cl_uint first, const Conv2dShape& s) {
  const int values[] = {s.batch,      s.c_in,       s.h,          s.w,          s.c_out,
                        s.k_h,        s.k_w,        s.stride_h,   s.stride_w,   s.dilation_h,
                        s.dilation_w, s.groups,     s.h_out,      s.w_out};
  for (cl_uint i = 0; i < sizeof(values) / sizeof(values[0]); ++i)
    set_arg(kernel, first + i, sizeof(int), &values[i]);
}

}  // namespace

BackwardVariant parse_variant(const std::string& name) {
  if (name == "auto") return BackwardVariant::kAuto;
  if (name == "direct") return BackwardVariant::kDirect;
  if (name == "tiled") return BackwardVariant::kTiled;
  throw std::invalid_argument("variant must be 'auto', 'direct' or 'tiled', got '" + name + "'");
}

void conv2d_backward_input(const Conv2dShape& s, const float* grad_out, const float* weight, float* grad_input,
                           BackwardVariant variant) {
  Runtime& rt = Runtime::get();
  const int cin_g = s.c_in / s.groups, cout_g = s.c_out / s.groups;
  const size_t dy_len = size_t(s.batch) * s.c_out * s.h_out * s.w_out;
  const size_t w_len = size_t(s.c_out) * cin_g * s.k_h * s.k_w;
  const size_t dx_len = size_t(s.batch) * s.c_in * s.h * s.w;
  Buffer dy = Buffer::input(grad_out, dy_len * sizeof(float));
  Buffer w = Buffer::input(weight, w_len * sizeof(float));
  Buffer dx = Buffer::output(grad_input, dx_len * sizeof(float));

  const size_t tile = tile_size();
  const size_t pixels = size_t(s.batch) * s.h * s.w;
  // The tiled version gathers mostly zeros when the stride leaves gaps, and on a CPU the
  // direct one measured faster at every shape (PoCL); "auto" keeps the tile for GPUs.
  const bool gaps = s.stride_h > 1 || s.stride_w > 1;
  const bool gpu = rt.info().type == "GPU";
  const BackwardVariant pick =
      variant == BackwardVariant::kAuto && (gaps || !gpu) ? BackwardVariant::kDirect : variant;
  if (use_tiled(pick, cin_g, size_t(cout_g) * s.k_h * s.k_w)) {
    cl_kernel kernel = rt.kernel(kFile, "conv2d_grad_input_tiled", build_options());
    set_args(kernel, dy.get(), w.get(), dx.get());
    set_shape_args(kernel, 3, s);
    const size_t global[3] = {round_up(pixels, tile), round_up(cin_g, tile), size_t(s.groups)};
    const size_t local[3] = {tile, tile, 1};
    rt.launch(kernel, 3, global, local);
  } else {
    cl_kernel kernel = rt.kernel(kFile, "conv2d_grad_input_direct", build_options());
    set_args(kernel, dy.get(), w.get(), dx.get());
    set_shape_args(kernel, 3, s);
    const size_t global[1] = {round_up(dx_len, 64)};
    rt.launch(kernel, 1, global, nullptr);
  }
  dx.read(grad_input, dx_len * sizeof(float));
}

void conv2d_backward_weight(const Conv2dShape& s, const float* x, const float* grad_out, float* grad_weight,
                            BackwardVariant variant) {
  Runtime& rt = Runtime::get();
  const int cin_g = s.c_in / s.groups, cout_g = s.c_out / s.groups;
  const size_t x_len = size_t(s.batch) * s.c_in * s.h * s.w;
  const size_t dy_len = size_t(s.batch) * s.c_out * s.h_out * s.w_out;
  const size_t k_dim = size_t(cin_g) * s.k_h * s.k_w;
  const size_t w_len = size_t(s.c_out) * k_dim;
  const size_t pixels = size_t(s.batch) * s.h_out * s.w_out;
  Buffer xb = Buffer::input(x, x_len * sizeof(float));
  Buffer dy = Buffer::input(grad_out, dy_len * sizeof(float));

  // Enough work-items to fill the device several times over.
  const size_t target_items = size_t(rt.info().compute_units) * 4096;
  const size_t tile = tile_size();
  const bool tiled = use_tiled(variant, cout_g, k_dim);
  int splits = 1;
  int chunk = 0;
  if (tiled) {
    const size_t base = round_up(k_dim, tile) * round_up(cout_g, tile) * s.groups;
    chunk = split_pixels(pixels, base, target_items, 4 * tile, tile, &splits);
  } else {
    chunk = split_pixels(pixels, w_len, target_items, 64, 1, &splits);
  }
  // One split writes straight into the result; more write partial sums to add up after.
  Buffer partial(size_t(splits) * w_len * sizeof(float), CL_MEM_READ_WRITE);
  if (tiled) {
    cl_kernel kernel = rt.kernel(kFile, "conv2d_grad_weight_tiled", build_options());
    set_args(kernel, xb.get(), dy.get(), partial.get());
    set_shape_args(kernel, 3, s);
    set_arg(kernel, 17, sizeof(int), &chunk);
    const size_t global[3] = {round_up(k_dim, tile), round_up(cout_g, tile), size_t(s.groups) * splits};
    const size_t local[3] = {tile, tile, 1};
    rt.launch(kernel, 3, global, local);
  } else {
    cl_kernel kernel = rt.kernel(kFile, "conv2d_grad_weight_direct", build_options());
    set_args(kernel, xb.get(), dy.get(), partial.get());
    set_shape_args(kernel, 3, s);
    set_arg(kernel, 17, sizeof(int), &chunk);
    const size_t global[2] = {round_up(w_len, 64), size_t(splits)};
    rt.launch(kernel, 2, global, nullptr);
  }
  if (splits == 1) {
    partial.read(grad_weight, w_len * sizeof(float));
    return;
  }
  Buffer dw = Buffer::output(grad_weight, w_len * sizeof(float));
  cl_kernel sum = rt.kernel(kFile, "conv2d_sum_splits", build_options());
  const int n = static_cast<int>(w_len);
  set_args(sum, partial.get(), dw.get(), n, splits);
  const size_t global[1] = {round_up(w_len, 64)};
  rt.launch(sum, 1, global, nullptr);
  dw.read(grad_weight, w_len * sizeof(float));
}

void conv2d_backward_bias(int batch, int c_out, int out_area, const float* grad_out, float* grad_bias) {
  Runtime& rt = Runtime::get();
  const size_t dy_len = size_t(batch) * c_out * out_area;
  Buffer dy = Buffer::input(grad_out, dy_len * sizeof(float));
  Buffer db = Buffer::output(grad_bias, size_t(c_out) * sizeof(float));
  const size_t group = 64;  // BIAS_GROUP in conv2d_backward.cl
  cl_kernel kernel = rt.kernel(kFile, "conv2d_grad_bias", build_options());
  set_args(kernel, dy.get(), db.get(), batch, c_out, out_area);
  const size_t global[1] = {size_t(c_out) * group};
  const size_t local[1] = {group};
  rt.launch(kernel, 1, global, local);
  db.read(grad_bias, size_t(c_out) * sizeof(float));
}

}  // namespace oclf
