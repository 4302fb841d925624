//===- Linear.cpp - Linear layers on the CPU backend's GEMM ---------------===//
//
// One row-major GEMM each (Gemm.h: OpenBLAS, or Kiln's portable loops).
// The forward multiplies by W transposed, the input gradient by W as
// stored and the weight gradient by dy transposed; no copy is ever made.
// Degenerate sizes (any of m, n, k zero) are handled here, since BLAS
// leading dimensions must be at least 1.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Cpu/Linear.h"

#include "Gemm.h"

#include <algorithm>
#include <vector>

namespace kiln::runtime::cpu {

namespace {

/// C [rows, cols] = op(A) op(B) (+ C when accumulate), where the inner
/// dimension is `inner`. Returns false, having handled C itself, when a
/// size is zero.
bool handleEmpty(float *c, int64_t rows, int64_t cols, int64_t inner,
                 bool accumulate) {
  if (rows > 0 && cols > 0 && inner > 0)
    return false;
  if (!accumulate && inner == 0)
    std::fill(c, c + rows * cols, 0.0f);
  return true;
}

} // namespace

void linear(const float *x, const float *w, float *y, int64_t m, int64_t k,
            int64_t n) {
  if (handleEmpty(y, m, n, k, /*accumulate=*/false))
    return;
  // y [m, n] = x [m, k] * W^T, W stored [n, k].
  detail::gemm({x, k, false}, {w, k, true}, y, n, m, n, k,
               /*accumulate=*/false);
}

void linearBackwardInput(const float *dy, const float *w, float *dx,
                         int64_t m, int64_t k, int64_t n, bool accumulate) {
  if (handleEmpty(dx, m, k, n, accumulate))
    return;
  // dx [m, k] = dy [m, n] * W [n, k].
  detail::gemm({dy, n, false}, {w, k, false}, dx, k, m, k, n, accumulate);
}

void linearBackwardWeight(const float *dy, const float *x, float *dw,
                          int64_t m, int64_t k, int64_t n, bool accumulate) {
  if (handleEmpty(dw, n, k, m, accumulate))
    return;
  // dW [n, k] = dy^T (dy stored [m, n]) * x [m, k].
  detail::gemm({dy, n, true}, {x, k, false}, dw, k, n, k, m, accumulate);
}

} // namespace kiln::runtime::cpu

namespace kiln::runtime::cpu {

void scaledMatmul(const float *a, const float *aScale, bool aPerRow,
                  const float *b, const float *bScale, bool bPerRow, float *y,
                  int64_t m, int64_t k, int64_t n) {
  // Products of FP8 values are exact in f32; the sum is the GEMM's.
  linear(a, b, y, m, k, n);
  std::vector<float> bInv(bPerRow ? n : 1);
  for (size_t j = 0; j < bInv.size(); ++j)
    bInv[j] = 1.0f / bScale[j];
  for (int64_t i = 0; i < m; ++i) {
    float aInv = 1.0f / aScale[aPerRow ? i : 0];
    float *row = y + i * n;
    for (int64_t j = 0; j < n; ++j)
      row[j] *= aInv * bInv[bPerRow ? j : 0];
  }
}

} // namespace kiln::runtime::cpu
