// bf16 rounding: hand-picked bit patterns with their expected results, then
// sweeps over the fp32 bit patterns against two references derived here
// independently of the library: one compares the discarded half with the
// halfway point, the other picks the nearer of the two neighbouring bf16
// values by their distance in double.
#include "kiln/Runtime/Cpu/Bf16.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

using namespace kiln::runtime::cpu;

namespace {

float bitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

uint32_t floatToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

bool isNanBits(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }

/// Reference 1: keep the upper half; round up iff the lower half is more
/// than half an ulp, or exactly half and the upper half is odd. (Valid for
/// every non-NaN pattern, including the carry into the exponent.)
uint16_t roundByHalves(uint32_t u) {
  uint32_t upper = u >> 16, lower = u & 0xffffu;
  if (lower > 0x8000u || (lower == 0x8000u && (upper & 1u)))
    ++upper;
  return static_cast<uint16_t>(upper);
}

/// Reference 2: the nearer of the two bf16 values around x by distance in
/// double, the even one on a tie. Past the largest finite bf16 the upper
/// neighbour stands for 2^128, as IEEE rounding treats overflow.
uint16_t roundByDistance(uint32_t u) {
  uint32_t sign = u & 0x80000000u, mag = u & 0x7fffffffu;
  uint32_t low = mag >> 16; // truncation towards zero
  uint32_t high = low + 1;
  if (mag == 0x7f800000u) // infinity
    return static_cast<uint16_t>((sign | mag) >> 16);
  double x = bitsToFloat(mag);
  double a = bitsToFloat(low << 16);
  double b = high == 0x7f80u ? std::ldexp(1.0, 128) : bitsToFloat(high << 16);
  double da = x - a, db = b - x;
  uint32_t pick = da < db ? low : db < da ? high : ((low & 1u) ? high : low);
  return static_cast<uint16_t>((sign >> 16) | pick);
}

/// What rounding `u` must give: reference 1, or for a NaN the same NaN
/// made quiet, with its sign and upper payload.
uint16_t expected(uint32_t u) {
  if (isNanBits(u))
    return static_cast<uint16_t>((u >> 16) | 0x40u);
  return roundByHalves(u);
}

} // namespace

TEST(Bf16, HandPickedPatterns) {
  struct Case {
    uint32_t in;
    uint16_t out;
  };
  const Case cases[] = {
      {0x3f800000u, 0x3f80}, // 1.0 is exact
      {0x3f808000u, 0x3f80}, // tie, upper half even: down
      {0x3f818000u, 0x3f82}, // tie, upper half odd: up
      {0x3f808001u, 0x3f81}, // just above half: up
      {0x3f807fffu, 0x3f80}, // just below half: down
      {0xbf808000u, 0xbf80}, // negative tie, even: towards zero
      {0xbf818000u, 0xbf82}, // negative tie, odd: away from zero
      {0x3fffffffu, 0x4000}, // carry into the exponent
      {0x7f7f0000u, 0x7f7f}, // largest finite bf16 is exact
      {0x7f7f7fffu, 0x7f7f}, // below the overflow threshold
      {0x7f7f8000u, 0x7f80}, // tie at the threshold: to infinity (even)
      {0x7f7fffffu, 0x7f80}, // FLT_MAX overflows
      {0xff7fffffu, 0xff80}, // -FLT_MAX overflows to -inf
      {0x7f800000u, 0x7f80}, // +inf
      {0xff800000u, 0xff80}, // -inf
      {0x00000000u, 0x0000}, // +0
      {0x80000000u, 0x8000}, // -0 keeps its sign
      {0x00000001u, 0x0000}, // smallest denormal rounds to +0
      {0x80000001u, 0x8000}, // ... and its negative to -0
      {0x00008000u, 0x0000}, // denormal tie, even: down to 0
      {0x00018000u, 0x0002}, // denormal tie, odd: up
      {0x00008001u, 0x0001}, // smallest bf16 denormal
      {0x007fffffu, 0x0080}, // largest denormal rounds up to the smallest normal
      {0x7fc00000u, 0x7fc0}, // quiet NaN
      {0xffc00001u, 0xffc0}, // negative quiet NaN keeps its sign
      {0x7f800001u, 0x7fc0}, // signalling NaN, payload only in the low half
      {0x7fa00000u, 0x7fe0}, // signalling NaN: quietened, payload kept
  };
  for (const Case &c : cases) {
    float in = bitsToFloat(c.in);
    EXPECT_EQ(toBf16Bits(in), c.out) << "input 0x" << std::hex << c.in;
    float rounded = roundToBf16(in);
    EXPECT_EQ(floatToBits(rounded), static_cast<uint32_t>(c.out) << 16)
        << "input 0x" << std::hex << c.in;
  }
  EXPECT_TRUE(std::isnan(roundToBf16(bitsToFloat(0x7f800001u))));
  EXPECT_TRUE(std::signbit(roundToBf16(-0.0f)));
  EXPECT_EQ(roundToBf16(3.0e38f), fromBf16Bits(0x7f62)); // finite
  EXPECT_EQ(roundToBf16(3.4e38f), INFINITY); // past max + half an ulp
  EXPECT_EQ(fromBf16Bits(0x3f80), 1.0f);
  EXPECT_EQ(fromBf16Bits(0xc040), -3.0f);
}

TEST(Bf16, ReferencesAgreeWithEachOther) {
  // The two references are derived differently; check them against each
  // other where the distance one applies (every non-NaN pattern).
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 4099) {
    uint32_t p = static_cast<uint32_t>(u);
    if (isNanBits(p))
      continue;
    ASSERT_EQ(roundByHalves(p), roundByDistance(p)) << std::hex << p;
  }
}

TEST(Bf16, SweepOverFp32Patterns) {
  // Every 97th pattern of the whole 32-bit range: all signs, exponents,
  // denormals, infinities and NaNs are visited.
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 97)
  {
    uint32_t p = static_cast<uint32_t>(u);
    ASSERT_EQ(toBf16Bits(bitsToFloat(p)), expected(p)) << std::hex << p;
  }
  // Every low half under upper halves where rounding is delicate: zero and
  // denormals, 1.0, odd/even neighbours, the overflow edge, infinity/NaN.
  const uint32_t uppers[] = {0x0000, 0x0001, 0x007f, 0x3f80, 0x3f81,
                             0x7f7e, 0x7f7f, 0x7f80, 0x7fc0, 0x8000,
                             0x8001, 0xbf80, 0xff7f, 0xff80, 0xffff};
  for (uint32_t upper : uppers)
    for (uint32_t lower = 0; lower <= 0xffffu; ++lower) {
      uint32_t p = (upper << 16) | lower;
      ASSERT_EQ(toBf16Bits(bitsToFloat(p)), expected(p)) << std::hex << p;
      if (isNanBits(p))
        continue;
      ASSERT_EQ(toBf16Bits(bitsToFloat(p)), roundByDistance(p))
          << std::hex << p;
    }
}

TEST(Bf16, ArrayFormsMatchTheScalarOnes) {
  std::vector<float> x = test::randomFloats(100000, 11, -1e3f, 1e3f);
  x[0] = NAN;
  x[1] = -INFINITY;
  x[2] = bitsToFloat(0x7f7fffffu);
  std::vector<float> rounded = x;
  {
    test::ThreadsScope threads(2);
    roundToBf16(rounded.data(), static_cast<int64_t>(rounded.size()));
  }
  std::vector<uint16_t> bits(x.size());
  toBf16Bits(x.data(), bits.data(), static_cast<int64_t>(x.size()));
  std::vector<float> back(x.size());
  fromBf16Bits(bits.data(), back.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(bits[i], toBf16Bits(x[i])) << i;
    ASSERT_EQ(floatToBits(rounded[i]), floatToBits(roundToBf16(x[i]))) << i;
    ASSERT_EQ(floatToBits(back[i]), uint32_t(bits[i]) << 16) << i;
  }
}
