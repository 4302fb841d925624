//===- GemmKernels.cpp - The scaled GEMMs' own small kernels --------------===//
//
// The plan's scales multiply values into FP8 codes; cuBLASLt multiplies
// products by the factors that undo that. Their reciprocals are computed on
// the device, right before each GEMM on its stream, so a scale written by
// the step that precedes it (an amax, a delayed scale) is read when the GEMM
// runs, never on the host: a captured graph stays correct from step to step.
//
// The project compiles no .cu file at build time: this source goes through
// NVRTC at first use for the device's architecture (KernelCompiler.h, with
// its on-disk cache) and is launched through cudart's library API.
//
//===----------------------------------------------------------------------===//

#include "DevicePrelude.h"
#include "GemmInternal.h"

#include "kiln/Runtime/Cuda/KernelCompiler.h"

#include <algorithm>

namespace kiln::runtime::cuda::gemm {

const std::string &scaleKernelSource() {
  // --fmad=false (compileKernel's option) keeps acc * (ra * rb) two
  // roundings in that order, the plan's order (docs/plan.md, scaled_matmul).
  // The rounding to bf16 is the device prelude's kiln_bf16_bits.
  static const std::string source = std::string(devicePrelude()) + R"(
extern "C" __global__ void kiln_gemm_reciprocals(
    const float *sa, long long saCount, const float *sb, long long sbCount,
    float *ra, long long raCount, float *rb, long long rbCount) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < raCount)
    ra[i] = 1.0f / sa[saCount == 1 ? 0 : i];
  if (i < rbCount)
    rb[i] = 1.0f / sb[sbCount == 1 ? 0 : i];
}

// Rows over gridDim.y (strided past 65535), columns over x.
extern "C" __global__ void kiln_gemm_scale_bf16(
    const float *acc, const float *ra, const float *rb, long long m,
    long long n, kiln_u16 *out) {
  long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n)
    return;
  float colScale = rb[j];
  for (long long i = blockIdx.y; i < m; i += gridDim.y) {
    long long at = i * n + j;
    out[at] = kiln_bf16_bits(acc[at] * (ra[i] * colScale));
  }
}
)";
  return source;
}

namespace {
std::string cudaText(const char *what, cudaError_t e) {
  return std::string(what) + ": " + cudaGetErrorString(e);
}
constexpr unsigned kThreads = 256;
} // namespace

ScaleKernels::~ScaleKernels() {
  if (library)
    cudaLibraryUnload(library);
}

Error ScaleKernels::load() {
  if (library)
    return Error::success();
  Expected<std::string> arch = currentArch();
  if (!arch)
    return arch.takeError();
  Expected<CompiledKernel> cubin = compileKernel(
      scaleKernelSource(), *arch, defaultKernelCacheDir(), Arithmetic::Exact);
  if (!cubin)
    return Error("compiling the GEMM scale kernels for " + *arch + ": " +
                 cubin.error().message());
  cudaLibrary_t lib = nullptr;
  if (cudaError_t e = cudaLibraryLoadData(&lib, cubin->cubin.data(), nullptr,
                                          nullptr, 0, nullptr, nullptr, 0);
      e != cudaSuccess)
    return Error(cudaText("loading the GEMM scale kernels", e));
  cudaError_t e =
      cudaLibraryGetKernel(&reciprocalKernel, lib, "kiln_gemm_reciprocals");
  if (e == cudaSuccess)
    e = cudaLibraryGetKernel(&scaleKernel, lib, "kiln_gemm_scale_bf16");
  if (e != cudaSuccess) {
    cudaLibraryUnload(lib);
    return Error(cudaText("finding the GEMM scale kernels", e));
  }
  library = lib;
  return Error::success();
}

Error ScaleKernels::reciprocals(const float *sa, int64_t saCount,
                                const float *sb, int64_t sbCount, float *ra,
                                int64_t raCount, float *rb, int64_t rbCount,
                                cudaStream_t stream) {
  long long args[] = {saCount, sbCount, raCount, rbCount};
  void *params[] = {&sa, &args[0], &sb, &args[1], &ra, &args[2], &rb, &args[3]};
  int64_t count = std::max(raCount, rbCount);
  dim3 grid(static_cast<unsigned>((count + kThreads - 1) / kThreads));
  if (cudaError_t e =
          cudaLaunchKernel(reinterpret_cast<const void *>(reciprocalKernel),
                           grid, dim3(kThreads), params, 0, stream);
      e != cudaSuccess)
    return Error(cudaText("launching kiln_gemm_reciprocals", e));
  return Error::success();
}

Error ScaleKernels::scaleToBf16(const float *acc, const float *ra,
                                const float *rb, int64_t m, int64_t n,
                                void *out, cudaStream_t stream) {
  long long mm = m, nn = n;
  void *params[] = {&acc, &ra, &rb, &mm, &nn, &out};
  dim3 grid(static_cast<unsigned>((n + kThreads - 1) / kThreads),
            static_cast<unsigned>(std::min<int64_t>(m, 65535)));
  if (cudaError_t e =
          cudaLaunchKernel(reinterpret_cast<const void *>(scaleKernel), grid,
                           dim3(kThreads), params, 0, stream);
      e != cudaSuccess)
    return Error(cudaText("launching kiln_gemm_scale_bf16", e));
  return Error::success();
}

} // namespace kiln::runtime::cuda::gemm
