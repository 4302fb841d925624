// cross_entropy: the loss against a float64 reference, the gradient against
// the float64 formula and finite differences of the float64 loss; large
// logits; bad targets fail and write nothing; thread counts.
#include "kiln/Runtime/Cpu/Loss.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

#include <cmath>

using kiln::runtime::Error;
using namespace kiln::runtime::cpu;
using namespace kiln::runtime::cpu::test;

namespace {

/// mean over rows of log(sum exp(x)) - x[target], straightforwardly.
double crossEntropyRef(const std::vector<double> &logits,
                       const std::vector<int32_t> &targets, int64_t vocab) {
  int64_t rows = static_cast<int64_t>(targets.size());
  double total = 0;
  for (int64_t n = 0; n < rows; ++n) {
    const double *x = logits.data() + n * vocab;
    double m = x[0];
    for (int64_t v = 1; v < vocab; ++v)
      m = std::max(m, x[v]);
    double sum = 0;
    for (int64_t v = 0; v < vocab; ++v)
      sum += std::exp(x[v] - m);
    total += m + std::log(sum) - x[targets[n]];
  }
  return total / rows;
}

std::vector<int32_t> randomTargets(int64_t rows, int64_t vocab, uint32_t seed) {
  std::vector<float> u = randomFloats(rows, seed, 0.0f, 1.0f);
  std::vector<int32_t> t(rows);
  for (int64_t n = 0; n < rows; ++n)
    t[n] = std::min<int32_t>(int32_t(u[n] * vocab), int32_t(vocab - 1));
  return t;
}

} // namespace

TEST(CrossEntropy, LossMatchesFloat64) {
  const int64_t rows = 31, vocab = 257;
  std::vector<float> logits = randomFloats(rows * vocab, 1, -4.0f, 4.0f);
  std::vector<int32_t> targets = randomTargets(rows, vocab, 2);
  float loss = 0;
  ASSERT_FALSE(crossEntropy(logits.data(), targets.data(), &loss, rows, vocab));
  double ref = crossEntropyRef(widen(logits), targets, vocab);
  EXPECT_NEAR(loss, ref, 1e-6 * std::fabs(ref));
}

TEST(CrossEntropy, LargeLogitsAreStable) {
  const int64_t rows = 4, vocab = 50;
  std::vector<float> logits = randomFloats(rows * vocab, 3, 1000.0f, 1010.0f);
  std::vector<int32_t> targets = randomTargets(rows, vocab, 4);
  float loss = 0;
  ASSERT_FALSE(crossEntropy(logits.data(), targets.data(), &loss, rows, vocab));
  double ref = crossEntropyRef(widen(logits), targets, vocab);
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_NEAR(loss, ref, 1e-5 * std::fabs(ref) + 1e-6);
  std::vector<float> d(rows * vocab);
  ASSERT_FALSE(crossEntropyBackward(logits.data(), targets.data(), 1.0f,
                                    d.data(), rows, vocab));
  for (float g : d)
    EXPECT_TRUE(std::isfinite(g));
}

TEST(CrossEntropy, GradientMatchesAnalyticAndFiniteDifferences) {
  const int64_t rows = 6, vocab = 11;
  std::vector<float> logits = randomFloats(rows * vocab, 5, -3.0f, 3.0f);
  std::vector<int32_t> targets = randomTargets(rows, vocab, 6);
  const float dloss = 0.75f;
  std::vector<float> d(rows * vocab);
  ASSERT_FALSE(crossEntropyBackward(logits.data(), targets.data(), dloss,
                                    d.data(), rows, vocab));

  std::vector<double> analytic(rows * vocab);
  for (int64_t n = 0; n < rows; ++n) {
    double sum = 0;
    for (int64_t v = 0; v < vocab; ++v)
      sum += std::exp(double(logits[n * vocab + v]));
    for (int64_t v = 0; v < vocab; ++v)
      analytic[n * vocab + v] =
          (std::exp(double(logits[n * vocab + v])) / sum -
           (v == targets[n] ? 1.0 : 0.0)) *
          dloss / rows;
  }
  EXPECT_LE(relErr(d, analytic), 1e-6);

  auto loss = [&](const std::vector<double> &x) {
    return dloss * crossEntropyRef(x, targets, vocab);
  };
  EXPECT_LE(relErr(d, finiteDifference(loss, widen(logits))), 1e-5);
}

TEST(CrossEntropy, GradientMayOverwriteTheLogits) {
  const int64_t rows = 5, vocab = 33;
  std::vector<float> logits = randomFloats(rows * vocab, 7);
  std::vector<int32_t> targets = randomTargets(rows, vocab, 8);
  std::vector<float> d(rows * vocab), inPlace = logits;
  ASSERT_FALSE(crossEntropyBackward(logits.data(), targets.data(), 1.0f,
                                    d.data(), rows, vocab));
  ASSERT_FALSE(crossEntropyBackward(inPlace.data(), targets.data(), 1.0f,
                                    inPlace.data(), rows, vocab));
  EXPECT_TRUE(sameBits(d, inPlace));
}

TEST(CrossEntropy, TargetsOutOfRangeFailAndWriteNothing) {
  const int64_t rows = 3, vocab = 10;
  std::vector<float> logits = randomFloats(rows * vocab, 9);
  for (int32_t bad : {-1, 10, 1 << 30}) {
    std::vector<int32_t> targets = {1, bad, 2};
    float loss = 42.0f;
    Error s = crossEntropy(logits.data(), targets.data(), &loss, rows, vocab);
    EXPECT_TRUE(s);
    EXPECT_NE(s.message().find(std::to_string(bad)), std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find("row 1"), std::string::npos) << s.message();
    EXPECT_EQ(loss, 42.0f);
    std::vector<float> d(rows * vocab, 7.0f);
    EXPECT_TRUE(crossEntropyBackward(logits.data(), targets.data(), 1.0f,
                                     d.data(), rows, vocab));
    for (float g : d)
      EXPECT_EQ(g, 7.0f);
  }
}

TEST(CrossEntropy, ThreadCountDoesNotChangeBits) {
  const int64_t rows = 96, vocab = 2048;
  std::vector<float> logits = randomFloats(rows * vocab, 10, -5.0f, 5.0f);
  std::vector<int32_t> targets = randomTargets(rows, vocab, 11);
  float l1 = 0, l2 = 0;
  std::vector<float> d1(rows * vocab), d2(rows * vocab);
  ASSERT_FALSE(crossEntropy(logits.data(), targets.data(), &l1, rows, vocab));
  ASSERT_FALSE(crossEntropyBackward(logits.data(), targets.data(), 1.0f,
                                    d1.data(), rows, vocab));
  ThreadsScope threads(2);
  ASSERT_FALSE(crossEntropy(logits.data(), targets.data(), &l2, rows, vocab));
  ASSERT_FALSE(crossEntropyBackward(logits.data(), targets.data(), 1.0f,
                                    d2.data(), rows, vocab));
  EXPECT_EQ(l1, l2);
  EXPECT_TRUE(sameBits(d1, d2));
}
