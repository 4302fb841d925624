// attention: forward (out, lse) and backward (dq, dk, dv) against float64
// references that build the full seq x seq matrices; the backward also
// against finite differences of the float64 forward. Causal and not,
// grouped-query (4 query heads on 2 kv heads), multi-query and multi-head,
// sequence lengths that are multiples of nothing. Determinism across runs
// and thread counts.
#include "kiln/Runtime/Cpu/Attention.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

#include <cmath>

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

Outputs runKernels(const Case &c) {
  Outputs r;
  r.q = randomFloats(c.qSize(), c.seed, -1.5f, 1.5f);
  r.k = randomFloats(c.kvSize(), c.seed + 1, -1.5f, 1.5f);
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

void checkAgainstReference(const Case &c) {
  Outputs r = runKernels(c);
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
