//===- Fp8.h - The FP8 all-gather's casts on the CPU ------------*- C++ -*-===//
//
// The CPU backend's FP8 kernels over a rank's shard of a flat buffer. The
// conversions are the shared ones (kiln/Runtime/Numerics/Fp8.h), visible
// here as cpu:: names too.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CPU_FP8_H
#define KILN_RUNTIME_CPU_FP8_H

#include "kiln/Runtime/Numerics/Fp8.h"

#include <cstdint>

namespace kiln::runtime::cpu {

using numerics::fromE4m3;
using numerics::fromE5m2;
using numerics::toE4m3;
using numerics::toE5m2;

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
