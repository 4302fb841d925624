//===- FastExp.h - A vectorisable float exp --------------------*- C++ -*-===//
//
// Internal to the CPU kernels. expf(x) without branches or table lookups,
// so that a loop over an array of floats vectorises (SSE2 and up), with
// every operation a single IEEE float multiply, add or integer op: the
// same bits on every target as long as nothing is contracted into an FMA
// (the kernels are compiled with -ffp-contract=off).
//
// Method. x = n ln2 + r with n = round(x / ln2) and |r| <= ln2 / 2, so
// exp(x) = 2^n exp(r):
//
// - n comes from adding 1.5 * 2^23 to x / ln2: the sum has unit spacing,
//   so the addition rounds to the nearest integer, which then sits in the
//   low mantissa bits.
// - r = (x - n ln2hi) - n ln2lo (Cody and Waite): ln2hi has 9 significant
//   bits, so n ln2hi is exact for |n| <= 150, and so is x - n ln2hi (a
//   multiple of ulp(x), below 0.4 in magnitude, so no longer than x's
//   mantissa); only the small second product and difference round.
// - exp(r) ~ 1 + r + r^2 q(r) with q of degree 4, fitted for this file by
//   a Remez exchange on the relative error of the whole expression over
//   [-0.3467, 0.3467] (ln2 / 2 with a margin): 3.1e-9, and 3.6e-9 with the
//   coefficients rounded to float. Adding 1 and r last keeps the rounding
//   of the small terms away from the result.
// - 2^n is applied as two exact powers of two, 2^(n/2) and 2^(n - n/2),
//   each a normal float for n in [-150, 128]: the first product is exact,
//   the second rounds once, which also rounds subnormal results correctly
//   and lets results above FLT_MAX overflow to +inf.
//
// Inputs are clamped to [-104, 89] first: exp(-104) < 2^-150 rounds to 0
// (so -inf gives 0) and exp(89) > FLT_MAX gives +inf (so does +inf). NaN
// passes the clamps and gives NaN, whatever its sign and payload.
//
// Error, measured against exp in double over every one of the 2.2e9 floats
// in [-110, 90]: at most 0.982 ulp (of the float spacing at the exact
// value; 0.75 ulp of 2^-149 for subnormal results), and 99.2% of results
// correctly rounded. exp(+-0) is exactly 1. AttentionTest checks a sample
// of these inputs and the special values.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_LIB_CPU_FASTEXP_H
#define KILN_RUNTIME_LIB_CPU_FASTEXP_H

#include <cstdint>
#include <cstring>

namespace kiln::runtime::cpu::detail {

inline int32_t floatBits(float x) {
  int32_t i;
  std::memcpy(&i, &x, sizeof i);
  return i;
}

inline float bitsFloat(int32_t i) {
  float x;
  std::memcpy(&x, &i, sizeof x);
  return x;
}

/// c ? a : b without a branch. GCC keeps `c ? a : b` on floats as control
/// flow (the comparison may trap), which stops the loop around it from
/// vectorising; a mask made from the comparison does not.
inline float selectFloat(bool c, float a, float b) {
  int32_t mask = -int32_t(c);
  return bitsFloat((floatBits(a) & mask) | (floatBits(b) & ~mask));
}

/// exp(x) to within 1 ulp (see the file comment); branch-free so that
/// loops calling it vectorise.
inline float fastExp(float x) {
  // NaN fails both comparisons and stays NaN.
  x = selectFloat(x < -104.0f, -104.0f, x);
  x = selectFloat(x > 89.0f, 89.0f, x);

  const float shifter = 0x1.8p23f;      // 1.5 * 2^23
  const float log2e = 0x1.715476p+0f;   // 1 / ln2
  const float ln2Hi = 0x1.63p-1f;       // 0.693359375, 9 bits
  const float ln2Lo = -0x1.bd0106p-13f; // ln2 - ln2Hi
  float t = x * log2e + shifter;
  float n = t - shifter; // round(x / ln2)
  int32_t ni = floatBits(t) - floatBits(shifter);
  float r = (x - n * ln2Hi) - n * ln2Lo;

  const float c2 = 0x1.fffffcp-2f, c3 = 0x1.555492p-3f, c4 = 0x1.5558f2p-5f,
              c5 = 0x1.123a2p-7f, c6 = 0x1.6a23dp-10f;
  float q = c2 + r * (c3 + r * (c4 + r * (c5 + r * c6)));
  float p = 1.0f + (r + (r * r) * q);

  // Each in [-75, 64] for any x but NaN. A NaN's bits make ni anything; the
  // shifts are unsigned so that this stays defined (a signed shift of a
  // negative or too large value is not), and p is NaN, so is the result.
  int32_t n1 = ni / 2, n2 = ni - n1;
  float s1 = bitsFloat(static_cast<int32_t>(static_cast<uint32_t>(n1 + 127)
                                            << 23)),
        s2 = bitsFloat(static_cast<int32_t>(static_cast<uint32_t>(n2 + 127)
                                            << 23));
  return p * s1 * s2;
}

} // namespace kiln::runtime::cpu::detail

#endif // KILN_RUNTIME_LIB_CPU_FASTEXP_H
