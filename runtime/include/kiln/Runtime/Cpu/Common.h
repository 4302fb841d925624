//===- Common.h - Conventions and threads of the CPU kernels ----*- C++ -*-===//
//
// Conventions shared by every kernel under kiln/Runtime/Cpu:
//
// - Tensors are contiguous, row-major fp32 `float *` with explicit int64_t
//   sizes; token ids and targets are int32. Arguments come as inputs, then
//   outputs, then sizes and attributes.
// - Arithmetic is fp32. Reductions that decide a result's last bits (row
//   sums of squares, softmax denominators of the loss, the loss mean, the
//   gradient norm, rms_norm's weight gradient) accumulate in double; each
//   header says which.
// - Determinism: every output element is computed by one thread in a fixed
//   order, so the kernels' own loops give the same bits across runs and
//   across thread counts. Work is split only over independent rows, heads
//   or columns; no reduction depends on the order threads finish in. GEMMs
//   are OpenBLAS's where the build has it: the same bits across runs for
//   one thread count, but its blocking follows the thread count, so
//   another count may change the last bits (measured in LinearTest).
//   Without OpenBLAS they are Kiln's portable GEMM (lib/Cpu/Gemm.h), the
//   same bits for every thread count.
// - Kernels that can fail on their data (a token id or a target outside the
//   vocabulary) return an Error and write nothing when they fail; all
//   others return void. Sizes and shapes are the caller's contract.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CPU_COMMON_H
#define KILN_RUNTIME_CPU_COMMON_H

#include "kiln/Runtime/Support/Error.h"

#include <string>
#include <vector>

namespace kiln::runtime::cpu {

/// Sets the number of threads used by OpenBLAS (openblas_set_num_threads,
/// where the build has it) and by the kernels' own loops and GEMM. Values
/// below 1 mean 1. The kernels' own loops use 1 thread until this is first
/// called; OpenBLAS keeps its own default until then.
void setCpuThreads(int n);

/// The thread count the kernels' own loops use.
int cpuThreads();

/// The GEMM libraries this build can use: "openblas" (where built with it)
/// and "portable", Kiln's own loops, whose every element is the same bits
/// whatever the matrix's row count and thread count (Gemm.h). The first is
/// the default.
const std::vector<std::string> &cpuGemmLibraries();

/// Chooses who multiplies matrices (one of cpuGemmLibraries()); an error
/// names the others. Set before a run, not while kernels run.
Error setCpuGemm(const std::string &library);

} // namespace kiln::runtime::cpu

#endif // KILN_RUNTIME_CPU_COMMON_H
