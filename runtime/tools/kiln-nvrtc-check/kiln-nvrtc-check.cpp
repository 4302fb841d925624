//===- kiln-nvrtc-check.cpp - Compile a plan's group kernels with NVRTC ---===//
//
//   kiln-nvrtc-check [--arch sm_90a] [--cache DIR] PLAN...
//
// Generates the CUDA kernels of every fused group of each plan
// (GroupKernelSource.h) and compiles each distinct source to CUBIN with
// NVRTC for the architecture, as the CUDA backend does at load
// (KernelCompiler.h; with --cache, through its on-disk cache). Needs the
// CUDA toolkit, not a GPU. Prints one line per plan and exits 1 if a
// kernel does not compile, with NVRTC's log and the source. Then compiles
// the op kernel library (OpKernels.h), the same for every plan, once.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Cuda/GroupKernelSource.h"
#include "kiln/Runtime/Cuda/KernelCompiler.h"
#include "kiln/Runtime/Cuda/OpKernels.h"
#include "kiln/Runtime/Plan.h"

#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <vector>

using namespace kiln::runtime;

namespace {
int usage() {
  std::fprintf(stderr,
               "usage: kiln-nvrtc-check [--arch sm_90a] [--cache DIR] PLAN...\n");
  return 1;
}
} // namespace

int main(int argc, char **argv) {
  std::string arch = "sm_90a", cacheDir;
  std::vector<std::string> plans;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--arch") == 0 && i + 1 < argc)
      arch = argv[++i];
    else if (std::strcmp(argv[i], "--cache") == 0 && i + 1 < argc)
      cacheDir = argv[++i];
    else if (argv[i][0] == '-')
      return usage();
    else
      plans.push_back(argv[i]);
  }
  if (plans.empty())
    return usage();
  std::set<std::string> seen;
  for (const std::string &path : plans) {
    Expected<Plan> plan = loadPlan(path);
    if (!plan) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(),
                   plan.error().message().c_str());
      return 1;
    }
    int groups = 0, fresh = 0, cached = 0;
    Expected<std::vector<cuda::PlanGroupKernel>> kernels =
        cuda::distinctGroupKernels(*plan, seen, groups);
    if (!kernels) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(),
                   kernels.error().message().c_str());
      return 1;
    }
    for (const cuda::PlanGroupKernel &k : *kernels) {
      Expected<cuda::CompiledKernel> compiled = cuda::compileKernel(
          k.kernel.source, arch, cacheDir, k.kernel.arithmetic);
      if (!compiled) {
        std::fprintf(stderr,
                     "%s: %s, %s: the group kernel does not compile for %s: "
                     "%s\n--- source ---\n%s",
                     path.c_str(), k.entry.c_str(), k.step->loc.c_str(),
                     arch.c_str(), compiled.error().message().c_str(),
                     k.kernel.source.c_str());
        return 1;
      }
      ++(compiled->fromCache ? cached : fresh);
    }
    std::printf("%s: %d fused groups, %d new kernels compiled for %s, %d "
                "from the cache\n",
                path.c_str(), groups, fresh, arch.c_str(), cached);
  }
  Expected<cuda::CompiledKernel> ops = cuda::compileKernel(
      cuda::opKernelLibrarySource(), arch, cacheDir, cuda::Arithmetic::Exact);
  if (!ops) {
    std::fprintf(stderr, "the op kernel library does not compile for %s: %s\n",
                 arch.c_str(), ops.error().message().c_str());
    return 1;
  }
  std::printf("op kernel library: compiled for %s%s\n", arch.c_str(),
              ops->fromCache ? " (from the cache)" : "");
  return 0;
}
