//===- Linear.h - Linear layers ---------------------------------*- C++ -*-===//
//
// PyTorch's layout: x is [m, k], the weight W is [n, k], y = x W^T is
// [m, n]. All three products are one GEMM each (fp32 accumulate;
// OpenBLAS's cblas_sgemm, or Kiln's portable GEMM in builds without it);
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

/// The FP8 scaled GEMM: y [m, n] = (a [m, k] b^T) * ((1 / aScale[i]) *
/// (1 / bScale[j])), with b [n, k]; a and b hold the values of FP8 codes,
/// the reciprocals are taken in f32. A scale holds one value per row when
/// `*PerRow`, else one for all rows.
void scaledMatmul(const float *a, const float *aScale, bool aPerRow,
                  const float *b, const float *bScale, bool bPerRow, float *y,
                  int64_t m, int64_t k, int64_t n);

} // namespace kiln::runtime::cpu

#endif // KILN_RUNTIME_CPU_LINEAR_H
