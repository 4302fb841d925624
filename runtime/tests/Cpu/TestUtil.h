//===- TestUtil.h - Helpers of the CPU kernel tests -------------*- C++ -*-===//
//
// Random inputs, norm-wise comparison against float64 references, central
// finite differences, and a guard that restores the thread count.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_TESTS_CPU_TESTUTIL_H
#define KILN_RUNTIME_TESTS_CPU_TESTUTIL_H

#include "kiln/Runtime/Cpu/Common.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace kiln::runtime::cpu::test {

/// n floats uniform in [lo, hi), reproducible from `seed`.
inline std::vector<float> randomFloats(int64_t n, uint32_t seed,
                                       float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(gen);
  return v;
}

inline std::vector<double> widen(const std::vector<float> &v) {
  return std::vector<double>(v.begin(), v.end());
}

/// ||a - b|| / ||b||, with b the float64 reference.
inline double relErr(const std::vector<float> &a, const std::vector<double> &b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += b[i] * b[i];
  }
  return std::sqrt(num) / std::sqrt(den);
}

inline double relErr(const std::vector<double> &a, const std::vector<double> &b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num) / std::sqrt(den);
}

/// sum_i w[i] * y[i]: the scalar whose gradient with respect to y is w.
inline double project(const std::vector<double> &y, const std::vector<float> &w) {
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i)
    s += y[i] * w[i];
  return s;
}

/// Central differences of the scalar function f at x, step h, in double.
template <typename F>
std::vector<double> finiteDifference(const F &f, std::vector<double> x,
                                     double h = 1e-5) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    double saved = x[i];
    x[i] = saved + h;
    double up = f(x);
    x[i] = saved - h;
    double down = f(x);
    x[i] = saved;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

/// True when the two buffers hold the same bits.
inline bool sameBits(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// Sets the kernels' thread count for one scope, then goes back to 1.
struct ThreadsScope {
  explicit ThreadsScope(int n) { setCpuThreads(n); }
  ~ThreadsScope() { setCpuThreads(1); }
};

} // namespace kiln::runtime::cpu::test

#endif // KILN_RUNTIME_TESTS_CPU_TESTUTIL_H
