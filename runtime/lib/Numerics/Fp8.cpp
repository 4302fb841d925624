//===- Fp8.cpp - FP8 e4m3fn and e5m2 conversions --------------------------===//
//
// One routine for both formats, on the float's bits: the value is scaled to
// an integer count of the target's smallest step (its subnormal unit) when
// small, or its mantissa is cut to the target's width when normal; both
// round to nearest, ties to even, with integer arithmetic only.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Numerics/Fp8.h"

#include <cstring>

namespace kiln::runtime::numerics {

namespace {

struct Format {
  int mantissaBits, bias;
  uint8_t maxFinite; // code of the largest finite magnitude
};
constexpr Format kE4m3{3, 7, 0x7e};
constexpr Format kE5m2{2, 15, 0x7b};

uint32_t bitsOf(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

float floatOf(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

/// `value` >> `shift` rounded to nearest, ties to even.
uint32_t shiftRoundEven(uint32_t value, int shift) {
  if (shift <= 0)
    return value << -shift;
  if (shift > 31)
    return 0;
  uint32_t kept = value >> shift;
  uint32_t rest = value & ((1u << shift) - 1);
  uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (kept & 1)))
    ++kept;
  return kept;
}

uint8_t encode(float x, const Format &f) {
  uint32_t u = bitsOf(x);
  uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80);
  uint32_t magnitude = u & 0x7fffffff;
  if (magnitude > 0x7f800000) // NaN
    return 0x7f;
  if (magnitude == 0x7f800000) // infinity saturates
    return sign | f.maxFinite;
  int exponent = static_cast<int>(magnitude >> 23); // biased, float's
  uint32_t mantissa = magnitude & 0x7fffff;
  if (exponent != 0)
    mantissa |= 0x800000; // the implicit bit
  else
    exponent = 1;
  // The value is mantissa * 2^(exponent - 127 - 23). The target's step in
  // its binade (or its subnormal unit) is 2^(e - bias - m) with e >= 1.
  int targetExponent = exponent - 127 + f.bias; // biased, target's
  uint32_t code;
  if (targetExponent >= 1) {
    // Normal in the target: keep m mantissa bits.
    uint32_t rounded = shiftRoundEven(mantissa, 23 - f.mantissaBits);
    if (rounded >> (f.mantissaBits + 1)) { // carried into the next binade
      rounded >>= 1;
      ++targetExponent;
    }
    code = (static_cast<uint32_t>(targetExponent) << f.mantissaBits) |
           (rounded & ((1u << f.mantissaBits) - 1));
  } else {
    // Subnormal in the target: count units of 2^(1 - bias - m).
    int shift = 23 - f.mantissaBits + (1 - targetExponent);
    code = shiftRoundEven(mantissa, shift); // may round up to the first normal
  }
  if (code > f.maxFinite)
    code = f.maxFinite;
  return sign | static_cast<uint8_t>(code);
}

float decode(uint8_t code, const Format &f, bool e4m3) {
  uint32_t sign = static_cast<uint32_t>(code & 0x80) << 24;
  int exponent = (code & 0x7f) >> f.mantissaBits;
  uint32_t mantissa = code & ((1u << f.mantissaBits) - 1);
  int maxExponent = (1 << (7 - f.mantissaBits)) - 1;
  if (e4m3 ? (code & 0x7f) == 0x7f : exponent == maxExponent) {
    if (!e4m3 && mantissa == 0)
      return floatOf(sign | 0x7f800000); // e5m2 infinity
    return floatOf(0x7fffffff);          // NaN, as cuda_fp8.h gives it
  }
  if (exponent == 0) {
    if (mantissa == 0)
      return floatOf(sign);
    // mantissa * 2^(1 - bias - m): normalise into a float.
    int e = 1 - f.bias;
    while (!(mantissa & (1u << f.mantissaBits))) {
      mantissa <<= 1;
      --e;
    }
    mantissa &= (1u << f.mantissaBits) - 1;
    return floatOf(sign | (static_cast<uint32_t>(e + 127) << 23) |
                   (mantissa << (23 - f.mantissaBits)));
  }
  return floatOf(sign |
                 (static_cast<uint32_t>(exponent - f.bias + 127) << 23) |
                 (mantissa << (23 - f.mantissaBits)));
}

} // namespace

uint8_t toE4m3(float x) { return encode(x, kE4m3); }
uint8_t toE5m2(float x) { return encode(x, kE5m2); }
float fromE4m3(uint8_t code) { return decode(code, kE4m3, true); }
float fromE5m2(uint8_t code) { return decode(code, kE5m2, false); }

} // namespace kiln::runtime::numerics
