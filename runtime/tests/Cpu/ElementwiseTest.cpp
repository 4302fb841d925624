// silu, mul, add: values against float64 formulas, silu's gradient also
// against finite differences of the float64 forward; in-place use; thread
// count independence.
#include "kiln/Runtime/Cpu/Elementwise.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace kiln::runtime::cpu;
using namespace kiln::runtime::cpu::test;

namespace {

double siluRef(double x) { return x / (1.0 + std::exp(-x)); }

double siluGradRef(double x) {
  double s = 1.0 / (1.0 + std::exp(-x));
  return s + x * s * (1.0 - s); // d/dx of x * s(x)
}

} // namespace

TEST(Silu, ForwardMatchesFloat64) {
  std::vector<float> x = randomFloats(1000, 1, -8.0f, 8.0f);
  x[0] = -100.0f; // exp(-x) overflows to inf: y must be -0, not NaN
  x[1] = 100.0f;
  x[2] = 0.0f;
  std::vector<float> y(x.size());
  silu(x.data(), y.data(), x.size());
  std::vector<double> ref(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    ref[i] = siluRef(x[i]);
  EXPECT_LE(relErr(y, ref), 1e-6);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 100.0f);
  EXPECT_EQ(y[2], 0.0f);
}

TEST(Silu, BackwardMatchesAnalyticAndFiniteDifferences) {
  std::vector<float> x = randomFloats(64, 2, -6.0f, 6.0f);
  std::vector<float> dy = randomFloats(64, 3);
  std::vector<float> dx(x.size());
  siluBackward(x.data(), dy.data(), dx.data(), x.size());

  std::vector<double> analytic(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    analytic[i] = dy[i] * siluGradRef(x[i]);
  EXPECT_LE(relErr(dx, analytic), 1e-6);

  auto loss = [&](const std::vector<double> &xs) {
    std::vector<double> y(xs.size());
    for (size_t i = 0; i < xs.size(); ++i)
      y[i] = siluRef(xs[i]);
    return project(y, dy);
  };
  EXPECT_LE(relErr(dx, finiteDifference(loss, widen(x))), 1e-6);
}

TEST(Silu, InPlaceAndThreadIndependent) {
  std::vector<float> x = randomFloats(300000, 4, -5.0f, 5.0f);
  std::vector<float> dy = randomFloats(x.size(), 5);
  std::vector<float> y1(x.size()), dx1(x.size());
  silu(x.data(), y1.data(), x.size());
  siluBackward(x.data(), dy.data(), dx1.data(), x.size());

  ThreadsScope threads(2);
  std::vector<float> y2 = x, dx2 = dy;
  silu(y2.data(), y2.data(), y2.size());
  siluBackward(x.data(), dx2.data(), dx2.data(), x.size());
  EXPECT_TRUE(sameBits(y1, y2));
  EXPECT_TRUE(sameBits(dx1, dx2));
}

TEST(MulAdd, ForwardAndBackwardAreCorrectlyRounded) {
  // A single fp32 product or sum is the correctly rounded double result.
  std::vector<float> a = randomFloats(257, 6, -3.0f, 3.0f);
  std::vector<float> b = randomFloats(257, 7, -3.0f, 3.0f);
  std::vector<float> dy = randomFloats(257, 8);
  int64_t n = static_cast<int64_t>(a.size());
  std::vector<float> prod(n), sum(n), da(n), db(n), sa(n), sb(n);
  mul(a.data(), b.data(), prod.data(), n);
  add(a.data(), b.data(), sum.data(), n);
  mulBackward(a.data(), b.data(), dy.data(), da.data(), db.data(), n);
  addBackward(dy.data(), sa.data(), sb.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(prod[i], static_cast<float>(double(a[i]) * b[i]));
    EXPECT_EQ(sum[i], static_cast<float>(double(a[i]) + b[i]));
    EXPECT_EQ(da[i], static_cast<float>(double(dy[i]) * b[i]));
    EXPECT_EQ(db[i], static_cast<float>(double(dy[i]) * a[i]));
    EXPECT_EQ(sa[i], dy[i]);
    EXPECT_EQ(sb[i], dy[i]);
  }
}

TEST(MulAdd, BackwardMayOverwriteItsInputs) {
  std::vector<float> a = randomFloats(100, 9), b = randomFloats(100, 10);
  std::vector<float> dy = randomFloats(100, 11);
  std::vector<float> da(100), db(100);
  mulBackward(a.data(), b.data(), dy.data(), da.data(), db.data(), 100);
  // da written over dy, db over a.
  std::vector<float> g = dy, a2 = a;
  mulBackward(a2.data(), b.data(), g.data(), g.data(), a2.data(), 100);
  EXPECT_TRUE(sameBits(g, da));
  EXPECT_TRUE(sameBits(a2, db));
  std::vector<float> g2 = dy, other(100);
  addBackward(g2.data(), g2.data(), other.data(), 100);
  EXPECT_TRUE(sameBits(g2, dy));
  EXPECT_TRUE(sameBits(other, dy));
}
