// Initialisation: the moments and bounds of each initialiser against their
// definitions, and the property sharding relies on: element i depends on
// (seed, name, i) alone.
#include "kiln/Runtime/Init.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

using namespace kiln::runtime;

namespace {
struct Moments {
  double mean = 0, std = 0, min = 1e300, max = -1e300;
};
Moments moments(const std::vector<float> &v) {
  Moments m;
  for (float x : v) {
    m.mean += x;
    m.min = std::min<double>(m.min, x);
    m.max = std::max<double>(m.max, x);
  }
  m.mean /= v.size();
  for (float x : v)
    m.std += (x - m.mean) * (x - m.mean);
  m.std = std::sqrt(m.std / v.size());
  return m;
}
} // namespace

TEST(Init, NormalHasItsMoments) {
  std::vector<float> v(200000);
  InitSpec init{InitSpec::Normal, 0.02};
  initialize(init, 7, "w", 0, v.size(), v.data());
  Moments m = moments(v);
  // Standard errors: std/sqrt(n) = 4.5e-5 for the mean, ~3e-5 for the std.
  EXPECT_NEAR(m.mean, 0.0, 3e-4);
  EXPECT_NEAR(m.std, 0.02, 2e-4);
}

TEST(Init, TruncatedNormalStaysInBounds) {
  std::vector<float> v(200000);
  // Truncated at one std: the std of N(0,1) truncated to [-1, 1] is 0.5378.
  InitSpec init{InitSpec::TruncNormal, 1.0, -1.0, 1.0};
  initialize(init, 3, "w", 0, v.size(), v.data());
  Moments m = moments(v);
  EXPECT_GE(m.min, -1.0);
  EXPECT_LE(m.max, 1.0);
  EXPECT_NEAR(m.mean, 0.0, 0.01);
  EXPECT_NEAR(m.std, 0.5378, 0.005);
}

TEST(Init, ElementDependsOnSeedNameAndIndexOnly) {
  InitSpec init{InitSpec::TruncNormal, 0.02, -2.0, 2.0};
  std::vector<float> whole(1000), shard(300);
  initialize(init, 1, "model.layers.0.mlp.up_proj.weight", 0, whole.size(),
             whole.data());
  initialize(init, 1, "model.layers.0.mlp.up_proj.weight", 500, shard.size(),
             shard.data());
  for (size_t i = 0; i < shard.size(); ++i)
    ASSERT_EQ(shard[i], whole[500 + i]);

  std::vector<float> otherName(1000), otherSeed(1000);
  initialize(init, 1, "model.layers.1.mlp.up_proj.weight", 0, 1000,
             otherName.data());
  initialize(init, 2, "model.layers.0.mlp.up_proj.weight", 0, 1000,
             otherSeed.data());
  int sameName = 0, sameSeed = 0;
  for (size_t i = 0; i < whole.size(); ++i) {
    sameName += whole[i] == otherName[i];
    sameSeed += whole[i] == otherSeed[i];
  }
  EXPECT_LT(sameName, 3);
  EXPECT_LT(sameSeed, 3);
}

TEST(Init, OnesAndZeros) {
  std::vector<float> v(16);
  initialize(InitSpec{InitSpec::Ones}, 0, "n", 0, v.size(), v.data());
  for (float x : v)
    EXPECT_EQ(x, 1.0f);
  initialize(InitSpec{InitSpec::Zeros}, 0, "n", 0, v.size(), v.data());
  for (float x : v)
    EXPECT_EQ(x, 0.0f);
}

TEST(Init, UniformsAreInsideTheOpenInterval) {
  for (uint64_t c = 0; c < 100000; ++c) {
    double u = uniformAt(0, 0, c);
    ASSERT_GT(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
}
