//===- Fp8.h - FP8 e4m3fn and e5m2 conversions ------------------*- C++ -*-===//
//
// The conversions of the FP8 recipes, bit-exact with cuda_fp8.h's host
// conversions under __NV_SATFINITE (runtime/tests/cpu/Fp8Test.cpp checks
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

#ifndef KILN_RUNTIME_CPU_FP8_H
#define KILN_RUNTIME_CPU_FP8_H

#include <cstdint>

namespace kiln::runtime::cpu {

uint8_t toE4m3(float x);
uint8_t toE5m2(float x);
float fromE4m3(uint8_t code);
float fromE5m2(uint8_t code);

/// One weight's elements [offset, offset + size) of a flat buffer.
struct FlatRange {
  int64_t offset, size;
};

/// The FP8 all-gather's casts on one rank's shard, which holds the flat
/// elements [first, first + n) (docs/plan.md, shard_amax and
/// shard_quantize):
/// amax[i] = max |x| over the elements of weights[i] in the shard (NaN if
/// any is NaN), 0 when it has none;
void shardAmax(const float *shard, int64_t n, int64_t first,
               const FlatRange *weights, int64_t count, float *amax);
/// scales[i] = 448 / max(amax[i], 1e-12) in f32, and each element of
/// weight i becomes toE4m3(x * scales[i]); elements of no weight become 0.
void shardQuantizeE4m3(const float *shard, int64_t n, int64_t first,
                       const FlatRange *weights, int64_t count,
                       const float *amax, uint8_t *codes, float *scales);

} // namespace kiln::runtime::cpu

#endif // KILN_RUNTIME_CPU_FP8_H
