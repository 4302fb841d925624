// attention: forward (out, lse) and backward (dq, dk, dv) against float64
// references that build the full seq x seq matrices; the backward also
// against finite differences of the float64 forward. Causal and not,
// grouped-query (4 query heads on 2 kv heads), multi-query and multi-head,
// sequence lengths that are multiples of nothing, shorter and longer than
// the kernels' tiles and backward blocks, head sizes that fill no vector,
// scores wide enough for most probabilities to underflow. Determinism
// across runs and thread counts, and the same bits from the kernels' SSE2
// and AVX2 copies. The kernels' exp (FastExp.h) against exp in double.
#include "kiln/Runtime/Cpu/Attention.h"

#include "TestUtil.h"

// Internal headers of the kernels: fastExp and the AVX2 switch.
#include "../../lib/Cpu/FastExp.h"
#include "../../lib/Cpu/Simd.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

using namespace kiln::runtime::cpu;
using namespace kiln::runtime::cpu::test;

namespace {

struct Case {
  AttentionShape shape;
  bool causal;
  uint32_t seed;

  int64_t qSize() const {
    return shape.batch * shape.seq * shape.qHeads * shape.headDim;
  }
  int64_t kvSize() const {
    return shape.batch * shape.seq * shape.kvHeads * shape.headDim;
  }
  float scale() const { return 1.0f / std::sqrt(float(shape.headDim)); }
  int64_t qAt(int64_t b, int64_t s, int64_t h) const {
    return ((b * shape.seq + s) * shape.qHeads + h) * shape.headDim;
  }
  int64_t kvAt(int64_t b, int64_t s, int64_t h) const {
    return ((b * shape.seq + s) * shape.kvHeads + h) * shape.headDim;
  }
};

struct RefResult {
  std::vector<double> out, lse, dq, dk, dv;
};

/// The full-matrix float64 attention; the gradients too when dout is given.
RefResult attentionRef(const Case &c, const std::vector<double> &q,
                       const std::vector<double> &k,
                       const std::vector<double> &v,
                       const std::vector<float> *dout = nullptr) {
  const AttentionShape &s = c.shape;
  const int64_t S = s.seq, D = s.headDim, group = s.qHeads / s.kvHeads;
  const double scale = c.scale();
  RefResult r;
  r.out.assign(c.qSize(), 0.0);
  r.lse.assign(s.batch * s.qHeads * S, 0.0);
  if (dout) {
    r.dq.assign(c.qSize(), 0.0);
    r.dk.assign(c.kvSize(), 0.0);
    r.dv.assign(c.kvSize(), 0.0);
  }
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.qHeads; ++h) {
      int64_t kh = h / group;
      std::vector<double> P(S * S, 0.0); // probabilities, 0 where masked
      for (int64_t i = 0; i < S; ++i) {
        std::vector<double> sc(S, -INFINITY);
        double m = -INFINITY;
        for (int64_t j = 0; j < S; ++j) {
          if (c.causal && j > i)
            continue;
          double dotv = 0;
          for (int64_t d = 0; d < D; ++d)
            dotv += q[c.qAt(b, i, h) + d] * k[c.kvAt(b, j, kh) + d];
          sc[j] = scale * dotv;
          m = std::max(m, sc[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < S; ++j)
          sum += std::exp(sc[j] - m);
        double lse = m + std::log(sum);
        r.lse[(b * s.qHeads + h) * S + i] = lse;
        for (int64_t j = 0; j < S; ++j) {
          P[i * S + j] = std::exp(sc[j] - lse);
          for (int64_t d = 0; d < D; ++d)
            r.out[c.qAt(b, i, h) + d] += P[i * S + j] * v[c.kvAt(b, j, kh) + d];
        }
      }
      if (!dout)
        continue;
      for (int64_t i = 0; i < S; ++i) {
        const int64_t qi = c.qAt(b, i, h);
        std::vector<double> dP(S, 0.0);
        double Di = 0;
        for (int64_t j = 0; j < S; ++j) {
          for (int64_t d = 0; d < D; ++d)
            dP[j] += (*dout)[qi + d] * v[c.kvAt(b, j, kh) + d];
          Di += P[i * S + j] * dP[j];
        }
        for (int64_t j = 0; j < S; ++j) {
          double dS = P[i * S + j] * (dP[j] - Di);
          const int64_t kj = c.kvAt(b, j, kh);
          for (int64_t d = 0; d < D; ++d) {
            r.dq[qi + d] += scale * dS * k[kj + d];
            r.dk[kj + d] += scale * dS * q[qi + d];
            r.dv[kj + d] += P[i * S + j] * (*dout)[qi + d];
          }
        }
      }
    }
  return r;
}

struct Outputs {
  std::vector<float> q, k, v, dout, out, lse, dq, dk, dv;
};

/// `spread` widens q and k: scores then reach about spread^2 * 1.5^2 *
/// sqrt(dim) in magnitude, so that most probabilities underflow.
Outputs runKernels(const Case &c, float spread = 1.0f) {
  Outputs r;
  r.q = randomFloats(c.qSize(), c.seed, -1.5f * spread, 1.5f * spread);
  r.k = randomFloats(c.kvSize(), c.seed + 1, -1.5f * spread, 1.5f * spread);
  r.v = randomFloats(c.kvSize(), c.seed + 2);
  r.dout = randomFloats(c.qSize(), c.seed + 3);
  r.out.resize(c.qSize());
  r.lse.resize(c.shape.batch * c.shape.qHeads * c.shape.seq);
  r.dq.resize(c.qSize());
  r.dk.assign(c.kvSize(), NAN); // must be overwritten
  r.dv.assign(c.kvSize(), NAN);
  attention(r.q.data(), r.k.data(), r.v.data(), r.out.data(), r.lse.data(),
            c.shape, c.scale(), c.causal);
  attentionBackward(r.q.data(), r.k.data(), r.v.data(), r.out.data(),
                    r.lse.data(), r.dout.data(), r.dq.data(), r.dk.data(),
                    r.dv.data(), c.shape, c.scale(), c.causal);
  return r;
}

/// Norm-wise relative error, or the largest magnitude of `a` where the
/// reference is exactly zero (a single token's dq and dk).
double errorAgainst(const std::vector<float> &a, const std::vector<double> &ref) {
  double refNorm = 0, aMax = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    refNorm += ref[i] * ref[i];
    aMax = std::max(aMax, std::fabs(double(a[i])));
  }
  return refNorm > 0 ? relErr(a, ref) : aMax;
}

void checkAgainstReference(const Case &c, float spread = 1.0f) {
  SCOPED_TRACE(::testing::Message()
               << "batch " << c.shape.batch << " seq " << c.shape.seq
               << " heads " << c.shape.qHeads << "/" << c.shape.kvHeads
               << " dim " << c.shape.headDim << (c.causal ? " causal" : ""));
  Outputs r = runKernels(c, spread);
  RefResult ref =
      attentionRef(c, widen(r.q), widen(r.k), widen(r.v), &r.dout);
  EXPECT_LE(errorAgainst(r.out, ref.out), 1e-5);
  EXPECT_LE(errorAgainst(r.lse, ref.lse), 1e-6);
  EXPECT_LE(errorAgainst(r.dq, ref.dq), 1e-5);
  EXPECT_LE(errorAgainst(r.dk, ref.dk), 1e-5);
  EXPECT_LE(errorAgainst(r.dv, ref.dv), 1e-5);
}

void checkAgainstFiniteDifferences(const Case &c) {
  Outputs r = runKernels(c);
  std::vector<double> q = widen(r.q), k = widen(r.k), v = widen(r.v);
  auto byQ = [&](const std::vector<double> &x) {
    return project(attentionRef(c, x, k, v).out, r.dout);
  };
  auto byK = [&](const std::vector<double> &x) {
    return project(attentionRef(c, q, x, v).out, r.dout);
  };
  auto byV = [&](const std::vector<double> &x) {
    return project(attentionRef(c, q, k, x).out, r.dout);
  };
  EXPECT_LE(relErr(r.dq, finiteDifference(byQ, q)), 1e-5);
  EXPECT_LE(relErr(r.dk, finiteDifference(byK, k)), 1e-5);
  EXPECT_LE(relErr(r.dv, finiteDifference(byV, v)), 1e-5);
}

} // namespace

TEST(Attention, GroupedQueryCausalMatchesFloat64) {
  checkAgainstReference({{2, 37, 4, 2, 16}, true, 1});
}

TEST(Attention, GroupedQueryNonCausalMatchesFloat64) {
  checkAgainstReference({{2, 37, 4, 2, 16}, false, 2});
}

TEST(Attention, MultiQueryAndMultiHeadMatchFloat64) {
  checkAgainstReference({{1, 29, 4, 1, 8}, true, 3});
  checkAgainstReference({{2, 23, 3, 3, 12}, false, 4});
  checkAgainstReference({{1, 1, 2, 1, 4}, true, 5}); // a single token
}

TEST(Attention, GroupedQueryCausalGradientMatchesFiniteDifferences) {
  checkAgainstFiniteDifferences({{2, 9, 4, 2, 6}, true, 6});
}

TEST(Attention, GroupedQueryNonCausalGradientMatchesFiniteDifferences) {
  checkAgainstFiniteDifferences({{2, 9, 4, 2, 6}, false, 7});
}

TEST(Attention, FirstCausalRowCopiesItsValue) {
  // Row 0 under the causal mask sees key 0 alone: out = v_0, lse = s_00.
  Case c{{1, 5, 2, 1, 4}, true, 8};
  Outputs r = runKernels(c);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t d = 0; d < 4; ++d)
      EXPECT_EQ(r.out[c.qAt(0, 0, h) + d], r.v[c.kvAt(0, 0, 0) + d]);
}

TEST(Attention, DeterministicAcrossRunsAndThreadCounts) {
  Case c{{2, 200, 4, 2, 32}, true, 9};
  Outputs one = runKernels(c);
  Outputs again = runKernels(c);
  Outputs two;
  {
    ThreadsScope threads(2);
    two = runKernels(c);
  }
  for (const Outputs *other : {&again, &two}) {
    EXPECT_TRUE(sameBits(one.out, other->out));
    EXPECT_TRUE(sameBits(one.lse, other->lse));
    EXPECT_TRUE(sameBits(one.dq, other->dq));
    EXPECT_TRUE(sameBits(one.dk, other->dk));
    EXPECT_TRUE(sameBits(one.dv, other->dv));
  }
}

TEST(Attention, LongerThanABackwardBlockMatchesFloat64) {
  // The backward takes query rows in blocks of 64 and the kernels' tiles
  // are 4 rows by 8 or 16 keys: 133 rows are two full blocks and a block of
  // 5, and end inside a tile.
  checkAgainstReference({{1, 133, 4, 2, 16}, true, 10});
  checkAgainstReference({{1, 133, 4, 2, 16}, false, 11});
  checkAgainstReference({{1, 64, 2, 1, 32}, true, 12}); // exactly one block
  checkAgainstReference({{1, 65, 2, 2, 8}, true, 13});  // one row more
}

TEST(Attention, ShortSequencesMatchFloat64) {
  // Fewer rows than a tile, and one row more than a tile.
  for (int64_t seq : {1, 2, 3, 4, 5}) {
    checkAgainstReference({{2, seq, 4, 2, 8}, true, uint32_t(20 + seq)});
    checkAgainstReference({{2, seq, 4, 2, 8}, false, uint32_t(30 + seq)});
  }
}

TEST(Attention, HeadSizesThatFillNoVectorMatchFloat64) {
  // The kernels pad dim to a multiple of 8 (SSE2) or 16 (AVX2) columns:
  // 1, 20 and 33 leave padding, 64 (as in the seq 512 benchmark) none.
  checkAgainstReference({{1, 19, 2, 1, 1}, true, 40});
  checkAgainstReference({{1, 19, 2, 1, 20}, false, 41});
  checkAgainstReference({{1, 19, 4, 4, 33}, true, 42});
  checkAgainstReference({{1, 19, 4, 2, 64}, true, 43});
}

TEST(Attention, WideScoresMatchFloat64) {
  // Scores spread over hundreds: most probabilities underflow to zero in
  // both float and double, and rows are dominated by one or two keys.
  checkAgainstReference({{2, 37, 4, 2, 16}, true, 50}, 6.0f);
  checkAgainstReference({{2, 37, 4, 2, 16}, false, 51}, 6.0f);
}

TEST(Attention, BaselineAndAvx2CopiesGiveTheSameBits) {
  // The kernels pick their AVX2 loops when the CPU has AVX2; both copies
  // must compute every element with the same operations. Without AVX2
  // both runs take the baseline loops.
  for (bool causal : {true, false}) {
    Case c{{2, 150, 4, 2, 40}, causal, 60};
    Outputs fast = runKernels(c);
    kiln::runtime::cpu::detail::allowAvx2 = false;
    Outputs baseline = runKernels(c);
    kiln::runtime::cpu::detail::allowAvx2 = true;
    EXPECT_TRUE(sameBits(fast.out, baseline.out));
    EXPECT_TRUE(sameBits(fast.lse, baseline.lse));
    EXPECT_TRUE(sameBits(fast.dq, baseline.dq));
    EXPECT_TRUE(sameBits(fast.dk, baseline.dk));
    EXPECT_TRUE(sameBits(fast.dv, baseline.dv));
  }
}

namespace {

/// |a - e| in units of the spacing of floats at e (the subnormal spacing
/// 2^-149 below FLT_MIN): at most 0.5 when a is e correctly rounded.
double ulpError(float a, double e) {
  if (std::isinf(a) && e > double(std::numeric_limits<float>::max()))
    return 0;
  int exponent = 0;
  std::frexp(e, &exponent); // e = m 2^exponent, 0.5 <= m < 1
  double spacing = std::max(std::ldexp(1.0, exponent - 24),
                            std::ldexp(1.0, -149));
  return std::fabs(double(a) - e) / spacing;
}

} // namespace

TEST(FastExp, WithinOneUlpOfExpInDouble) {
  // One float in every 331 between -110 and 90 (about 7 million; the
  // stride is odd, so low mantissa bits of both parities are hit), both
  // signs. An exhaustive run over all 2.2e9 floats there gave 0.982 ulp at
  // most, and 99.2% correctly rounded.
  using kiln::runtime::cpu::detail::fastExp;
  auto sweep = [](float from, float to) {
    uint32_t lo, hi;
    std::memcpy(&lo, &from, sizeof lo);
    std::memcpy(&hi, &to, sizeof hi);
    std::vector<float> x;
    for (uint64_t bits = lo; bits <= hi; bits += 331) {
      uint32_t b = uint32_t(bits);
      float f;
      std::memcpy(&f, &b, sizeof f);
      x.push_back(f);
    }
    // A loop over an array, as in the kernels.
    std::vector<float> y(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      y[i] = fastExp(x[i]);
    double worst = 0, worstAt = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      double err = ulpError(y[i], std::exp(double(x[i])));
      if (err > worst) {
        worst = err;
        worstAt = x[i];
      }
    }
    EXPECT_LE(worst, 1.0) << "at x = " << worstAt;
  };
  sweep(0.0f, 90.0f);
  sweep(-0.0f, -110.0f); // the bit patterns of negatives grow with |x|
}

TEST(FastExp, SpecialValues) {
  using kiln::runtime::cpu::detail::fastExp;
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(fastExp(0.0f), 1.0f);
  EXPECT_EQ(fastExp(-0.0f), 1.0f);
  EXPECT_EQ(fastExp(-inf), 0.0f);
  EXPECT_EQ(fastExp(-104.0f), 0.0f);
  EXPECT_EQ(fastExp(-1e30f), 0.0f);
  EXPECT_EQ(fastExp(inf), inf);
  EXPECT_EQ(fastExp(89.0f), inf);
  EXPECT_EQ(fastExp(1e30f), inf);
  // Any NaN, of either sign (the plan fuzzer found a negative one shifting
  // a negative int under UBSan: scores of inf x 0 in attention).
  for (uint32_t bits : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xffffffffu,
                        0x7fbfffffu}) {
    float nan;
    std::memcpy(&nan, &bits, sizeof nan);
    EXPECT_TRUE(std::isnan(fastExp(nan))) << std::hex << bits;
  }
  // The smallest subnormal, the largest finite result, and results on
  // either side of FLT_MIN, as the correctly rounded exp gives them.
  for (float x : {-103.97f, -103.28f, -87.3365f, -87.3366f, -100.0f,
                  88.7228f, 1.0f, -1.0f, 0.5f, -0.3465736f, 0.3465736f})
    EXPECT_LE(ulpError(fastExp(x), std::exp(double(x))), 1.0) << x;
}
