// FP8 conversions against cuda_fp8.h: the tables in Fp8Reference.inc were
// generated from the CUDA toolkit's host conversions
// (GenerateFp8Reference.cpp), so this runs where CUDA is absent.
#include "kiln/Runtime/Cpu/Fp8.h"

#include "Fp8TestInputs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace {
#include "Fp8Reference.inc"

using namespace kiln::runtime::cpu;
using fp8test::bitsOf;
using fp8test::floatOf;

} // namespace

TEST(Fp8, EveryCodeDecodesAsCudaDoes) {
  for (int c = 0; c < 256; ++c) {
    EXPECT_EQ(bitsOf(fromE4m3(static_cast<uint8_t>(c))), kE4m3Decoded[c])
        << "e4m3 code " << c;
    EXPECT_EQ(bitsOf(fromE5m2(static_cast<uint8_t>(c))), kE5m2Decoded[c])
        << "e5m2 code " << c;
  }
  EXPECT_EQ(fromE4m3(0x7e), 448.0f);
  EXPECT_EQ(fromE5m2(0x7b), 57344.0f);
}

TEST(Fp8, BoundariesEncodeAsCudaDoes) {
  // Midpoints between neighbouring values (ties to even), the floats next
  // to them, saturation, zeros, infinities, NaN.
  for (const Fp8Case &c : kBoundaryCases) {
    float x = floatOf(c.input);
    EXPECT_EQ(toE4m3(x), c.e4m3) << std::hex << "input 0x" << c.input;
    EXPECT_EQ(toE5m2(x), c.e5m2) << std::hex << "input 0x" << c.input;
  }
}

TEST(Fp8, AMillionFloatsEncodeAsCudaDoes) {
  uint64_t h4 = fp8test::kHashStart, h5 = fp8test::kHashStart;
  for (int i = 0; i < fp8test::kRandomCount; ++i) {
    float x = floatOf(fp8test::randomInput(i));
    h4 = fp8test::hashStep(h4, toE4m3(x));
    h5 = fp8test::hashStep(h5, toE5m2(x));
  }
  EXPECT_EQ(h4, kE4m3RandomHash);
  EXPECT_EQ(h5, kE5m2RandomHash);
}

TEST(Fp8, RoundTripsEveryFiniteCode) {
  for (int c = 0; c < 256; ++c) {
    float a = fromE4m3(static_cast<uint8_t>(c));
    if (!std::isnan(a))
      EXPECT_EQ(toE4m3(a), c) << "e4m3 code " << c;
    float b = fromE5m2(static_cast<uint8_t>(c));
    if (std::isfinite(b))
      EXPECT_EQ(toE5m2(b), c) << "e5m2 code " << c;
  }
}

// The FP8 all-gather (kiln-fp8-all-gather): every rank casts its shard of a
// flat buffer of several weights with each weight's scale from the amax
// all-reduced over ranks; the gathered codes must be each weight's FP8 cast
// as a whole, whichever ranks its elements fell on.
TEST(Fp8, GatheredShardCodesAreTheCastOfTheWholeWeight) {
  // Weights straddle shard boundaries; [164, 170) belongs to none (another
  // group's parameter would not be listed) and the tail is padding.
  const std::vector<FlatRange> weights = {
      {0, 100}, {100, 64}, {170, 90}, {260, 6}};
  const int ranks = 4;
  const int64_t total = 266, shard = (total + ranks - 1) / ranks;
  std::vector<float> flat(shard * ranks, 0.0f);
  uint32_t state = 12345;
  auto uniform = [&] {
    state = state * 1664525u + 1013904223u;
    return (state >> 8) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
  };
  // Magnitudes that use the whole range: ordinary weights, large ones, tiny
  // ones (whose scaled values land among e4m3's subnormals before scaling),
  // and an all-zero weight.
  const float magnitude[] = {0.02f, 300.0f, 1e-7f, 0.0f};
  for (size_t i = 0; i < weights.size(); ++i)
    for (int64_t j = 0; j < weights[i].size; ++j)
      flat[weights[i].offset + j] = magnitude[i] * uniform();
  for (int64_t j = 164; j < 170; ++j)
    flat[j] = 5.0f; // not a weight of this group: never cast

  // Per rank, then the max over ranks (the all-reduce).
  std::vector<float> amax(weights.size(), 0.0f);
  for (int r = 0; r < ranks; ++r) {
    std::vector<float> mine(weights.size());
    shardAmax(flat.data() + r * shard, shard, r * shard, weights.data(),
              static_cast<int64_t>(weights.size()), mine.data());
    for (size_t i = 0; i < weights.size(); ++i)
      amax[i] = std::max(amax[i], mine[i]);
  }
  std::vector<uint8_t> gathered(flat.size(), 0xAA);
  std::vector<float> scales(weights.size());
  for (int r = 0; r < ranks; ++r) {
    std::vector<float> mine(weights.size());
    shardQuantizeE4m3(flat.data() + r * shard, shard, r * shard,
                      weights.data(), static_cast<int64_t>(weights.size()),
                      amax.data(), gathered.data() + r * shard, mine.data());
    if (r == 0)
      scales = mine;
    EXPECT_EQ(mine, scales) << "rank " << r << " has other scales";
  }

  // The reference: each weight's amax over the whole weight, its scale,
  // and the cast of every element.
  std::vector<bool> covered(flat.size(), false);
  for (size_t i = 0; i < weights.size(); ++i) {
    const FlatRange &w = weights[i];
    float whole = 0.0f;
    for (int64_t j = 0; j < w.size; ++j)
      whole = std::max(whole, std::fabs(flat[w.offset + j]));
    ASSERT_EQ(amax[i], whole) << "weight " << i;
    float scale = 448.0f / std::max(whole, 1e-12f);
    EXPECT_EQ(scales[i], scale) << "weight " << i;
    for (int64_t j = 0; j < w.size; ++j) {
      float x = flat[w.offset + j];
      uint8_t code = gathered[w.offset + j];
      covered[w.offset + j] = true;
      ASSERT_EQ(code, toE4m3(x * scale))
          << "weight " << i << " element " << j;
      // And the code decodes to x within e4m3's rounding: half a step of 3
      // mantissa bits, or half the smallest subnormal (2^-9) / scale.
      float back = fromE4m3(code) / scale;
      EXPECT_LE(std::fabs(back - x),
                std::max(std::fabs(x) * 0.0625f, 0.5f * 0.001953125f / scale))
          << "weight " << i << " element " << j;
    }
  }
  for (size_t j = 0; j < flat.size(); ++j)
    if (!covered[j])
      EXPECT_EQ(gathered[j], 0) << "element " << j << " is in no weight";
}
