//===- Fp8.h - FP8 e4m3fn and e5m2 conversions, every backend ---*- C++ -*-===//
//
// The conversions of the FP8 recipes, bit-exact with cuda_fp8.h's host
// conversions under __NV_SATFINITE (runtime/tests/Cpu/Fp8Test.cpp checks
// every code and a million floats against tables generated from it):
//
//   e4m3fn  1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities;
//           0x7f / 0xff are NaN; largest finite 448.
//   e5m2    1 sign, 5 exponent (bias 15), 2 mantissa bits; IEEE-like;
//           largest finite 57344.
//
// Encoding rounds to nearest, ties to even; a magnitude beyond the largest
// finite value (infinity included) saturates to it; NaN encodes as 0x7f.
// Decoding a NaN code gives the float with bits 0x7fffffff.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_NUMERICS_FP8_H
#define KILN_RUNTIME_NUMERICS_FP8_H

#include <cstdint>

namespace kiln::runtime::numerics {

uint8_t toE4m3(float x);
uint8_t toE5m2(float x);
float fromE4m3(uint8_t code);
float fromE5m2(uint8_t code);

} // namespace kiln::runtime::numerics

#endif // KILN_RUNTIME_NUMERICS_FP8_H
