// linear: y = x W^T, dx = dy W, dW = dy^T x against float64 loops and
// finite differences of the float64 forward; accumulation; zero sizes;
// thread counts.
#include "kiln/Runtime/Cpu/Linear.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

using namespace kiln::runtime::cpu;
using namespace kiln::runtime::cpu::test;

namespace {

/// y [m, n] = x [m, k] W^T, W [n, k], in double.
std::vector<double> linearRef(const std::vector<double> &x,
                              const std::vector<double> &w, int64_t m,
                              int64_t k, int64_t n) {
  std::vector<double> y(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t l = 0; l < k; ++l)
        y[i * n + j] += x[i * k + l] * w[j * k + l];
  return y;
}

} // namespace

TEST(Linear, ForwardMatchesFloat64) {
  const int64_t m = 37, k = 70, n = 23;
  std::vector<float> x = randomFloats(m * k, 1), w = randomFloats(n * k, 2);
  std::vector<float> y(m * n);
  linear(x.data(), w.data(), y.data(), m, k, n);
  EXPECT_LE(relErr(y, linearRef(widen(x), widen(w), m, k, n)), 1e-6);
}

TEST(Linear, BackwardMatchesAnalyticAndFiniteDifferences) {
  const int64_t m = 5, k = 7, n = 3;
  std::vector<float> x = randomFloats(m * k, 3), w = randomFloats(n * k, 4);
  std::vector<float> dy = randomFloats(m * n, 5);
  std::vector<float> dx(m * k), dw(n * k);
  linearBackwardInput(dy.data(), w.data(), dx.data(), m, k, n, false);
  linearBackwardWeight(dy.data(), x.data(), dw.data(), m, k, n, false);

  std::vector<double> dxRef(m * k, 0.0), dwRef(n * k, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t l = 0; l < k; ++l) {
        dxRef[i * k + l] += double(dy[i * n + j]) * w[j * k + l];
        dwRef[j * k + l] += double(dy[i * n + j]) * x[i * k + l];
      }
  EXPECT_LE(relErr(dx, dxRef), 1e-6);
  EXPECT_LE(relErr(dw, dwRef), 1e-6);

  std::vector<double> xd = widen(x), wd = widen(w);
  auto byX = [&](const std::vector<double> &xs) {
    return project(linearRef(xs, wd, m, k, n), dy);
  };
  auto byW = [&](const std::vector<double> &ws) {
    return project(linearRef(xd, ws, m, k, n), dy);
  };
  EXPECT_LE(relErr(dx, finiteDifference(byX, xd)), 1e-5);
  EXPECT_LE(relErr(dw, finiteDifference(byW, wd)), 1e-5);
}

TEST(Linear, AccumulateAddsTheProduct) {
  const int64_t m = 9, k = 11, n = 6;
  std::vector<float> x = randomFloats(m * k, 6), w = randomFloats(n * k, 7);
  std::vector<float> dy = randomFloats(m * n, 8);
  std::vector<float> dx(m * k), dw(n * k);
  linearBackwardInput(dy.data(), w.data(), dx.data(), m, k, n, false);
  linearBackwardWeight(dy.data(), x.data(), dw.data(), m, k, n, false);
  std::vector<float> dxAcc = randomFloats(m * k, 9), dwAcc = randomFloats(n * k, 10);
  std::vector<double> dxWant(m * k), dwWant(n * k);
  for (int64_t i = 0; i < m * k; ++i)
    dxWant[i] = double(dxAcc[i]) + dx[i];
  for (int64_t i = 0; i < n * k; ++i)
    dwWant[i] = double(dwAcc[i]) + dw[i];
  linearBackwardInput(dy.data(), w.data(), dxAcc.data(), m, k, n, true);
  linearBackwardWeight(dy.data(), x.data(), dwAcc.data(), m, k, n, true);
  EXPECT_LE(relErr(dxAcc, dxWant), 1e-6);
  EXPECT_LE(relErr(dwAcc, dwWant), 1e-6);
}

TEST(Linear, ZeroInnerDimensionGivesZerosOrLeavesTheSum) {
  std::vector<float> y(6, 5.0f), dw(6, 5.0f);
  float dummy = 0.0f;
  linear(&dummy, &dummy, y.data(), 2, 0, 3);
  for (float v : y)
    EXPECT_EQ(v, 0.0f);
  // dW [3, 2] from zero rows: nothing to add when accumulating.
  linearBackwardWeight(&dummy, &dummy, dw.data(), 0, 2, 3, true);
  for (float v : dw)
    EXPECT_EQ(v, 5.0f);
  linearBackwardWeight(&dummy, &dummy, dw.data(), 0, 2, 3, false);
  for (float v : dw)
    EXPECT_EQ(v, 0.0f);
}

// OpenBLAS may give other bits for another thread count (its blocking
// follows the thread count), so the guarantee is per thread count.
TEST(Linear, SameThreadCountSameBits) {
  const int64_t m = 256, k = 320, n = 288;
  std::vector<float> x = randomFloats(m * k, 11), w = randomFloats(n * k, 12);
  std::vector<float> dy = randomFloats(m * n, 13);
  auto run = [&](std::vector<float> &y, std::vector<float> &dx,
                 std::vector<float> &dw) {
    y.resize(m * n);
    dx.resize(m * k);
    dw.resize(n * k);
    linear(x.data(), w.data(), y.data(), m, k, n);
    linearBackwardInput(dy.data(), w.data(), dx.data(), m, k, n, false);
    linearBackwardWeight(dy.data(), x.data(), dw.data(), m, k, n, false);
  };
  std::vector<float> y1, dx1, dw1, y2, dx2, dw2;
  {
    ThreadsScope threads(2);
    run(y1, dx1, dw1);
  }
  {
    ThreadsScope threads(2);
    run(y2, dx2, dw2);
  }
  EXPECT_TRUE(sameBits(y1, y2));
  EXPECT_TRUE(sameBits(dx1, dx2));
  EXPECT_TRUE(sameBits(dw1, dw2));
}
