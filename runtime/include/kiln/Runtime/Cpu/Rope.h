//===- Rope.h - Rotary position embedding (rotate-half) ---------*- C++ -*-===//
//
// HF Llama's layout: x is [batch, seq, heads, dim], dim even, and element i
// of a head pairs with element i + dim/2. For the token at position s
// (0-based index along seq) and i < dim/2:
//
//   f_i = theta^(-2i/dim),  a = s * f_i   (both in double)
//   c = (float)cos(a), n = (float)sin(a)
//   y[i]         = x[i] * c - x[i + dim/2] * n
//   y[i + dim/2] = x[i + dim/2] * c + x[i] * n      (fp32)
//
// The gradient is the rotation by -a: the same with n negated.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CPU_ROPE_H
#define KILN_RUNTIME_CPU_ROPE_H

#include <cstdint>

namespace kiln::runtime::cpu {

/// y = rope(x); both [batch, seq, heads, dim]. `y` may be `x`.
void rope(const float *x, float *y, int64_t batch, int64_t seq,
          int64_t heads, int64_t dim, double theta);

/// dx = rope^-1(dy) (rotation by the opposite angle). `dx` may be `dy`.
void ropeBackward(const float *dy, float *dx, int64_t batch, int64_t seq,
                  int64_t heads, int64_t dim, double theta);

} // namespace kiln::runtime::cpu

#endif // KILN_RUNTIME_CPU_ROPE_H
