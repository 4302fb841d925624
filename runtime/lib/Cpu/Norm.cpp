//===- Norm.cpp - RMS normalisation and its gradient ----------------------===//
//
// Rows are independent in the forward and in dx, so threads split rows.
// dw is a sum over rows; threads split its columns instead, each column
// summing all rows in increasing order in double, so the result does not
// depend on the thread count.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Cpu/Norm.h"

#include "Parallel.h"

#include <cmath>
#include <vector>

namespace kiln::runtime::cpu {

using detail::parallelFor;

namespace {

/// Elements of work worth starting a thread for.
constexpr int64_t kGrainElements = 1 << 15;

int64_t rowGrain(int64_t dim) {
  return std::max<int64_t>(1, kGrainElements / std::max<int64_t>(dim, 1));
}

/// 1 / sqrt(mean(x^2) + eps) of one row, in double, rounded to float.
float rowRstd(const float *x, int64_t dim, double eps) {
  double ss = 0;
  for (int64_t e = 0; e < dim; ++e)
    ss += static_cast<double>(x[e]) * x[e];
  return static_cast<float>(1.0 / std::sqrt(ss / dim + eps));
}

} // namespace

void rmsNorm(const float *x, const float *w, float *y, float *rstd,
             int64_t rows, int64_t dim, double eps) {
  parallelFor(rows, rowGrain(dim), [=](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const float *xr = x + t * dim;
      float *yr = y + t * dim;
      float r = rowRstd(xr, dim, eps);
      if (rstd)
        rstd[t] = r;
      for (int64_t i = 0; i < dim; ++i)
        yr[i] = (xr[i] * r) * w[i];
    }
  });
}

void rmsNormBackward(const float *x, const float *w, const float *rstd,
                     const float *dy, float *dx, float *dw, int64_t rows,
                     int64_t dim, double eps, bool accumulateDw) {
  // The per-row factor r, saved or recomputed exactly as the forward did.
  std::vector<float> recomputed;
  if (!rstd) {
    recomputed.resize(rows);
    float *r = recomputed.data();
    parallelFor(rows, rowGrain(dim), [=](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t)
        r[t] = rowRstd(x + t * dim, dim, eps);
    });
    rstd = recomputed.data();
  }

  // dw first: dx may overwrite dy.
  parallelFor(dim, std::max<int64_t>(1, kGrainElements / std::max<int64_t>(rows, 1)),
              [=](int64_t b, int64_t e) {
                std::vector<double> acc(e - b, 0.0);
                for (int64_t t = 0; t < rows; ++t) {
                  const float *xr = x + t * dim, *gr = dy + t * dim;
                  double r = rstd[t];
                  for (int64_t i = b; i < e; ++i)
                    acc[i - b] += static_cast<double>(gr[i]) * xr[i] * r;
                }
                for (int64_t i = b; i < e; ++i)
                  dw[i] = static_cast<float>(
                      accumulateDw ? dw[i] + acc[i - b] : acc[i - b]);
              });

  parallelFor(rows, rowGrain(dim), [=](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const float *xr = x + t * dim, *gr = dy + t * dim;
      float *dxr = dx + t * dim;
      float r = rstd[t];
      // c = mean(g * x) with g = dy * w, in double.
      double c = 0;
      for (int64_t i = 0; i < dim; ++i)
        c += static_cast<double>(gr[i] * w[i]) * xr[i];
      c /= dim;
      float k = static_cast<float>(static_cast<double>(r) * r * c);
      for (int64_t i = 0; i < dim; ++i) {
        float g = gr[i] * w[i];
        dxr[i] = r * (g - xr[i] * k);
      }
    }
  });
}

} // namespace kiln::runtime::cpu
