//===- OpLaunchArgs.h - Building op kernel argument slots -------*- C++ -*-===//
//
// Internal to the op kernel launches (OpKernelLaunches*.cpp): one-line
// constructors of the argument slots of OpKernels.h.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CUDA_OPLAUNCHARGS_H
#define KILN_RUNTIME_CUDA_OPLAUNCHARGS_H

#include "kiln/Runtime/Cuda/OpKernels.h"

namespace kiln::runtime::cuda::launch {

using Arg = OpKernelArg;

inline Arg operand(int64_t i) { return {Arg::Operand, i, 0, 0}; }
inline Arg result(int64_t i) { return {Arg::Result, i, 0, 0}; }
inline Arg scratch(int64_t offset) { return {Arg::Scratch, offset, 0, 0}; }
inline Arg integer(int64_t v) { return {Arg::Int, 0, v, 0}; }
inline Arg real(double v) { return {Arg::Float, 0, 0, v}; }
/// A dtype as the kernels' dtype code (DType's own value).
inline Arg code(DType t) { return integer(static_cast<int>(t)); }

} // namespace kiln::runtime::cuda::launch

#endif // KILN_RUNTIME_CUDA_OPLAUNCHARGS_H
