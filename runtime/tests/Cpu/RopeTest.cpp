// rope (rotate-half): forward against a float64 reference written as a
// complex rotation; the gradient against finite differences of it; the
// backward undoes the forward; in place; thread counts.
#include "kiln/Runtime/Cpu/Rope.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <complex>

using namespace kiln::runtime::cpu;
using namespace kiln::runtime::cpu::test;

namespace {

struct Shape {
  int64_t batch, seq, heads, dim;
  int64_t size() const { return batch * seq * heads * dim; }
};

/// Pairs (x[i], x[i + dim/2]) as complex numbers times exp(i s f_i).
std::vector<double> ropeRef(const std::vector<double> &x, const Shape &s,
                            double theta) {
  std::vector<double> y(x.size());
  int64_t half = s.dim / 2;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t p = 0; p < s.seq; ++p)
      for (int64_t h = 0; h < s.heads; ++h) {
        int64_t o = ((b * s.seq + p) * s.heads + h) * s.dim;
        for (int64_t i = 0; i < half; ++i) {
          double freq = 1.0 / std::pow(theta, double(2 * i) / double(s.dim));
          std::complex<double> z(x[o + i], x[o + i + half]);
          z *= std::polar(1.0, double(p) * freq);
          y[o + i] = z.real();
          y[o + i + half] = z.imag();
        }
      }
  return y;
}

} // namespace

TEST(Rope, ForwardMatchesFloat64) {
  const Shape s{2, 17, 3, 16};
  std::vector<float> x = randomFloats(s.size(), 1);
  std::vector<float> y(s.size());
  rope(x.data(), y.data(), s.batch, s.seq, s.heads, s.dim, 10000.0);
  EXPECT_LE(relErr(y, ropeRef(widen(x), s, 10000.0)), 1e-6);
}

TEST(Rope, LongSequenceStaysAccurate) {
  // Angles up to 4095 radians: computed in double, so no loss at the end.
  const Shape s{1, 4096, 1, 32};
  std::vector<float> x = randomFloats(s.size(), 2);
  std::vector<float> y(s.size());
  rope(x.data(), y.data(), s.batch, s.seq, s.heads, s.dim, 500000.0);
  EXPECT_LE(relErr(y, ropeRef(widen(x), s, 500000.0)), 1e-6);
}

TEST(Rope, PositionZeroIsTheIdentity) {
  const Shape s{1, 1, 2, 8};
  std::vector<float> x = randomFloats(s.size(), 3), y(s.size());
  rope(x.data(), y.data(), s.batch, s.seq, s.heads, s.dim, 10000.0);
  EXPECT_TRUE(sameBits(x, y));
}

TEST(Rope, BackwardMatchesFiniteDifferences) {
  const Shape s{2, 5, 3, 8};
  std::vector<float> x = randomFloats(s.size(), 4);
  std::vector<float> dy = randomFloats(s.size(), 5), dx(s.size());
  ropeBackward(dy.data(), dx.data(), s.batch, s.seq, s.heads, s.dim, 10000.0);
  auto loss = [&](const std::vector<double> &xs) {
    return project(ropeRef(xs, s, 10000.0), dy);
  };
  EXPECT_LE(relErr(dx, finiteDifference(loss, widen(x))), 1e-5);
}

TEST(Rope, BackwardUndoesForwardInPlace) {
  const Shape s{2, 33, 2, 64};
  std::vector<float> x = randomFloats(s.size(), 6);
  std::vector<float> y = x;
  rope(y.data(), y.data(), s.batch, s.seq, s.heads, s.dim, 10000.0);
  ropeBackward(y.data(), y.data(), s.batch, s.seq, s.heads, s.dim, 10000.0);
  EXPECT_LE(relErr(y, widen(x)), 1e-6);
}

TEST(Rope, ThreadCountDoesNotChangeBits) {
  const Shape s{2, 128, 4, 64};
  std::vector<float> x = randomFloats(s.size(), 7);
  std::vector<float> y1(s.size()), y2(s.size()), d1(s.size()), d2(s.size());
  rope(x.data(), y1.data(), s.batch, s.seq, s.heads, s.dim, 10000.0);
  ropeBackward(x.data(), d1.data(), s.batch, s.seq, s.heads, s.dim, 10000.0);
  ThreadsScope threads(2);
  rope(x.data(), y2.data(), s.batch, s.seq, s.heads, s.dim, 10000.0);
  ropeBackward(x.data(), d2.data(), s.batch, s.seq, s.heads, s.dim, 10000.0);
  EXPECT_TRUE(sameBits(y1, y2));
  EXPECT_TRUE(sameBits(d1, d2));
}
