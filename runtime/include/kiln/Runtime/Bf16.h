//===- Bf16.h - bfloat16 conversions ----------------------------*- C++ -*-===//
//
// bf16 is the top half of an IEEE f32. Narrowing rounds to nearest, ties to
// even, on the bits (as cuda_bf16.h's __float2bfloat16_rn and PyTorch do):
// overflow rounds to infinity, NaN stays a quiet NaN with its sign.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_BF16_H
#define KILN_RUNTIME_BF16_H

#include <cstdint>
#include <cstring>

namespace kiln::runtime {

inline uint16_t toBf16Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) // NaN: keep sign, force quiet
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return static_cast<uint16_t>(u >> 16);
}

inline float fromBf16Bits(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

/// x rounded to the nearest bf16, as a float.
inline float roundToBf16(float x) { return fromBf16Bits(toBf16Bits(x)); }

} // namespace kiln::runtime

#endif // KILN_RUNTIME_BF16_H
