//===- Common.cpp - Thread count of the CPU kernels -----------------------===//
//
// One process-wide count, read by every kernel call. The GEMM library
// (OpenBLAS, when built with it: Gemm.h) gets the same count so that a GEMM
// and the loops around it use the same cores.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Cpu/Common.h"

#include "Gemm.h"

#include <atomic>

namespace kiln::runtime::cpu {

namespace {
std::atomic<int> threadCount{1};
} // namespace

void setCpuThreads(int n) {
  n = n < 1 ? 1 : n;
  threadCount.store(n, std::memory_order_relaxed);
  detail::setGemmThreads(n);
}

int cpuThreads() { return threadCount.load(std::memory_order_relaxed); }

} // namespace kiln::runtime::cpu
