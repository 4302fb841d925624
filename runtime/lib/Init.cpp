//===- Init.cpp - Parameter initialisation from a counter-based RNG -------===//
//
// Uniforms come from SplitMix64's finaliser applied to a 64-bit mix of
// (seed, name key, counter); the counter of element i's d-th draw is
// 2 * (i * 64 + d) and 2 * (i * 64 + d) + 1 for the two uniforms of one
// Box-Muller normal. Truncated normals reject draws outside [a, b] and
// draw again (d = 0, 1, ...; after 64 rejections the value is clamped,
// which for the bounds Kiln uses has probability below 1e-100).
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Init.h"

#include "Cpu/Parallel.h"

#include <algorithm>
#include <cmath>

namespace kiln::runtime {

namespace {
uint64_t mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

constexpr uint64_t kDrawsPerElement = 64;

double normalAt(uint64_t seed, uint64_t key, uint64_t index, uint64_t draw) {
  uint64_t base = 2 * (index * kDrawsPerElement + draw);
  double u1 = uniformAt(seed, key, base);
  double u2 = uniformAt(seed, key, base + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}
} // namespace

uint64_t nameKey(const std::string &name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

double uniformAt(uint64_t seed, uint64_t key, uint64_t counter) {
  uint64_t bits = mix(mix(seed ^ mix(key)) ^ counter);
  // 53 random bits, shifted off zero: (k + 0.5) / 2^53 lies in (0, 1).
  return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53;
}

float initialValue(const InitSpec &init, uint64_t seed, uint64_t key,
                   uint64_t index) {
  switch (init.kind) {
  case InitSpec::Zeros:
    return 0.0f;
  case InitSpec::Ones:
    return 1.0f;
  case InitSpec::Normal:
    return static_cast<float>(init.std * normalAt(seed, key, index, 0));
  case InitSpec::TruncNormal:
    for (uint64_t draw = 0; draw < kDrawsPerElement; ++draw) {
      double x = init.std * normalAt(seed, key, index, draw);
      if (x >= init.a && x <= init.b)
        return static_cast<float>(x);
    }
    return static_cast<float>(
        std::clamp(init.std * normalAt(seed, key, index, 0), init.a, init.b));
  }
  return 0.0f;
}

void initialize(const InitSpec &init, uint64_t seed, const std::string &name,
                uint64_t first, uint64_t count, float *out) {
  uint64_t key = nameKey(name);
  // Each element is a pure function of its index, so the ranges can go to
  // the CPU threads with the same bits: a truncated normal costs about
  // 58 ns on one thread here, which made llama3-1b's 1.24 B parameters
  // over a minute before a GPU's first step (docs/cuda.md, "The first GPU
  // run").
  cpu::detail::parallelFor(static_cast<int64_t>(count), int64_t(1) << 16,
                           [&](int64_t begin, int64_t end) {
                             for (int64_t i = begin; i < end; ++i)
                               out[i] =
                                   initialValue(init, seed, key, first + i);
                           });
}

} // namespace kiln::runtime
