// Initialisation: the moments and bounds of each initialiser against their
// definitions, and the property sharding relies on: element i depends on
// (seed, name, i) alone.
#include "kiln/Runtime/Init.h"
#include "kiln/Runtime/Cpu/Common.h"
#include "kiln/Runtime/StateLayout.h"

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

// initialize() splits a large range over the CPU threads: the same bits
// for any thread count, each element computed from its own index (checked
// against initialValue, one element at a time).
TEST(Init, ThreadsGiveTheSameBits) {
  InitSpec init{InitSpec::TruncNormal, 0.02, -0.04, 0.04};
  const std::string name = "model.embed_tokens.weight";
  std::vector<float> one(300001), three(300001);
  cpu::setCpuThreads(1);
  initialize(init, 5, name, 17, one.size(), one.data());
  cpu::setCpuThreads(3);
  initialize(init, 5, name, 17, three.size(), three.data());
  cpu::setCpuThreads(1);
  uint64_t key = nameKey(name);
  for (size_t i = 0; i < one.size(); ++i) {
    ASSERT_EQ(one[i], three[i]) << i;
    ASSERT_EQ(one[i], initialValue(init, 5, key, 17 + i)) << i;
  }
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

// A tensor-parallel slice starts as its part of the whole tensor (each
// element drawn at its whole-tensor index), alone and as a part of a flat
// FSDP shard, and a checkpoint's whole tensor restores the same slice.
TEST(Init, TpSliceIsItsPartOfTheWholeTensor) {
  Plan plan;
  plan.ranks = 4;
  plan.mesh = {2, 2};
  plan.tpIndex = 1;
  InitSpec init{InitSpec::Normal, 1.0};
  PlanValue sliced; // columns [3, 6) of a whole [4, 6]
  sliced.kind = PlanValue::State;
  sliced.id = 0;
  sliced.name = "w";
  sliced.shape = {4, 3};
  sliced.init = init;
  sliced.tp = TpSlice{1, 1};
  PlanValue flat; // dp_shard position 1's half of [rows 2-3 of a whole [4, 5]]
  flat.kind = PlanValue::State;
  flat.id = 1;
  flat.name = "group";
  flat.shape = {5};
  flat.shardOf = {ShardPart{"v", 0, {2, 5}, init, TpSlice{0, 1}}};
  plan.values = {sliced, flat};
  PlanEntry entry;
  for (int64_t id : {0, 1}) {
    PlanStep step;
    step.results = {id};
    entry.steps.push_back(step);
  }
  plan.entries["init"] = entry;

  HostStates states;
  initializeStates(plan, /*rank=*/1, 5, states);
  uint64_t w = nameKey("w"), v = nameKey("v");
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t c = 0; c < 3; ++c)
      EXPECT_EQ(states[0][r * 3 + c], initialValue(init, 5, w, r * 6 + 3 + c));
  // The flat buffer holds the slice's 10 elements (whole rows 2 and 3);
  // dp_shard position 1 holds its elements 5..9: whole row 3.
  for (int64_t c = 0; c < 5; ++c)
    EXPECT_EQ(states[1][c], initialValue(init, 5, v, 15 + c));

  std::vector<float> wholeW(24), wholeV(20);
  initialize(init, 5, "w", 0, 24, wholeW.data());
  initialize(init, 5, "v", 0, 20, wholeV.data());
  FloatTensor tw{"w", {4, 6}, wholeW}, tv{"v", {4, 5}, wholeV};
  HostStates restored;
  ASSERT_FALSE(setUnshardedStates(plan, 1, {{"w", &tw}, {"v", &tv}}, restored));
  EXPECT_EQ(restored[0], states[0]);
  EXPECT_EQ(restored[1], states[1]);
  FloatTensor wrong{"w", {4, 3}, std::vector<float>(12)};
  Error e = setUnshardedStates(plan, 1, {{"w", &wrong}, {"v", &tv}}, restored);
  ASSERT_TRUE(e);
  EXPECT_EQ(e.message(), "tensor 'w' has another shape than the model's");
}

// A padded slice (tp_shard pad, a vocabulary tp does not divide): rows
// [3, 6) of a whole [5, 2] padded to [6, 2] are its rows 3 and 4, drawn at
// their whole-tensor indices, and one padding row, zero; a checkpoint's
// whole [5, 2] tensor restores the same slice, padding zero.
TEST(Init, PaddedTpSliceLeavesThePaddingZero) {
  Plan plan;
  plan.ranks = 2;
  plan.mesh = {1, 2};
  plan.tpIndex = 1;
  InitSpec init{InitSpec::Normal, 1.0};
  PlanValue sliced;
  sliced.kind = PlanValue::State;
  sliced.id = 0;
  sliced.name = "lm";
  sliced.shape = {3, 2};
  sliced.init = init;
  sliced.tp = TpSlice{0, 1, 1};
  plan.values = {sliced};
  PlanStep step;
  step.results = {0};
  plan.entries["init"].steps.push_back(step);
  EXPECT_EQ(wholeShape(plan, sliced.shape, sliced.tp),
            (std::vector<int64_t>{5, 2}));

  HostStates states;
  states[0].assign(6, 7.0f); // stale values must not survive
  initializeStates(plan, /*rank=*/0, 5, states);
  uint64_t lm = nameKey("lm");
  for (int64_t i = 0; i < 4; ++i)
    EXPECT_EQ(states[0][i], initialValue(init, 5, lm, 6 + i));
  EXPECT_EQ(states[0][4], 0.0f);
  EXPECT_EQ(states[0][5], 0.0f);

  std::vector<float> whole(10);
  initialize(init, 5, "lm", 0, 10, whole.data());
  FloatTensor t{"lm", {5, 2}, whole};
  HostStates restored;
  ASSERT_FALSE(setUnshardedStates(plan, 0, {{"lm", &t}}, restored));
  EXPECT_EQ(restored[0], states[0]);
}
