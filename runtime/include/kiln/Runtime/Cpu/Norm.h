//===- Norm.h - RMS normalisation and its gradient --------------*- C++ -*-===//
//
// x is [rows, dim]; each row is normalised over its last dimension:
//
//   r = 1 / sqrt(mean(x^2) + eps)        (sum of squares in double, r in
//                                          double, then rounded to float)
//   y = (x * r) * w                        (fp32)
//
// The gradient, with g = dy * w and c = mean(g * x) (double):
//
//   dx = r * (g - x * (r^2 c))             (r^2 c in double, then float)
//   dw = sum over rows of dy * x * r       (double per column)
//
// The per-row r ("rstd") is the saved residual of the forward: pass it to
// the backward, or pass nullptr there and it is recomputed bit-identically.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CPU_NORM_H
#define KILN_RUNTIME_CPU_NORM_H

#include <cstdint>

namespace kiln::runtime::cpu {

/// y [rows, dim] = rms_norm(x [rows, dim]) * w [dim]. `rstd` [rows], when
/// not null, receives each row's r. `y` may be `x`.
void rmsNorm(const float *x, const float *w, float *y, float *rstd,
             int64_t rows, int64_t dim, double eps);

/// dx [rows, dim] and dw [dim] from dy [rows, dim]. `rstd` is the forward's
/// (or nullptr to recompute it from x and eps). dw is overwritten, or added
/// to when `accumulateDw` (the double column sums are added to dw's fp32
/// value at the end). `dx` may be `dy`.
void rmsNormBackward(const float *x, const float *w, const float *rstd,
                     const float *dy, float *dx, float *dw, int64_t rows,
                     int64_t dim, double eps, bool accumulateDw);

} // namespace kiln::runtime::cpu

#endif // KILN_RUNTIME_CPU_NORM_H
