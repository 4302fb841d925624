//===- Bf16.h - bfloat16 rounding of whole arrays on the CPU ----*- C++ -*-===//
//
// The CPU backend's bf16 kernels: the shared scalar rule
// (kiln/Runtime/Numerics/Bf16.h) applied to arrays, split over the
// kernels' threads. The scalar functions are visible here as cpu:: names
// too, so a kernel calls one overload set.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CPU_BF16_H
#define KILN_RUNTIME_CPU_BF16_H

#include "kiln/Runtime/Numerics/Bf16.h"

#include <cstdint>

namespace kiln::runtime::cpu {

using numerics::fromBf16Bits;
using numerics::roundToBf16;
using numerics::toBf16Bits;

/// Rounds `x[0..n)` to bfloat16 precision in place.
void roundToBf16(float *x, int64_t n);

/// bits[i] = toBf16Bits(x[i]) for i < n.
void toBf16Bits(const float *x, uint16_t *bits, int64_t n);

/// x[i] = fromBf16Bits(bits[i]) for i < n.
void fromBf16Bits(const uint16_t *bits, float *x, int64_t n);

} // namespace kiln::runtime::cpu

#endif // KILN_RUNTIME_CPU_BF16_H
