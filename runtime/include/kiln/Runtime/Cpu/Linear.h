//===- Linear.h - Linear layers on OpenBLAS ---------------------*- C++ -*-===//
//
// PyTorch's layout: x is [m, k], the weight W is [n, k], y = x W^T is
// [m, n]. All three products are one cblas_sgemm each (fp32 accumulate);
// m, n and k must each fit in an int (OpenBLAS's index type). Outputs may
// not overlap inputs.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CPU_LINEAR_H
#define KILN_RUNTIME_CPU_LINEAR_H

#include <cstdint>

namespace kiln::runtime::cpu {

/// y [m, n] = x [m, k] W^T (W [n, k]).
void linear(const float *x, const float *w, float *y, int64_t m, int64_t k,
            int64_t n);

/// dx [m, k] = dy [m, n] W (W [n, k]); overwritten, or added to when
/// `accumulate` (GEMM beta = 1).
void linearBackwardInput(const float *dy, const float *w, float *dx,
                         int64_t m, int64_t k, int64_t n, bool accumulate);

/// dW [n, k] = dy^T (dy [m, n]) x (x [m, k]); overwritten, or added to when
/// `accumulate` (GEMM beta = 1).
void linearBackwardWeight(const float *dy, const float *x, float *dw,
                          int64_t m, int64_t k, int64_t n, bool accumulate);

} // namespace kiln::runtime::cpu

#endif // KILN_RUNTIME_CPU_LINEAR_H
