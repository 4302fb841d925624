// linear: y = x W^T, dx = dy W, dW = dy^T x against float64 loops and
// finite differences of the float64 forward; accumulation; zero sizes;
// thread counts.
#include "kiln/Runtime/Cpu/Fp8.h"
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

namespace {
/// Quantizes `x` (rows x cols) with one scale per row (or one for all):
/// scale = fmax / amax, codes = the saturating cast of x * scale; returns
/// the codes' values (exact in f32), and the scales.
struct Fp8Operand {
  std::vector<float> values, scales;
};
Fp8Operand quantize(const std::vector<float> &x, int64_t rows, int64_t cols,
                    bool e4m3, bool perRow) {
  float fmax = e4m3 ? 448.0f : 57344.0f;
  Fp8Operand out;
  out.values.resize(x.size());
  int64_t groups = perRow ? rows : 1, per = perRow ? cols : rows * cols;
  for (int64_t g = 0; g < groups; ++g) {
    float amax = 0;
    for (int64_t i = 0; i < per; ++i)
      amax = std::max(amax, std::fabs(x[g * per + i]));
    float scale = fmax / std::max(amax, 1e-12f);
    out.scales.push_back(scale);
    for (int64_t i = 0; i < per; ++i) {
      float v = x[g * per + i] * scale;
      out.values[g * per + i] =
          e4m3 ? fromE4m3(toE4m3(v)) : fromE5m2(toE5m2(v));
    }
  }
  return out;
}
} // namespace

// The scaled GEMM against fp64 on the unquantized operands: every output
// within the bound the FP8 roundings allow. Per element, a normal code is
// within u |x| s (u = 2^-4 for e4m3, 2^-3 for e5m2) and a subnormal within
// half its spacing (2^-10 and 2^-17) of x s; the fp32 sum adds at most
// k 2^-24 of the sum of |products|.
TEST(Linear, ScaledMatmulIsWithinTheFp8BoundOfFp64) {
  const int64_t m = 48, k = 96, n = 40;
  std::mt19937 rng(11);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (bool perRow : {false, true})
    for (bool e5m2Left : {false, true}) {
      std::vector<float> a(m * k), b(n * k);
      for (float &v : a)
        v = d(rng) * (perRow ? 1.0f : 0.01f);
      for (float &v : b)
        v = d(rng) * 0.05f;
      a[5] = 1e-7f; // lands on subnormal codes
      Fp8Operand qa = quantize(a, m, k, !e5m2Left, perRow);
      Fp8Operand qb = quantize(b, n, k, true, perRow);
      std::vector<float> y(m * n);
      scaledMatmul(qa.values.data(), qa.scales.data(), perRow,
                        qb.values.data(), qb.scales.data(), perRow, y.data(),
                        m, k, n);
      double ua = e5m2Left ? 0x1p-3 : 0x1p-4, ub = 0x1p-4;
      double ha = e5m2Left ? 0x1p-17 : 0x1p-10, hb = 0x1p-10;
      double worst = 0;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double sa = qa.scales[perRow ? i : 0], sb = qb.scales[perRow ? j : 0];
          double exact = 0, bound = 0, magnitude = 0;
          for (int64_t p = 0; p < k; ++p) {
            double x = a[i * k + p], w = b[j * k + p];
            double ex = std::max(ua * std::fabs(x), ha / sa);
            double ew = std::max(ub * std::fabs(w), hb / sb);
            exact += x * w;
            bound += ex * std::fabs(w) + std::fabs(x) * ew + ex * ew;
            magnitude += (std::fabs(x) + ex) * (std::fabs(w) + ew);
          }
          bound += k * 0x1p-24 * magnitude + 4 * 0x1p-24 * std::fabs(exact);
          double err = std::fabs(y[i * n + j] - exact);
          EXPECT_LE(err, bound) << i << "," << j;
          worst = std::max(worst, err / bound);
        }
      // The bound is not vacuous: errors use a fair part of it.
      EXPECT_GT(worst, 0.05) << "perRow " << perRow;
    }
}

// Dividing the scales out is what makes the result the product of the
// unscaled operands: with scale 1 and exact codes it is the plain GEMM.
TEST(Linear, ScaledMatmulDividesOutEachRowsScale) {
  const int64_t m = 2, k = 16, n = 3;
  std::vector<float> a(m * k, 1.0f), b(n * k, 2.0f), y(m * n);
  std::vector<float> sa{2.0f, 4.0f}, sb{1.0f, 0.5f, 8.0f};
  scaledMatmul(a.data(), sa.data(), true, b.data(), sb.data(), true,
                    y.data(), m, k, n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      EXPECT_EQ(y[i * n + j], 32.0f / (sa[i] * sb[j])) << i << "," << j;
}
