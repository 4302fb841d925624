//===- Elementwise.cpp - bf16 rounding, silu, mul, add --------------------===//
//
// Each element is independent, so every loop is split into contiguous
// ranges across threads. Every loop reads an element's inputs into locals
// before writing its outputs, which is what lets outputs alias inputs.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Cpu/Bf16.h"
#include "kiln/Runtime/Cpu/Elementwise.h"

#include "Parallel.h"

#include <cmath>

namespace kiln::runtime::cpu {

using detail::parallelFor;

namespace {
/// Elements worth starting a thread for.
constexpr int64_t kGrain = 1 << 16;

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
} // namespace

//===----------------------------------------------------------------------===//
// bf16
//===----------------------------------------------------------------------===//

void roundToBf16(float *x, int64_t n) {
  parallelFor(n, kGrain, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      x[i] = roundToBf16(x[i]);
  });
}

void toBf16Bits(const float *x, uint16_t *bits, int64_t n) {
  parallelFor(n, kGrain, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      bits[i] = toBf16Bits(x[i]);
  });
}

void fromBf16Bits(const uint16_t *bits, float *x, int64_t n) {
  parallelFor(n, kGrain, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      x[i] = fromBf16Bits(bits[i]);
  });
}

//===----------------------------------------------------------------------===//
// silu
//===----------------------------------------------------------------------===//

void silu(const float *x, float *y, int64_t n) {
  parallelFor(n, kGrain, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      float xi = x[i];
      y[i] = xi * sigmoid(xi);
    }
  });
}

void siluBackward(const float *x, const float *dy, float *dx, int64_t n) {
  parallelFor(n, kGrain, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      float xi = x[i], g = dy[i];
      float s = sigmoid(xi);
      dx[i] = g * s * (1.0f + xi * (1.0f - s));
    }
  });
}

//===----------------------------------------------------------------------===//
// mul, add
//===----------------------------------------------------------------------===//

void mul(const float *a, const float *b, float *y, int64_t n) {
  parallelFor(n, kGrain, [=](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      y[i] = a[i] * b[i];
  });
}

void mulBackward(const float *a, const float *b, const float *dy, float *da,
                 float *db, int64_t n) {
  parallelFor(n, kGrain, [=](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      float ai = a[i], bi = b[i], g = dy[i];
      da[i] = g * bi;
      db[i] = g * ai;
    }
  });
}

void add(const float *a, const float *b, float *y, int64_t n) {
  parallelFor(n, kGrain, [=](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      y[i] = a[i] + b[i];
  });
}

void addBackward(const float *dy, float *da, float *db, int64_t n) {
  parallelFor(n, kGrain, [=](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      float g = dy[i];
      da[i] = g;
      db[i] = g;
    }
  });
}

} // namespace kiln::runtime::cpu
