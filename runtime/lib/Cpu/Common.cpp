//===- Common.cpp - Thread count and GEMM library of the CPU kernels ------===//
//
// One process-wide count, read by every kernel call. The GEMM library
// (OpenBLAS, when built with it: Gemm.h) gets the same count so that a GEMM
// and the loops around it use the same cores.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Cpu/Common.h"

#include "Gemm.h"

#include <algorithm>
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

const std::vector<std::string> &cpuGemmLibraries() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    if (detail::haveOpenBlas())
      n.push_back("openblas");
    n.push_back("portable");
    return n;
  }();
  return names;
}

Error setCpuGemm(const std::string &library) {
  const std::vector<std::string> &names = cpuGemmLibraries();
  if (std::find(names.begin(), names.end(), library) == names.end()) {
    std::string known;
    for (const std::string &n : names)
      known += (known.empty() ? "" : ", ") + n;
    return Error("unknown CPU GEMM library '" + library + "' (this build has " +
                 known + ")");
  }
  detail::usePortableGemm(library == "portable");
  return Error::success();
}

} // namespace kiln::runtime::cpu
