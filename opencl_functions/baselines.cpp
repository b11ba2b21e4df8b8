// Baselines that the benchmark and the grader compare our conv2d with, run through the
// same runtime (queue, profiling events) so kernel times are comparable:
//   conv2d_from_file: any conv2d kernel with conv2d_tiled's arguments, read from a .cl
//                     file given by path (the naive kernel, the first tiled version);
//   convgemm:         CLBlast's Convgemm (im2col fused into a GEMM), groups = 1.
// Not part of the students' code.
#include "baselines.hpp"

#include <clblast.h>

#include <sys/stat.h>

#include <cstdio>
#include <map>
#include <string>

#include "ocl_runtime.hpp"

namespace baselines {

namespace {

// Programs built from explicit paths, cached by (path, mtime, size, options).
std::map<std::string, std::pair<cl_program, std::map<std::string, cl_kernel>>>& programs() {
  static auto* cache = new std::map<std::string, std::pair<cl_program, std::map<std::string, cl_kernel>>>();
  return *cache;
}

cl_kernel kernel_from_path(const std::string& path, const std::string& name, const std::string& options) {
  ocl::Runtime& rt = ocl::Runtime::get();
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) throw ocl::Error("cannot find kernel file " + path, CL_INVALID_VALUE);
  // No iostreams (see Runtime::kernel).
  const std::string key = path + "|" + std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) +
                          "|" + std::to_string(st.st_size) + "|" + options;
  auto it = programs().find(key);
  if (it == programs().end()) {
    std::string source;
    if (std::FILE* in = std::fopen(path.c_str(), "rb")) {
      char chunk[4096];
      for (size_t n; (n = std::fread(chunk, 1, sizeof(chunk), in)) > 0;) source.append(chunk, n);
      std::fclose(in);
    }
    const char* src = source.c_str();
    size_t length = source.size();
    cl_int status = CL_SUCCESS;
    cl_program program = clCreateProgramWithSource(rt.context(), 1, &src, &length, &status);
    CL_CHECK(status);
    const std::string all_options = "-cl-std=CL1.2 " + options;
    cl_device_id device = rt.device();
    status = clBuildProgram(program, 1, &device, all_options.c_str(), nullptr, nullptr);
    if (status != CL_SUCCESS) {
      size_t n = 0;
      clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
      std::string log(n, '\0');
      clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, n, &log[0], nullptr);
      clReleaseProgram(program);
      throw ocl::BuildError("building " + path + " (" + all_options + "):\n" + log, status);
    }
    it = programs().emplace(key, std::make_pair(program, std::map<std::string, cl_kernel>{})).first;
  }
  auto& kernels = it->second.second;
  auto k = kernels.find(name);
  if (k == kernels.end()) {
    cl_int status = CL_SUCCESS;
    cl_kernel kernel = clCreateKernel(it->second.first, name.c_str(), &status);
    CL_CHECK(status);
    k = kernels.emplace(name, kernel).first;
  }
  return k->second;
}

size_t round_up(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

}  // namespace

void conv2d_from_file(const std::string& path, const std::string& name, const std::string& options,
                      size_t local_0, size_t local_1, const oclf::Conv2dArgs& p) {
  ocl::Runtime& rt = ocl::Runtime::get();
  const size_t x_len = size_t(p.batch) * p.c_in * p.h * p.w;
  const size_t w_len = size_t(p.c_out) * (p.c_in / p.groups) * p.k_h * p.k_w;
  const size_t y_len = size_t(p.batch) * p.c_out * p.h_out * p.w_out;
  ocl::Buffer x = ocl::Buffer::input(p.x, x_len * sizeof(float));
  ocl::Buffer w = ocl::Buffer::input(p.weight, w_len * sizeof(float));
  ocl::Buffer y = ocl::Buffer::output(p.y, y_len * sizeof(float));
  ocl::Buffer bias;
  if (p.bias) bias = ocl::Buffer::input(p.bias, p.c_out * sizeof(float));
  cl_kernel kernel = kernel_from_path(path, name, options);
  const cl_mem bias_mem = bias.get();
  const int has_bias = p.bias != nullptr;
  ocl::set_args(kernel, x.get(), w.get(), bias_mem, y.get(), has_bias, p.batch, p.c_in, p.h, p.w, p.c_out, p.k_h,
                p.k_w, p.stride_h, p.stride_w, p.dilation_h, p.dilation_w, p.groups, p.h_out, p.w_out);
  if (local_0 && local_1) {
    // Tiled layout (as conv2d_tiled): dim 0 all output pixels, dim 1 channels of a group, dim 2 groups.
    const size_t pixels = size_t(p.batch) * p.h_out * p.w_out;
    const size_t global[3] = {round_up(pixels, local_0), round_up(p.c_out / p.groups, local_1), size_t(p.groups)};
    const size_t local[3] = {local_0, local_1, 1};
    rt.launch(kernel, 3, global, local);
  } else {
    // One work-item per output: dim 0 pixels of an image, dim 1 output channels, dim 2 batch.
    const size_t global[3] = {size_t(p.h_out) * p.w_out, size_t(p.c_out), size_t(p.batch)};
    rt.launch(kernel, 3, global, nullptr);
  }
  y.read(p.y, y_len * sizeof(float));
}

void convgemm(const oclf::Conv2dArgs& p) {
  ocl::Runtime& rt = ocl::Runtime::get();
  const size_t x_len = size_t(p.batch) * p.c_in * p.h * p.w;
  const size_t w_len = size_t(p.c_out) * p.c_in * p.k_h * p.k_w;
  const size_t y_len = size_t(p.batch) * p.c_out * p.h_out * p.w_out;
  ocl::Buffer x = ocl::Buffer::input(p.x, x_len * sizeof(float));
  ocl::Buffer w = ocl::Buffer::input(p.weight, w_len * sizeof(float));
  ocl::Buffer y(y_len * sizeof(float), CL_MEM_READ_WRITE);  // a device buffer: CLBlast may read C too
  cl_event event = nullptr;
  cl_event start = rt.marker();  // Convgemm may run im2col before its GEMM: time both
  CLBLAST_CHECK(clblast::Convgemm<float>(clblast::KernelMode::kCrossCorrelation, p.c_in, p.h, p.w, p.k_h, p.k_w, 0,
                                         0, p.stride_h, p.stride_w, p.dilation_h, p.dilation_w, p.c_out, p.batch,
                                         x.get(), 0, w.get(), 0, y.get(), 0, rt.queue_ptr(), &event));
  rt.record(event, start);
  y.read(p.y, y_len * sizeof(float));
}

}  // namespace baselines
