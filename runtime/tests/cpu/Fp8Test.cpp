// FP8 conversions against cuda_fp8.h: the tables in Fp8Reference.inc were
// generated from the CUDA toolkit's host conversions
// (GenerateFp8Reference.cpp), so this runs where CUDA is absent.
#include "kiln/Runtime/Cpu/Fp8.h"

#include "Fp8TestInputs.h"

#include <gtest/gtest.h>

#include <cmath>

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
