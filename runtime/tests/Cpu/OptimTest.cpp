// Gradient norm and clipping (clip and no-clip cases), AdamW against a
// float64 transcription of torch.optim.AdamW's formulas, the learning-rate
// schedule at its boundaries, and thread-count independence.
#include "kiln/Runtime/Cpu/Optim.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace kiln::runtime::cpu;
using namespace kiln::runtime::cpu::test;

namespace {

double sumSquaresRef(const std::vector<std::vector<float>> &grads) {
  double s = 0;
  for (const auto &g : grads)
    for (float x : g)
      s += double(x) * x;
  return s;
}

std::vector<FloatSpan> spans(std::vector<std::vector<float>> &grads) {
  std::vector<FloatSpan> out;
  for (auto &g : grads)
    out.push_back({g.data(), static_cast<int64_t>(g.size())});
  return out;
}

} // namespace

TEST(GradNorm, MatchesFloat64OverManyBlocks) {
  std::vector<std::vector<float>> grads = {randomFloats(200003, 1),
                                           randomFloats(7, 2),
                                           randomFloats(70001, 3)};
  std::vector<FloatSpan> s = spans(grads);
  double ref = std::sqrt(sumSquaresRef(grads));
  EXPECT_NEAR(gradNorm(s.data(), s.size()), ref, 1e-12 * ref);
  EXPECT_EQ(gradNorm(nullptr, 0), 0.0);
}

TEST(GradNorm, ThreadCountDoesNotChangeBits) {
  std::vector<float> g = randomFloats((1 << 20) + 3, 4);
  double one = sumOfSquares(g.data(), g.size());
  ThreadsScope threads(2);
  double two = sumOfSquares(g.data(), g.size());
  EXPECT_EQ(one, two);
}

TEST(ClipGradNorm, ClipsToMaxNorm) {
  std::vector<std::vector<float>> grads = {randomFloats(1000, 5, -3, 3),
                                           randomFloats(333, 6, -3, 3)};
  const std::vector<std::vector<float>> before = grads;
  std::vector<FloatSpan> s = spans(grads);
  const double maxNorm = 1.0;
  double ref = std::sqrt(sumSquaresRef(before));
  double total = clipGradNorm(s.data(), s.size(), maxNorm);
  EXPECT_NEAR(total, ref, 1e-12 * ref); // the norm before clipping

  // The factor is PyTorch's fp32 min(max_norm / (total + 1e-6), 1) ...
  float c = clipCoefficient(total, maxNorm);
  EXPECT_NEAR(c, maxNorm / (ref + 1e-6), 1e-6 * c);
  EXPECT_LT(c, 1.0f);
  // ... applied as one fp32 multiply per element.
  for (size_t t = 0; t < grads.size(); ++t)
    for (size_t i = 0; i < grads[t].size(); ++i)
      ASSERT_EQ(grads[t][i], before[t][i] * c);
  EXPECT_NEAR(std::sqrt(sumSquaresRef(grads)), maxNorm, 1e-5);
}

TEST(ClipGradNorm, LeavesSmallGradientsUntouched) {
  std::vector<std::vector<float>> grads = {randomFloats(500, 7, -0.01f, 0.01f)};
  const std::vector<std::vector<float>> before = grads;
  std::vector<FloatSpan> s = spans(grads);
  double total = clipGradNorm(s.data(), s.size(), 1.0);
  EXPECT_LT(total, 1.0);
  EXPECT_EQ(clipCoefficient(total, 1.0), 1.0f);
  EXPECT_TRUE(sameBits(grads[0], before[0]));
  // maxNorm <= 0 disables clipping whatever the norm.
  std::vector<std::vector<float>> big = {randomFloats(500, 8, -100, 100)};
  const std::vector<float> bigBefore = big[0];
  std::vector<FloatSpan> bs = spans(big);
  EXPECT_GT(clipGradNorm(bs.data(), bs.size(), 0.0), 1.0);
  EXPECT_TRUE(sameBits(big[0], bigBefore));
  EXPECT_EQ(clipCoefficient(1e9, 0.0), 1.0f);
  EXPECT_TRUE(std::isnan(clipCoefficient(NAN, 1.0)));
}

TEST(AdamW, ThreeStepsMatchFloat64Transcription) {
  const int64_t n = 257;
  AdamWConfig cfg;
  cfg.lr = 1e-2;
  cfg.beta1 = 0.9;
  cfg.beta2 = 0.95;
  cfg.eps = 1e-8;
  cfg.weightDecay = 0.1;
  // Parameters away from zero so that an elementwise rtol is meaningful.
  std::vector<float> p = randomFloats(n, 9, 0.5f, 1.5f);
  for (int64_t i = 0; i < n; i += 2)
    p[i] = -p[i];
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  std::vector<double> pd = widen(p), md(n, 0.0), vd(n, 0.0);

  for (int64_t step = 1; step <= 3; ++step) {
    std::vector<float> g = randomFloats(n, 100 + step, -2.0f, 2.0f);
    const float scale = step == 2 ? 0.5f : 1.0f; // a clipped step
    adamwStep(p.data(), g.data(), m.data(), v.data(), n, step, cfg, scale);

    double bc1 = 1 - std::pow(cfg.beta1, step);
    double bc2 = 1 - std::pow(cfg.beta2, step);
    for (int64_t i = 0; i < n; ++i) {
      double gi = double(g[i]) * scale;
      pd[i] *= 1 - cfg.lr * cfg.weightDecay;
      md[i] = cfg.beta1 * md[i] + (1 - cfg.beta1) * gi;
      vd[i] = cfg.beta2 * vd[i] + (1 - cfg.beta2) * gi * gi;
      pd[i] -= cfg.lr / bc1 * md[i] /
               (std::sqrt(vd[i]) / std::sqrt(bc2) + cfg.eps);
    }
  }
  for (int64_t i = 0; i < n; ++i)
    ASSERT_NEAR(p[i], pd[i], 1e-6 * std::fabs(pd[i])) << i;
  EXPECT_LE(relErr(m, md), 1e-6);
  EXPECT_LE(relErr(v, vd), 1e-6);
}

TEST(AdamW, GradScaleEqualsScalingTheGradientFirst) {
  const int64_t n = 100;
  AdamWConfig cfg;
  std::vector<float> p1 = randomFloats(n, 10), m1 = randomFloats(n, 11);
  std::vector<float> v1 = randomFloats(n, 12, 0.0f, 1.0f);
  std::vector<float> p2 = p1, m2 = m1, v2 = v1;
  std::vector<float> g = randomFloats(n, 13);
  const float c = 0.3719f;
  adamwStep(p1.data(), g.data(), m1.data(), v1.data(), n, 5, cfg, c);
  std::vector<float> scaled = g;
  for (float &x : scaled)
    x *= c;
  adamwStep(p2.data(), scaled.data(), m2.data(), v2.data(), n, 5, cfg);
  EXPECT_TRUE(sameBits(p1, p2));
  EXPECT_TRUE(sameBits(m1, m2));
  EXPECT_TRUE(sameBits(v1, v2));
}

TEST(AdamW, ThreadCountDoesNotChangeBits) {
  const int64_t n = 300000;
  AdamWConfig cfg;
  std::vector<float> g = randomFloats(n, 14);
  std::vector<float> p1 = randomFloats(n, 15), m1(n, 0.0f), v1(n, 0.0f);
  std::vector<float> p2 = p1, m2 = m1, v2 = v1;
  adamwStep(p1.data(), g.data(), m1.data(), v1.data(), n, 1, cfg);
  ThreadsScope threads(2);
  adamwStep(p2.data(), g.data(), m2.data(), v2.data(), n, 1, cfg);
  EXPECT_TRUE(sameBits(p1, p2));
  EXPECT_TRUE(sameBits(m1, m2));
  EXPECT_TRUE(sameBits(v1, v2));
}

TEST(LearningRate, WarmupThenCosine) {
  const double peak = 1e-3, minLr = 1e-4;
  auto lr = [&](int64_t step) {
    return learningRate(step, 10, 110, peak, minLr, true);
  };
  EXPECT_DOUBLE_EQ(lr(1), peak / 10); // the first step is not 0
  EXPECT_DOUBLE_EQ(lr(5), peak / 2);
  EXPECT_DOUBLE_EQ(lr(10), peak);
  // Cosine over 100 steps after warmup.
  EXPECT_DOUBLE_EQ(lr(11), minLr + (peak - minLr) *
                                       (1 + std::cos(M_PI * 0.01)) / 2);
  EXPECT_DOUBLE_EQ(lr(60), (peak + minLr) / 2);
  EXPECT_DOUBLE_EQ(lr(110), minLr);
  EXPECT_DOUBLE_EQ(lr(500), minLr);
  for (int64_t s = 11; s < 110; ++s)
    EXPECT_LT(lr(s + 1), lr(s));
}

TEST(LearningRate, ConstantAndNoWarmup) {
  EXPECT_DOUBLE_EQ(learningRate(3, 10, 100, 2e-3, 0, false), 6e-4);
  EXPECT_DOUBLE_EQ(learningRate(50, 10, 100, 2e-3, 0, false), 2e-3);
  EXPECT_DOUBLE_EQ(learningRate(0, 0, 100, 2e-3, 0, true), 2e-3);
  EXPECT_DOUBLE_EQ(learningRate(100, 0, 100, 2e-3, 1e-5, true), 1e-5);
  // total <= warmup: the cosine has a span of one step.
  EXPECT_DOUBLE_EQ(learningRate(11, 10, 10, 2e-3, 1e-5, true), 1e-5);
}
