//===- OpKernelTolerance.h - Op kernels' stated tolerances ------*- C++ -*-===//
//
// The op kernel check's stated tolerances (docs/cuda-op-kernels.md): per op
// for the kernels, per result for cuDNN's SDPA, and their text.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_TESTS_CUDA_OPKERNELTOLERANCE_H
#define KILN_RUNTIME_TESTS_CUDA_OPKERNELTOLERANCE_H

#include "kiln/Runtime/DType.h"
#include "kiln/Runtime/Plan/Format.h"

#include <cstddef>
#include <string>

namespace kiln::runtime::opcheck {

/// The spacing of `t`'s values at |x| (its subnormal spacing near zero).
double ulpOf(DType t, float x);

/// How far a kernel's result may be from the CPU backend's: `ulps` units
/// in the last place of the result dtype at the CPU's value, plus `ofMax`
/// times the largest magnitude in that result. Zero: the same bits.
struct Tolerance {
  double ulps = 0, ofMax = 0;
};

/// The stated tolerance of `op`'s kernels on the host or a GPU.
Tolerance toleranceOf(plan::Op op, bool gpu);
/// cuDNN's fused SDPA against the CPU backend, per result of `op`.
Tolerance cudnnToleranceOf(plan::Op op, size_t result);
/// "bit for bit", or "tolerance N ulp [+ F of the largest magnitude]".
std::string toleranceText(Tolerance t);
std::string toleranceText(plan::Op op, bool gpu);

} // namespace kiln::runtime::opcheck

#endif // KILN_RUNTIME_TESTS_CUDA_OPKERNELTOLERANCE_H
