//===- Fp8TestInputs.h - The floats the FP8 conversions are checked on ----===//
//
// Shared by the table generator (built where CUDA exists) and the test, so
// both see the same million floats without storing them: half are random
// bit patterns (every exponent: NaN, infinities, subnormals, overflow), half
// uniform in [-1.5 * 65536, 1.5 * 65536] (the formats' ranges, densely).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_TESTS_CPU_FP8TESTINPUTS_H
#define KILN_RUNTIME_TESTS_CPU_FP8TESTINPUTS_H

#include <cstdint>
#include <cstring>

namespace fp8test {

constexpr int kRandomCount = 1000000;

inline uint32_t bitsOf(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

inline float floatOf(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

inline uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// Input `i` of the random stream, as float bits.
inline uint32_t randomInput(int i) {
  uint64_t r = splitmix(static_cast<uint64_t>(i));
  if (i % 2 == 0)
    return static_cast<uint32_t>(r >> 32);
  float unit = static_cast<float>(r >> 40) / 16777216.0f; // [0, 1)
  return bitsOf((unit * 2.0f - 1.0f) * 98304.0f);
}

/// FNV-1a over a sequence of codes.
inline uint64_t hashStep(uint64_t h, uint8_t code) {
  return (h ^ code) * 0x100000001b3ull;
}
constexpr uint64_t kHashStart = 0xcbf29ce484222325ull;

} // namespace fp8test

#endif // KILN_RUNTIME_TESTS_CPU_FP8TESTINPUTS_H
