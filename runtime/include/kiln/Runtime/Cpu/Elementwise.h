//===- Elementwise.h - silu, mul, add and their gradients ------*- C++ -*-===//
//
// Elementwise fp32 kernels over n elements. Any output may be the same
// buffer as any input (each element's inputs are read before it is
// written); partial overlap is not allowed.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CPU_ELEMENTWISE_H
#define KILN_RUNTIME_CPU_ELEMENTWISE_H

#include <cstdint>

namespace kiln::runtime::cpu {

/// y = x * s with s = sigmoid(x) = 1 / (1 + exp(-x)), in fp32.
void silu(const float *x, float *y, int64_t n);

/// dx = dy * s * (1 + x * (1 - s)) with s = sigmoid(x).
void siluBackward(const float *x, const float *dy, float *dx, int64_t n);

/// y = a * b.
void mul(const float *a, const float *b, float *y, int64_t n);

/// da = dy * b, db = dy * a.
void mulBackward(const float *a, const float *b, const float *dy, float *da,
                 float *db, int64_t n);

/// y = a + b.
void add(const float *a, const float *b, float *y, int64_t n);

/// da = dy, db = dy (copies; either may be dy itself).
void addBackward(const float *dy, float *da, float *db, int64_t n);

} // namespace kiln::runtime::cpu

#endif // KILN_RUNTIME_CPU_ELEMENTWISE_H
