//===- kiln-nvrtc-check.cpp - Compile a plan's group kernels with NVRTC ---===//
//
//   kiln-nvrtc-check [--arch sm_90a] PLAN...
//
// Generates the CUDA kernels of every fused group of each plan
// (GroupKernelSource.h) and compiles each distinct source with NVRTC for
// the architecture, as the CUDA backend does at load. Needs the CUDA
// toolkit (NVRTC and its headers), not a GPU. Prints one line per plan and
// exits 1 if a kernel does not compile, with NVRTC's log.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Cuda/GroupKernelSource.h"
#include "kiln/Runtime/Plan.h"

#include <nvrtc.h>

#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#ifndef KILN_CUDA_INCLUDE_DIR
#define KILN_CUDA_INCLUDE_DIR "/usr/local/cuda/include"
#endif

using namespace kiln::runtime;

namespace {

/// Compiles `source`; empty on success, else NVRTC's message and log.
std::string compile(const std::string &source, const std::string &arch) {
  nvrtcProgram program;
  if (nvrtcCreateProgram(&program, source.c_str(), "kiln_group.cu", 0,
                         nullptr, nullptr) != NVRTC_SUCCESS)
    return "nvrtcCreateProgram failed";
  std::string archOption = "--gpu-architecture=" + arch;
  std::string include = std::string("-I") + KILN_CUDA_INCLUDE_DIR;
  const char *options[] = {archOption.c_str(), include.c_str(),
                           "--std=c++17", "--fmad=false"};
  nvrtcResult result = nvrtcCompileProgram(program, 4, options);
  std::string failure;
  if (result != NVRTC_SUCCESS) {
    size_t size = 0;
    nvrtcGetProgramLogSize(program, &size);
    std::string log(size, '\0');
    nvrtcGetProgramLog(program, log.data());
    failure = std::string(nvrtcGetErrorString(result)) + ":\n" + log;
  }
  nvrtcDestroyProgram(&program);
  return failure;
}

} // namespace

int main(int argc, char **argv) {
  std::string arch = "sm_90a";
  std::vector<std::string> plans;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--arch") == 0 && i + 1 < argc)
      arch = argv[++i];
    else if (argv[i][0] == '-') {
      std::fprintf(stderr, "usage: kiln-nvrtc-check [--arch sm_90a] PLAN...\n");
      return 1;
    } else
      plans.push_back(argv[i]);
  }
  if (plans.empty()) {
    std::fprintf(stderr, "usage: kiln-nvrtc-check [--arch sm_90a] PLAN...\n");
    return 1;
  }
  std::set<std::string> compiled;
  for (const std::string &path : plans) {
    std::string error;
    std::optional<Plan> plan = loadPlan(path, error);
    if (!plan) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(), error.c_str());
      return 1;
    }
    int groups = 0, fresh = 0;
    for (const auto &[name, entry] : plan->entries)
      for (const PlanStep &step : entry.steps) {
        if (!step.group)
          continue;
        ++groups;
        cuda::GroupKernelSource k = cuda::groupKernelSource(*plan, step, error);
        if (k.source.empty()) {
          std::fprintf(stderr, "%s: %s, %s: %s\n", path.c_str(), name.c_str(),
                       step.loc.c_str(), error.c_str());
          return 1;
        }
        if (!compiled.insert(k.source).second)
          continue;
        ++fresh;
        if (std::string failure = compile(k.source, arch); !failure.empty()) {
          std::fprintf(stderr,
                       "%s: %s, %s: the group kernel does not compile for "
                       "%s: %s\n--- source ---\n%s",
                       path.c_str(), name.c_str(), step.loc.c_str(),
                       arch.c_str(), failure.c_str(), k.source.c_str());
          return 1;
        }
      }
    std::printf("%s: %d fused groups, %d new kernels compiled for %s\n",
                path.c_str(), groups, fresh, arch.c_str());
  }
  return 0;
}
