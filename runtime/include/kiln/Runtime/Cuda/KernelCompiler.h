//===- KernelCompiler.h - NVRTC with an on-disk cache -----------*- C++ -*-===//
//
// Generated kernels are compiled at load time by NVRTC for the device's
// architecture, to CUBIN, and kept on disk under a key that hashes
// everything the result depends on (NVRTC's version, the architecture, the
// options, the source), so a plan loaded again compiles nothing. Needs the
// CUDA toolkit's NVRTC, not a GPU. Built only with the CUDA backend.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CUDA_KERNELCOMPILER_H
#define KILN_RUNTIME_CUDA_KERNELCOMPILER_H

#include "kiln/Runtime/Support/Error.h"

#include <string>

namespace kiln::runtime::cuda {

struct CompiledKernel {
  std::string cubin;
  bool fromCache = false;
};

/// How a kernel's floating-point arithmetic is compiled.
enum class Arithmetic {
  /// `--fmad=false`: every product and sum rounded to its type, as the CPU
  /// backend computes it. For the kernels whose bits are asserted against
  /// the CPU backend: the op kernel library, the GEMM scale kernels, and
  /// the fused groups without exp or log (groupArithmetic).
  Exact,
  /// NVRTC's default, multiply-adds contracted into FMAs: faster, and
  /// within the tolerance the checks state, not bit for bit.
  Contracted,
};

/// The CUBIN of `source` for `arch` (e.g. "sm_90a"), compiled with the
/// toolkit's headers and `arithmetic`, or read from `cacheDir` when an
/// earlier call put it there (an empty `cacheDir`: no cache). On a compile
/// error, the error is NVRTC's log.
Expected<CompiledKernel> compileKernel(const std::string &source,
                                       const std::string &arch,
                                       const std::string &cacheDir,
                                       Arithmetic arithmetic);

/// The kernels' folder in Kiln's cache (Cache.h): <cache>/kernels.
std::string defaultKernelCacheDir();

/// The target for a device of compute capability major.minor: "sm_XY", and
/// on Hopper the arch-specific "sm_90a" (its wgmma and FP8 instructions).
std::string kernelArch(int major, int minor);

/// The target of GPU `device`, or why it cannot be used ("no usable CUDA
/// device (...)", "no CUDA device", ...).
Expected<std::string> deviceKernelArch(int device);

} // namespace kiln::runtime::cuda

#endif // KILN_RUNTIME_CUDA_KERNELCOMPILER_H
