//===- KernelCompiler.cpp - NVRTC with an on-disk cache -------------------===//

#include "kiln/Runtime/Cuda/KernelCompiler.h"
#include "kiln/Runtime/Cache.h"
#include "kiln/Runtime/Support/Files.h"
#include "kiln/Runtime/Support/AtomicFile.h"

#include <cuda_runtime_api.h>
#include <nvrtc.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

// KILN_CUDA_INCLUDE_DIR: the toolkit's headers (cuda_fp8.h), set by CMake.

namespace kiln::runtime::cuda {

namespace {

/// A cached cubin, or "" when there is none that can be read (a cache
/// entry that is not a regular file is ignored, and rewritten).
std::string readFile(const std::filesystem::path &path) {
  Expected<std::string> bytes =
      readRegularFile(path.string(), int64_t(1) << 30, "cached kernel");
  return bytes ? *std::move(bytes) : std::string();
}

} // namespace

std::string defaultKernelCacheDir() { return kilnCacheDir() + "/kernels"; }

Expected<CompiledKernel> compileKernel(const std::string &source,
                                       const std::string &arch,
                                       const std::string &cacheDir,
                                       Arithmetic arithmetic) {
  std::vector<std::string> options = {
      "--gpu-architecture=" + arch, "-I" KILN_CUDA_INCLUDE_DIR, "--std=c++17"};
  if (arithmetic == Arithmetic::Exact)
    options.push_back("--fmad=false");
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  std::string keyText =
      "nvrtc " + std::to_string(major) + "." + std::to_string(minor) + "\n";
  for (const std::string &o : options)
    keyText += o + "\n";
  char key[32];
  std::snprintf(key, sizeof key, "%016llx",
                static_cast<unsigned long long>(fnv1a(source, fnv1a(keyText))));
  std::filesystem::path cached;
  if (!cacheDir.empty()) {
    cached = std::filesystem::path(cacheDir) / (std::string(key) + ".cubin");
    std::string cubin = readFile(cached);
    if (!cubin.empty())
      return CompiledKernel{std::move(cubin), true};
  }

  nvrtcProgram program;
  if (nvrtcCreateProgram(&program, source.c_str(), "kiln_kernel.cu", 0, nullptr,
                         nullptr) != NVRTC_SUCCESS)
    return Error("nvrtcCreateProgram failed");
  std::vector<const char *> argv;
  for (const std::string &o : options)
    argv.push_back(o.c_str());
  nvrtcResult result = nvrtcCompileProgram(
      program, static_cast<int>(argv.size()), argv.data());
  if (result != NVRTC_SUCCESS) {
    size_t size = 0;
    nvrtcGetProgramLogSize(program, &size);
    std::string log(size, '\0');
    nvrtcGetProgramLog(program, log.data());
    nvrtcDestroyProgram(&program);
    return Error(std::string(nvrtcGetErrorString(result)) + ":\n" + log);
  }
  size_t size = 0;
  std::string cubin;
  if (nvrtcGetCUBINSize(program, &size) == NVRTC_SUCCESS) {
    cubin.resize(size);
    nvrtcGetCUBIN(program, cubin.data());
  }
  nvrtcDestroyProgram(&program);
  if (cubin.empty())
    return Error("NVRTC produced no CUBIN for " + arch +
                 " (a real architecture such as sm_90a is needed)");
  if (!cached.empty()) {
    // A reader never sees half a file; a cache that cannot be written only
    // means compiling again next time.
    std::error_code ec;
    std::filesystem::create_directories(cached.parent_path(), ec);
    (void)writeFileAtomically(cached.string(), cubin);
  }
  return CompiledKernel{std::move(cubin), false};
}

std::string kernelArch(int major, int minor) {
  return "sm_" + std::to_string(major * 10 + minor) + (major == 9 ? "a" : "");
}

Expected<std::string> deviceKernelArch(int device) {
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess)
    return Error(std::string("no usable CUDA device (") +
                 cudaGetErrorString(e) + ")");
  if (device >= count)
    return Error(count == 0 ? "no CUDA device"
                            : "no CUDA device " + std::to_string(device));
  cudaDeviceProp p;
  if (cudaError_t e = cudaGetDeviceProperties(&p, device); e != cudaSuccess)
    return Error(cudaGetErrorString(e));
  return kernelArch(p.major, p.minor);
}

} // namespace kiln::runtime::cuda
