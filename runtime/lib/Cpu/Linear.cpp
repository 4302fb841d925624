//===- Linear.cpp - Linear layers on OpenBLAS -----------------------------===//
//
// Row-major cblas_sgemm calls. The forward multiplies by W transposed, the
// input gradient by W as stored and the weight gradient by dy transposed;
// no copy is ever made. Degenerate sizes (any of m, n, k zero) are handled
// here, since BLAS leading dimensions must be at least 1.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Cpu/Linear.h"

#include <cblas.h>

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

int blasInt(int64_t v) { return static_cast<int>(std::max<int64_t>(v, 1)); }

} // namespace

void linear(const float *x, const float *w, float *y, int64_t m, int64_t k,
            int64_t n) {
  if (handleEmpty(y, m, n, k, /*accumulate=*/false))
    return;
  // y [m, n] = x [m, k] * W^T, W stored [n, k].
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blasInt(m), blasInt(n),
              blasInt(k), 1.0f, x, blasInt(k), w, blasInt(k), 0.0f, y,
              blasInt(n));
}

void linearBackwardInput(const float *dy, const float *w, float *dx,
                         int64_t m, int64_t k, int64_t n, bool accumulate) {
  if (handleEmpty(dx, m, k, n, accumulate))
    return;
  // dx [m, k] = dy [m, n] * W [n, k].
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blasInt(m),
              blasInt(k), blasInt(n), 1.0f, dy, blasInt(n), w, blasInt(k),
              accumulate ? 1.0f : 0.0f, dx, blasInt(k));
}

void linearBackwardWeight(const float *dy, const float *x, float *dw,
                          int64_t m, int64_t k, int64_t n, bool accumulate) {
  if (handleEmpty(dw, n, k, m, accumulate))
    return;
  // dW [n, k] = dy^T (dy stored [m, n]) * x [m, k].
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, blasInt(n), blasInt(k),
              blasInt(m), 1.0f, dy, blasInt(n), x, blasInt(k),
              accumulate ? 1.0f : 0.0f, dw, blasInt(k));
}

} // namespace kiln::runtime::cpu

namespace kiln::runtime::cpu {

void scaledMatmul(const float *a, const float *aScale, bool aPerRow,
                  const float *b, const float *bScale, bool bPerRow, float *y,
                  int64_t m, int64_t k, int64_t n) {
  // Products of FP8 values are exact in f32; the sum is sgemm's.
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
