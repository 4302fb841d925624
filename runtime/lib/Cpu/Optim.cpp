//===- Optim.cpp - Gradient clipping, AdamW, learning-rate schedule -------===//
//
// Sums of squares are taken over fixed blocks of kBlock elements, each in
// double with four interleaved running sums, and the block sums are added
// in block order: the grouping depends on n alone, never on the thread
// count. AdamW is one independent update per element.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Cpu/Optim.h"

#include "Parallel.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace kiln::runtime::cpu {

using detail::parallelFor;

namespace {

constexpr int64_t kBlock = 1 << 16;
constexpr double kPi = 3.14159265358979323846;

double blockSumOfSquares(const float *x, int64_t n) {
  double s[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int l = 0; l < 4; ++l)
      s[l] += static_cast<double>(x[i + l]) * x[i + l];
  for (; i < n; ++i)
    s[i % 4] += static_cast<double>(x[i]) * x[i];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

} // namespace

double sumOfSquares(const float *x, int64_t n) {
  if (n <= 0)
    return 0.0;
  int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(blocks);
  double *part = partial.data();
  parallelFor(blocks, 4, [=](int64_t b, int64_t e) {
    for (int64_t blk = b; blk < e; ++blk) {
      int64_t lo = blk * kBlock, hi = std::min(n, lo + kBlock);
      part[blk] = blockSumOfSquares(x + lo, hi - lo);
    }
  });
  double total = 0;
  for (double p : partial)
    total += p;
  return total;
}

double gradNorm(const FloatSpan *grads, int64_t count) {
  double total = 0;
  for (int64_t g = 0; g < count; ++g)
    total += sumOfSquares(grads[g].data, grads[g].size);
  return std::sqrt(total);
}

float clipCoefficient(double totalNorm, double maxNorm) {
  if (!(maxNorm > 0))
    return 1.0f;
  // PyTorch: clip_coef = max_norm / (total_norm + 1e-6) on an fp32 tensor,
  // i.e. (total + 1e-6f).reciprocal() * max_norm; then clamp(max=1.0),
  // which keeps a NaN.
  float reciprocal = 1.0f / (static_cast<float>(totalNorm) + 1e-6f);
  float coef = reciprocal * static_cast<float>(maxNorm);
  return std::isnan(coef) ? coef : std::min(coef, 1.0f);
}

double clipGradNorm(const FloatSpan *grads, int64_t count, double maxNorm) {
  double total = gradNorm(grads, count);
  if (!(maxNorm > 0))
    return total;
  float c = clipCoefficient(total, maxNorm);
  for (int64_t g = 0; g < count; ++g) {
    float *x = grads[g].data;
    parallelFor(grads[g].size, kBlock, [=](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        x[i] *= c;
    });
  }
  return total;
}

void adamwStep(float *param, const float *grad, float *m, float *v,
               int64_t n, int64_t step, const AdamWConfig &config,
               float gradScale) {
  // Python-float (double) scalars, rounded to float where a tensor op
  // receives them.
  const double t = static_cast<double>(step);
  const double bc1 = 1.0 - std::pow(config.beta1, t);
  const double bc2 = 1.0 - std::pow(config.beta2, t);
  const float decay = static_cast<float>(1.0 - config.lr * config.weightDecay);
  const float w = static_cast<float>(1.0 - config.beta1);
  const bool smallWeight = std::fabs(w) < 0.5f;
  const float beta2 = static_cast<float>(config.beta2);
  const float oneMinusBeta2 = static_cast<float>(1.0 - config.beta2);
  const float negStepSize = static_cast<float>(-(config.lr / bc1));
  const float bc2Sqrt = static_cast<float>(std::sqrt(bc2));
  const float eps = static_cast<float>(config.eps);

  parallelFor(n, kBlock, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      float g = grad[i] * gradScale;
      float p = param[i] * decay;
      // exp_avg.lerp_(grad, 1 - beta1), ATen's two-branch lerp.
      float mi = m[i];
      mi = smallWeight ? mi + w * (g - mi) : g - (g - mi) * (1.0f - w);
      // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2).
      float vi = v[i] * beta2;
      vi = vi + oneMinusBeta2 * g * g;
      // denom = (exp_avg_sq.sqrt() / sqrt(bc2)).add_(eps);
      // param.addcdiv_(exp_avg, denom, value=-step_size).
      float denom = std::sqrt(vi) / bc2Sqrt + eps;
      p = p + negStepSize * mi / denom;
      m[i] = mi;
      v[i] = vi;
      param[i] = p;
    }
  });
}

double learningRate(int64_t step, int64_t warmupSteps, int64_t totalSteps,
                    double peak, double minLr, bool cosine) {
  if (warmupSteps > 0 && step <= warmupSteps)
    return peak * static_cast<double>(step) / static_cast<double>(warmupSteps);
  if (!cosine)
    return peak;
  int64_t warmup = std::max<int64_t>(warmupSteps, 0);
  double span = static_cast<double>(std::max<int64_t>(1, totalSteps - warmup));
  double p = static_cast<double>(step - warmup) / span;
  p = std::clamp(p, 0.0, 1.0);
  return minLr + (peak - minLr) * (1.0 + std::cos(kPi * p)) / 2.0;
}

} // namespace kiln::runtime::cpu
