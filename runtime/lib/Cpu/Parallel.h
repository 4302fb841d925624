//===- Parallel.h - Splitting independent work over threads ----*- C++ -*-===//
//
// Internal to the runtime: the CPU kernels and the parameter initializer
// (Init.cpp). parallelFor hands contiguous ranges of independent items to
// at most cpuThreads() threads; since no item's result depends on which
// thread computes it or when, its callers give the same bits for every
// thread count. Threads are started per call, so
// callers pass a grain (items worth a thread) to keep small calls serial.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_LIB_CPU_PARALLEL_H
#define KILN_RUNTIME_LIB_CPU_PARALLEL_H

#include "kiln/Runtime/Cpu/Common.h"

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace kiln::runtime::cpu::detail {

/// Calls body(begin, end) on disjoint ranges covering [0, n), each at least
/// `grain` items long (except when n itself is shorter), the first range on
/// the calling thread.
template <typename Body>
void parallelFor(int64_t n, int64_t grain, const Body &body) {
  if (n <= 0)
    return;
  int64_t chunks = (n + std::max<int64_t>(grain, 1) - 1) /
                   std::max<int64_t>(grain, 1);
  chunks = std::min<int64_t>(chunks, cpuThreads());
  if (chunks <= 1) {
    body(int64_t(0), n);
    return;
  }
  auto bound = [&](int64_t c) { return n / chunks * c + n % chunks * c / chunks; };
  std::vector<std::thread> workers;
  workers.reserve(chunks - 1);
  for (int64_t c = 1; c < chunks; ++c)
    workers.emplace_back([&body, b = bound(c), e = bound(c + 1)] { body(b, e); });
  body(int64_t(0), bound(1));
  for (std::thread &t : workers)
    t.join();
}

/// Dot product with eight running sums combined in a fixed order: the same
/// bits on every call, and a shape the compiler vectorises without
/// reassociating anything itself.
inline float dot(const float *a, const float *b, int64_t n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l)
      s[l] += a[i + l] * b[i + l];
  for (; i < n; ++i)
    s[i % 8] += a[i] * b[i];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

/// y += a * x over n elements.
inline void axpy(float a, const float *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] += a * x[i];
}

} // namespace kiln::runtime::cpu::detail

#endif // KILN_RUNTIME_LIB_CPU_PARALLEL_H
