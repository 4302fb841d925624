//===- ModelOps.cpp - Embedding, RMSNorm, linear, RoPE, loss on the CPU ---===//
//
// Reductions accumulate in double where it costs little (row statistics,
// the loss), GEMMs in OpenBLAS's fp32. Every loop order is fixed, so results
// do not depend on scheduling.
//
//===----------------------------------------------------------------------===//

#include "OpsInternal.h"

#include <cblas.h>

#include <cmath>
#include <cstring>

namespace kiln::runtime::ops {

KILN_CPU_OP(embedding) {
  const View &table = in[0], &tokens = in[1];
  int64_t vocab = table.shape[0], dim = table.shape[1];
  int64_t n = tokens.numElements();
  for (int64_t t = 0; t < n; ++t) {
    int32_t id = tokens.i32()[t];
    if (id < 0 || id >= vocab)
      return "token id " + std::to_string(id) + " at position " +
             std::to_string(t) + " is outside the vocab [0, " +
             std::to_string(vocab) + ")";
    std::memcpy(out[0].f32() + t * dim, table.f32() + id * dim,
                dim * sizeof(float));
  }
  return "";
}

KILN_CPU_OP(embeddingGrad) {
  const View &grad = in[0], &tokens = in[1];
  int64_t vocab = out[0].shape[0], dim = out[0].shape[1];
  float *table = out[0].f32();
  std::memset(table, 0, vocab * dim * sizeof(float));
  for (int64_t t = 0, n = tokens.numElements(); t < n; ++t) {
    int32_t id = tokens.i32()[t];
    if (id < 0 || id >= vocab)
      return "token id " + std::to_string(id) + " is outside the vocab";
    const float *g = grad.f32() + t * dim;
    float *row = table + id * dim;
    for (int64_t d = 0; d < dim; ++d)
      row[d] += g[d];
  }
  return "";
}

namespace {
double rstd(const float *x, int64_t dim, double eps) {
  double ss = 0;
  for (int64_t d = 0; d < dim; ++d)
    ss += double(x[d]) * x[d];
  return 1.0 / std::sqrt(ss / dim + eps);
}
} // namespace

KILN_CPU_OP(rmsNorm) {
  double eps = step.f64("eps");
  int64_t dim = lastDim(in[0]), n = rows(in[0]);
  const float *w = in[1].f32();
  for (int64_t r = 0; r < n; ++r) {
    const float *x = in[0].f32() + r * dim;
    float *y = out[0].f32() + r * dim;
    double s = rstd(x, dim, eps);
    for (int64_t d = 0; d < dim; ++d)
      y[d] = static_cast<float>(x[d] * s * w[d]);
  }
  return "";
}

KILN_CPU_OP(rmsNormGrad) {
  double eps = step.f64("eps");
  const View &dy = in[0], &xv = in[1];
  const float *w = in[2].f32();
  int64_t dim = lastDim(xv), n = rows(xv);
  std::vector<double> dw(dim, 0.0);
  for (int64_t r = 0; r < n; ++r) {
    const float *x = xv.f32() + r * dim, *g = dy.f32() + r * dim;
    float *dx = out[0].f32() + r * dim;
    double s = rstd(x, dim, eps);
    double dot = 0; // mean over the row of (g * w) * x
    for (int64_t d = 0; d < dim; ++d) {
      dot += double(g[d]) * w[d] * x[d];
      dw[d] += double(g[d]) * x[d] * s;
    }
    dot /= dim;
    for (int64_t d = 0; d < dim; ++d)
      dx[d] = static_cast<float>(s * (double(g[d]) * w[d] - x[d] * s * s * dot));
  }
  for (int64_t d = 0; d < dim; ++d)
    out[1].f32()[d] = static_cast<float>(dw[d]);
  return "";
}

KILN_CPU_OP(linear) {
  // y[M, N] = x[M, K] * W[N, K]^T
  int64_t k = lastDim(in[0]), m = rows(in[0]), n = in[1].shape[0];
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f,
              in[0].f32(), k, in[1].f32(), k, 0.0f, out[0].f32(), n);
  return "";
}

KILN_CPU_OP(linearGradInput) {
  // dx[M, K] = dy[M, N] * W[N, K]
  int64_t n = lastDim(in[0]), m = rows(in[0]), k = in[1].shape[1];
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, k, n, 1.0f,
              in[0].f32(), n, in[1].f32(), k, 0.0f, out[0].f32(), k);
  return "";
}

KILN_CPU_OP(linearGradWeight) {
  // dW[N, K] = dy[M, N]^T * x[M, K]
  int64_t n = lastDim(in[0]), m = rows(in[0]), k = lastDim(in[1]);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, k, m, 1.0f,
              in[0].f32(), n, in[1].f32(), k, 0.0f, out[0].f32(), k);
  return "";
}

namespace {
/// Rotates each head vector of [B, S, H, D] by `sign` times its angle.
void rotate(const View &x, const View &y, double theta, double sign) {
  int64_t batch = x.shape[0], seq = x.shape[1], heads = x.shape[2],
          dim = x.shape[3], half = dim / 2;
  std::vector<float> cosines(seq * half), sines(seq * half);
  for (int64_t s = 0; s < seq; ++s)
    for (int64_t i = 0; i < half; ++i) {
      double angle = s * std::pow(theta, -2.0 * i / dim);
      cosines[s * half + i] = static_cast<float>(std::cos(angle));
      sines[s * half + i] = static_cast<float>(sign * std::sin(angle));
    }
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < seq; ++s)
      for (int64_t h = 0; h < heads; ++h) {
        int64_t base = ((b * seq + s) * heads + h) * dim;
        const float *xi = x.f32() + base;
        float *yo = y.f32() + base;
        const float *c = &cosines[s * half], *sn = &sines[s * half];
        for (int64_t i = 0; i < half; ++i) {
          float x1 = xi[i], x2 = xi[i + half];
          yo[i] = x1 * c[i] - x2 * sn[i];
          yo[i + half] = x2 * c[i] + x1 * sn[i];
        }
      }
}
} // namespace

KILN_CPU_OP(rope) {
  rotate(in[0], out[0], step.f64("theta"), 1.0);
  return "";
}

KILN_CPU_OP(ropeGrad) {
  rotate(in[0], out[0], step.f64("theta"), -1.0);
  return "";
}

namespace {
/// max and log-sum-exp of one row, in double.
double rowLogSumExp(const float *row, int64_t n) {
  float mx = row[0];
  for (int64_t v = 1; v < n; ++v)
    mx = std::max(mx, row[v]);
  double sum = 0;
  for (int64_t v = 0; v < n; ++v)
    sum += std::exp(double(row[v]) - mx);
  return mx + std::log(sum);
}
} // namespace

KILN_CPU_OP(crossEntropy) {
  const View &logits = in[0], &targets = in[1];
  int64_t vocab = lastDim(logits), n = rows(logits);
  double total = 0;
  for (int64_t t = 0; t < n; ++t) {
    int32_t target = targets.i32()[t];
    if (target < 0 || target >= vocab)
      return "target " + std::to_string(target) + " at position " +
             std::to_string(t) + " is outside the vocab";
    const float *row = logits.f32() + t * vocab;
    total += rowLogSumExp(row, vocab) - row[target];
  }
  out[0].f32()[0] = static_cast<float>(total / n);
  return "";
}

KILN_CPU_OP(crossEntropyGrad) {
  float dloss = in[0].f32()[0];
  const View &logits = in[1], &targets = in[2];
  int64_t vocab = lastDim(logits), n = rows(logits);
  double scale = double(dloss) / n;
  for (int64_t t = 0; t < n; ++t) {
    int32_t target = targets.i32()[t];
    if (target < 0 || target >= vocab)
      return "target " + std::to_string(target) + " is outside the vocab";
    const float *row = logits.f32() + t * vocab;
    float *g = out[0].f32() + t * vocab;
    double lse = rowLogSumExp(row, vocab);
    for (int64_t v = 0; v < vocab; ++v)
      g[v] = static_cast<float>(scale * (std::exp(double(row[v]) - lse) -
                                         (v == target ? 1.0 : 0.0)));
  }
  return "";
}

} // namespace kiln::runtime::ops
