//===- Optim.h - Gradient clipping, AdamW, learning-rate schedule -*- C++ -*-===//
//
// torch.nn.utils.clip_grad_norm_ followed by torch.optim.AdamW (single
// tensor, non-amsgrad, fp32 state), element for element in PyTorch's order:
//
// Clipping. total = sqrt(sum of g^2 over every element of every gradient),
// accumulated in double over fixed 64Ki-element blocks whose partial sums
// are added in order (the same for every thread count). PyTorch computes
// the coefficient with fp32 tensor arithmetic; so does clipCoefficient:
//
//   coef = (1.0f / ((float)total + 1e-6f)) * (float)maxNorm
//          (Python's `max_norm / t` on a tensor is t.reciprocal() * max_norm)
//   c    = min(coef, 1.0f);  every g *= c   (also when c is 1)
//
// maxNorm <= 0 disables clipping (c = 1); PyTorch would zero the gradients.
//
// AdamW, for step t >= 1, with the scalars in double (Python floats) and
// rounded to float where they meet a tensor:
//
//   g  = grad * gradScale                    (gradScale = c folds clipping in)
//   p *= (float)(1 - lr * wd)
//   m  = lerp(m, g, w), w = (float)(1 - beta1):  m + w (g - m) if |w| < 0.5,
//                                                else g - (g - m)(1 - w)
//   v  = v * (float)beta2 + ((float)(1 - beta2) * g) * g
//   bc1 = 1 - beta1^t, bc2 = 1 - beta2^t, stepSize = lr / bc1
//   denom = sqrt(v) / (float)sqrt(bc2) + (float)eps
//   p  = p + ((float)(-stepSize) * m) / denom
//
// Every update is per element; threads split the elements.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CPU_OPTIM_H
#define KILN_RUNTIME_CPU_OPTIM_H

#include <cstdint>

namespace kiln::runtime::cpu {

/// One gradient tensor: `size` contiguous floats.
struct FloatSpan {
  float *data = nullptr;
  int64_t size = 0;
};

/// sum of x[i]^2 over i < n, in double (blockwise as described above); the
/// piece a shard contributes before the sums are reduced across ranks.
double sumOfSquares(const float *x, int64_t n);

/// sqrt of the sum of squares of every element of every span.
double gradNorm(const FloatSpan *grads, int64_t count);

/// The fp32 factor clip_grad_norm_ multiplies by: min(coef, 1) as above,
/// or 1 when maxNorm <= 0. A NaN norm gives NaN, as in PyTorch.
float clipCoefficient(double totalNorm, double maxNorm);

/// clip_grad_norm_: scales every span by clipCoefficient (when maxNorm > 0)
/// and returns the norm before clipping.
double clipGradNorm(const FloatSpan *grads, int64_t count, double maxNorm);

/// torch.optim.AdamW's defaults except the learning rate.
struct AdamWConfig {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weightDecay = 1e-2;
};

/// One AdamW update of param, m (exp_avg) and v (exp_avg_sq), n elements
/// each, for the 1-based `step`. The gradient is read, never written.
void adamwStep(float *param, const float *grad, float *m, float *v,
               int64_t n, int64_t step, const AdamWConfig &config,
               float gradScale = 1.0f);

/// The learning rate of the 1-based `step`:
///   step <= warmupSteps:  peak * step / warmupSteps   (step 1 is not 0)
///   afterwards, with p = clamp((step - warmupSteps) /
///                              max(1, totalSteps - warmupSteps), 0, 1):
///     cosine:  minLr + (peak - minLr) * (1 + cos(pi p)) / 2
///              (peak right after warmup, minLr from totalSteps on)
///     else:    peak
/// warmupSteps <= 0 means no warmup.
double learningRate(int64_t step, int64_t warmupSteps, int64_t totalSteps,
                    double peak, double minLr, bool cosine);

} // namespace kiln::runtime::cpu

#endif // KILN_RUNTIME_CPU_OPTIM_H
