//===- ElementwiseOps.cpp - Elementwise, layout and optimizer ops ---------===//

#include "OpsInternal.h"

#include <cmath>
#include <cstring>

namespace kiln::runtime::ops {

namespace {
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
} // namespace

KILN_CPU_OP(silu) {
  const float *x = in[0].f32();
  float *y = out[0].f32();
  for (int64_t i = 0, n = in[0].numElements(); i < n; ++i)
    y[i] = x[i] * sigmoid(x[i]);
  return "";
}

KILN_CPU_OP(siluGrad) {
  const float *g = in[0].f32(), *x = in[1].f32();
  float *dx = out[0].f32();
  for (int64_t i = 0, n = in[0].numElements(); i < n; ++i) {
    float s = sigmoid(x[i]);
    dx[i] = g[i] * s * (1.0f + x[i] * (1.0f - s));
  }
  return "";
}

KILN_CPU_OP(mul) {
  const float *a = in[0].f32(), *b = in[1].f32();
  float *y = out[0].f32();
  for (int64_t i = 0, n = in[0].numElements(); i < n; ++i)
    y[i] = a[i] * b[i];
  return "";
}

KILN_CPU_OP(add) {
  const float *a = in[0].f32(), *b = in[1].f32();
  float *y = out[0].f32();
  for (int64_t i = 0, n = in[0].numElements(); i < n; ++i)
    y[i] = a[i] + b[i];
  return "";
}

KILN_CPU_OP(copy) {
  std::memmove(out[0].f32(), in[0].f32(),
               in[0].numElements() * sizeof(float));
  return "";
}

KILN_CPU_OP(transpose) {
  const std::vector<int64_t> &perm =
      std::get<std::vector<int64_t>>(step.attrs.at("permutation"));
  const View &x = in[0];
  size_t rank = x.shape.size();
  std::vector<int64_t> inStride(rank, 1);
  for (size_t d = rank - 1; d > 0; --d)
    inStride[d - 1] = inStride[d] * x.shape[d];
  std::vector<int64_t> index(rank, 0);
  const std::vector<int64_t> &outShape = out[0].shape;
  for (int64_t o = 0, n = out[0].numElements(); o < n; ++o) {
    int64_t src = 0;
    for (size_t d = 0; d < rank; ++d)
      src += index[d] * inStride[perm[d]];
    out[0].f32()[o] = x.f32()[src];
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < outShape[d])
        break;
      index[d] = 0;
    }
  }
  return "";
}

KILN_CPU_OP(gradNorm) {
  double sum = 0;
  for (const View &g : in)
    for (int64_t i = 0, n = g.numElements(); i < n; ++i)
      sum += double(g.f32()[i]) * g.f32()[i];
  out[0].f32()[0] = static_cast<float>(std::sqrt(sum));
  return "";
}

KILN_CPU_OP(lrSchedule) {
  int64_t s = in[0].i64()[0];
  double peak = step.f64("peak"), minLr = step.f64("min_lr");
  int64_t warmup = step.i64("warmup_steps"), total = step.i64("total_steps");
  double lr;
  if (s <= warmup && warmup > 0) {
    lr = peak * double(s) / double(warmup);
  } else if (step.str("decay") == "constant") {
    lr = peak;
  } else {
    double p = double(s - warmup) / double(std::max<int64_t>(1, total - warmup));
    p = std::min(1.0, std::max(0.0, p));
    lr = minLr + (peak - minLr) * 0.5 * (1.0 + std::cos(M_PI * p));
  }
  out[0].f32()[0] = static_cast<float>(lr);
  return "";
}

KILN_CPU_OP(adamw) {
  // Operands: param, grad, exp_avg, exp_avg_sq, grad_norm, lr, step; the
  // three results alias param, exp_avg, exp_avg_sq (updated in place).
  double beta1 = step.f64("beta1"), beta2 = step.f64("beta2");
  double eps = step.f64("eps"), wd = step.f64("weight_decay");
  double maxNorm = step.f64("max_norm");
  double norm = in[4].f32()[0], lr = in[5].f32()[0];
  int64_t t = in[6].i64()[0];
  // torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6),
  // clamped to 1, computed in f32 and multiplied into the gradient.
  float coef = 1.0f;
  if (maxNorm > 0)
    coef = std::min(1.0f, static_cast<float>(maxNorm) /
                              (static_cast<float>(norm) + 1e-6f));
  // torch.optim.AdamW's scalars are Python floats (double).
  double bc1 = 1.0 - std::pow(beta1, double(t));
  double bc2 = 1.0 - std::pow(beta2, double(t));
  float stepSize = static_cast<float>(lr / bc1);
  float bc2Sqrt = static_cast<float>(std::sqrt(bc2));
  float decay = static_cast<float>(1.0 - lr * wd);
  float b1 = static_cast<float>(beta1), b2 = static_cast<float>(beta2);
  float e = static_cast<float>(eps);
  const float *g = in[1].f32();
  float *p = out[0].f32(), *m = out[1].f32(), *v = out[2].f32();
  const float *pIn = in[0].f32(), *mIn = in[2].f32(), *vIn = in[3].f32();
  for (int64_t i = 0, n = in[0].numElements(); i < n; ++i) {
    float gi = maxNorm > 0 ? g[i] * coef : g[i];
    float pi = pIn[i] * decay;
    // exp_avg.lerp_(grad, 1 - beta1); exp_avg_sq.mul_(beta2).addcmul_(g, g, 1 - beta2)
    float mi = mIn[i] + (1.0f - b1) * (gi - mIn[i]);
    float vi = vIn[i] * b2 + (1.0f - b2) * gi * gi;
    float denom = std::sqrt(vi) / bc2Sqrt + e;
    p[i] = pi - stepSize * (mi / denom);
    m[i] = mi;
    v[i] = vi;
  }
  return "";
}

} // namespace kiln::runtime::ops
