// rms_norm: forward and saved rstd against a float64 reference; dx and dw
// against the float64 analytic gradient and against finite differences of
// the float64 forward; recomputing rstd, accumulating dw, thread counts.
#include "kiln/Runtime/Cpu/Norm.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace kiln::runtime::cpu;
using namespace kiln::runtime::cpu::test;

namespace {

constexpr double kEps = 1e-5;

/// y = x / sqrt(mean(x^2) + eps) * w, in double.
std::vector<double> rmsNormRef(const std::vector<double> &x,
                               const std::vector<double> &w, int64_t rows,
                               int64_t dim, std::vector<double> *rstd = nullptr) {
  std::vector<double> y(x.size());
  for (int64_t t = 0; t < rows; ++t) {
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i)
      ss += x[t * dim + i] * x[t * dim + i];
    double r = 1.0 / std::sqrt(ss / dim + kEps);
    if (rstd)
      rstd->push_back(r);
    for (int64_t i = 0; i < dim; ++i)
      y[t * dim + i] = x[t * dim + i] * r * w[i];
  }
  return y;
}

struct Problem {
  int64_t rows, dim;
  std::vector<float> x, w, dy;
  Problem(int64_t r, int64_t d, uint32_t seed)
      : rows(r), dim(d), x(randomFloats(r * d, seed, -2.0f, 2.0f)),
        w(randomFloats(d, seed + 1, 0.5f, 1.5f)),
        dy(randomFloats(r * d, seed + 2)) {}
};

} // namespace

TEST(RmsNorm, ForwardMatchesFloat64) {
  Problem p(13, 96, 1);
  std::vector<float> y(p.x.size()), rstd(p.rows);
  rmsNorm(p.x.data(), p.w.data(), y.data(), rstd.data(), p.rows, p.dim, kEps);
  std::vector<double> refRstd;
  std::vector<double> ref =
      rmsNormRef(widen(p.x), widen(p.w), p.rows, p.dim, &refRstd);
  EXPECT_LE(relErr(y, ref), 1e-6);
  EXPECT_LE(relErr(rstd, refRstd), 1e-7);
}

TEST(RmsNorm, BackwardMatchesAnalyticAndFiniteDifferences) {
  Problem p(5, 12, 4);
  std::vector<float> y(p.x.size()), rstd(p.rows);
  rmsNorm(p.x.data(), p.w.data(), y.data(), rstd.data(), p.rows, p.dim, kEps);
  std::vector<float> dx(p.x.size()), dw(p.dim);
  rmsNormBackward(p.x.data(), p.w.data(), rstd.data(), p.dy.data(), dx.data(),
                  dw.data(), p.rows, p.dim, kEps, /*accumulateDw=*/false);

  // Analytic, in double: with g = dy w, dx = r (g - x r^2 mean(g x)).
  std::vector<double> dxRef(p.x.size()), dwRef(p.dim, 0.0);
  for (int64_t t = 0; t < p.rows; ++t) {
    const int64_t o = t * p.dim;
    double ss = 0, gx = 0;
    for (int64_t i = 0; i < p.dim; ++i) {
      ss += double(p.x[o + i]) * p.x[o + i];
      gx += double(p.dy[o + i]) * p.w[i] * p.x[o + i];
    }
    double r = 1.0 / std::sqrt(ss / p.dim + kEps);
    for (int64_t i = 0; i < p.dim; ++i) {
      double g = double(p.dy[o + i]) * p.w[i];
      dxRef[o + i] = r * (g - p.x[o + i] * r * r * gx / p.dim);
      dwRef[i] += double(p.dy[o + i]) * p.x[o + i] * r;
    }
  }
  EXPECT_LE(relErr(dx, dxRef), 1e-6);
  EXPECT_LE(relErr(dw, dwRef), 1e-6);

  // Finite differences of sum(dy * y) with respect to x and w.
  std::vector<double> xd = widen(p.x), wd = widen(p.w);
  auto byX = [&](const std::vector<double> &xs) {
    return project(rmsNormRef(xs, wd, p.rows, p.dim), p.dy);
  };
  auto byW = [&](const std::vector<double> &ws) {
    return project(rmsNormRef(xd, ws, p.rows, p.dim), p.dy);
  };
  EXPECT_LE(relErr(dx, finiteDifference(byX, xd)), 1e-5);
  EXPECT_LE(relErr(dw, finiteDifference(byW, wd)), 1e-5);
}

TEST(RmsNorm, RecomputedRstdGivesTheSameBits) {
  Problem p(9, 40, 7);
  std::vector<float> y(p.x.size()), rstd(p.rows);
  rmsNorm(p.x.data(), p.w.data(), y.data(), rstd.data(), p.rows, p.dim, kEps);
  std::vector<float> dx1(p.x.size()), dw1(p.dim), dx2(p.x.size()), dw2(p.dim);
  rmsNormBackward(p.x.data(), p.w.data(), rstd.data(), p.dy.data(),
                  dx1.data(), dw1.data(), p.rows, p.dim, kEps, false);
  rmsNormBackward(p.x.data(), p.w.data(), nullptr, p.dy.data(), dx2.data(),
                  dw2.data(), p.rows, p.dim, kEps, false);
  EXPECT_TRUE(sameBits(dx1, dx2));
  EXPECT_TRUE(sameBits(dw1, dw2));
}

TEST(RmsNorm, AccumulateAddsToDw) {
  Problem p(6, 16, 10);
  std::vector<float> dx(p.x.size()), dw(p.dim), acc = randomFloats(p.dim, 13);
  rmsNormBackward(p.x.data(), p.w.data(), nullptr, p.dy.data(), dx.data(),
                  dw.data(), p.rows, p.dim, kEps, false);
  std::vector<float> summed = acc;
  rmsNormBackward(p.x.data(), p.w.data(), nullptr, p.dy.data(), dx.data(),
                  summed.data(), p.rows, p.dim, kEps, true);
  for (int64_t i = 0; i < p.dim; ++i)
    EXPECT_NEAR(summed[i], acc[i] + dw[i], 1e-6f * (1 + std::fabs(dw[i])));
}

TEST(RmsNorm, ThreadCountAndInPlaceDoNotChangeBits) {
  Problem p(600, 256, 20);
  const int64_t n = p.rows * p.dim;
  // One thread, separate outputs.
  std::vector<float> y1(n), rstd1(p.rows), dx1(n), dw1(p.dim);
  rmsNorm(p.x.data(), p.w.data(), y1.data(), rstd1.data(), p.rows, p.dim,
          kEps);
  rmsNormBackward(p.x.data(), p.w.data(), rstd1.data(), p.dy.data(),
                  dx1.data(), dw1.data(), p.rows, p.dim, kEps, false);
  // Two threads, each output written over its input.
  ThreadsScope threads(2);
  std::vector<float> y2 = p.x, rstd2(p.rows), dx2 = p.dy, dw2(p.dim);
  rmsNorm(y2.data(), p.w.data(), y2.data(), rstd2.data(), p.rows, p.dim,
          kEps);
  rmsNormBackward(p.x.data(), p.w.data(), rstd2.data(), dx2.data(),
                  dx2.data(), dw2.data(), p.rows, p.dim, kEps, false);
  EXPECT_TRUE(sameBits(y1, y2));
  EXPECT_TRUE(sameBits(rstd1, rstd2));
  EXPECT_TRUE(sameBits(dx1, dx2));
  EXPECT_TRUE(sameBits(dw1, dw2));
}
