//===- Bf16.h - bfloat16 rounding shared by every backend -------*- C++ -*-===//
//
// bfloat16 is the upper half of an IEEE binary32: same sign and 8-bit
// exponent, 7 stored mantissa bits. Narrowing is round-to-nearest, ties to
// even, done on the bit pattern (like cuda_bf16.h's __float2bfloat16_rn and
// PyTorch's c10::BFloat16):
//
// - the 16 discarded bits are compared with half an ulp (0x8000); above it
//   the kept half is incremented, below it truncated, and exactly at it the
//   kept half is made even. A carry out of the mantissa bumps the exponent,
//   so values at or past bf16's largest finite value plus half an ulp
//   become infinity, as RNE requires; subnormals round the same way.
// - +-inf stay infinite; -0 stays -0.
// - NaN stays NaN: the sign and upper payload bits are kept and the quiet
//   bit (0x0040 in bf16) is set, so a signalling NaN whose payload lies only
//   in the discarded bits cannot turn into an infinity.
//
// The host side of the rule: the CPU backend, the communicators' reductions
// and the CUDA backend's host code use these; the generated CUDA kernels
// carry the same rule as device code (Cuda/DevicePrelude.h).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_NUMERICS_BF16_H
#define KILN_RUNTIME_NUMERICS_BF16_H

#include <cstdint>
#include <cstring>

namespace kiln::runtime::numerics {

/// The bfloat16 bit pattern nearest to `x` (RNE), as described above.
inline uint16_t toBf16Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  // Adding 0x7fff rounds the discarded half up exactly when it exceeds
  // 0x8000; the kept half's lowest bit adds one more, which turns the tie
  // 0x8000 into a round-up exactly when the kept half is odd.
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

/// The float whose upper half is `bits` (exact: every bf16 is a float).
inline float fromBf16Bits(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

/// `x` rounded to bfloat16 precision, returned as a float.
inline float roundToBf16(float x) { return fromBf16Bits(toBf16Bits(x)); }

} // namespace kiln::runtime::numerics

#endif // KILN_RUNTIME_NUMERICS_BF16_H
