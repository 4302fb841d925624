//===- CudnnGraphCheck.cpp - cuDNN SDPA graphs against the frontend -------===//
//
//   kiln-cudnn-graph-check
//
// Without a GPU: describes the cuDNN SDPA graphs CudnnAttention builds
// (CudnnAttention.cpp: tensors by strides in the plan's layout, the stats,
// the causal band, GQA, the backward's deterministic algorithm) for a set
// of attention configurations, runs cudnn-frontend's own validation on
// them and lowers them to cuDNN operation graphs without a handle
// (validateSdpa): the frontend's checks of dims, strides, data types and
// of what its SDPA supports on the device, and cuDNN's of each operation's
// dims against its operands' (a V whose head dim is not Q's fails there).
// Neither checks everything (an output's layout can be any the operation
// takes). The frontend reads the device's
// properties with cudaGetDeviceProperties and cuDNN's version with
// cudnnGetVersion; this program defines those (and cudaGetDevice), so
// nothing touches a device, standing in for a Hopper GPU (sm_90) with the
// cuDNN of the headers, the same with cuDNN 9.15.0 (whose backward of a
// sequence that is not a multiple of 128 takes CudnnAttention's own
// padding mask), and a Blackwell GPU (sm_100). Building the plans (cuDNN's
// heuristics, check_support, kernels) needs a GPU and is left to
// kiln-op-kernel-check --device gpu.
//
// Each configuration must validate in the expected variant (on sm_100 the
// backward's deterministic algorithm is refused, so the default one is
// next); a head dimension that is not a multiple of 8 must be refused.
// Exits 1 after the lines if anything surprised.
//
//===----------------------------------------------------------------------===//

#include "CudnnAttention.h"

#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdio>
#include <cstring>
#include <string>

using namespace kiln::runtime;
using namespace kiln::runtime::cuda;

namespace {
int standInMajor = 9;
size_t standInVersion = CUDNN_VERSION;
} // namespace

extern "C" size_t cudnnGetVersion() { return standInVersion; }

/// The stand-in device: an H100 SXM (sm_90), or a B200 (sm_100).
extern "C" cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int) {
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "stand-in sm_%d0", standInMajor);
  prop->major = standInMajor;
  prop->minor = 0;
  prop->multiProcessorCount = standInMajor == 9 ? 132 : 148;
  prop->sharedMemPerBlockOptin = 232448;
  prop->sharedMemPerMultiprocessor = 233472;
  prop->totalGlobalMem = size_t(80) << 30;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  return cudaSuccess;
}

extern "C" cudaError_t cudaGetDevice(int *device) {
  *device = 0;
  return cudaSuccess;
}

namespace {

SdpaConfig config(bool backward, int64_t b, int64_t s, int64_t h, int64_t hkv,
                  int64_t d, bool causal) {
  SdpaConfig c;
  c.backward = backward;
  c.batch = b;
  c.seq = s;
  c.heads = h;
  c.kvHeads = hkv;
  c.headDim = d;
  c.causal = causal;
  c.scale = 0.125f;
  return c;
}

/// Validates `c`; `want` is the variant expected, or, starting with
/// "refused: ", a part of the expected refusal. Prints one line; false on
/// a surprise.
bool check(const SdpaConfig &c, const std::string &want) {
  Expected<std::string> got = validateSdpa(c);
  std::string text = got ? *got : "refused: " + got.error().message();
  bool ok = want.rfind("refused: ", 0) == 0
                ? !got && text.find(want.substr(9)) != std::string::npos
                : got && *got == want;
  std::printf("%s sm_%d0 cuDNN %zu %s: %s\n", ok ? "ok" : "UNEXPECTED",
              standInMajor, standInVersion, c.describe().c_str(), text.c_str());
  if (!ok)
    std::printf("  expected: %s\n", want.c_str());
  return ok;
}

} // namespace

int main() {
  bool ok = true;
  // The backward adds the padding mask itself before cuDNN 9.16 when the
  // sequence is not a multiple of 128 (CudnnAttention.cpp).
  auto bwd = [&](const char *variant, int64_t seq) {
    bool padding = standInVersion < 91600 && seq % 128 != 0;
    return std::string(variant) + (padding ? ", padding mask" : "");
  };
  for (auto [major, version] : {std::pair<int, size_t>{9, CUDNN_VERSION},
                                {9, 91500},
                                {10, CUDNN_VERSION}}) {
    standInMajor = major;
    standInVersion = version;
    const char *backward = major == 9 ? "deterministic" : "default";
    // The tiny model; llama3-1b at 8192 tokens; head dim 128, not causal,
    // a sequence no multiple of 64; GQA down to one kv head.
    for (const SdpaConfig &c : {config(false, 4, 32, 4, 2, 16, true),
                                config(false, 1, 8192, 32, 8, 64, true),
                                config(false, 1, 200, 4, 4, 128, false),
                                config(false, 2, 100, 4, 1, 64, true)})
      ok &= check(c, "the frontend's choice");
    for (const SdpaConfig &c : {config(true, 4, 32, 4, 2, 16, true),
                                config(true, 1, 8192, 32, 8, 64, true),
                                config(true, 1, 200, 4, 4, 128, false),
                                config(true, 2, 100, 4, 1, 64, true)})
      ok &= check(c, bwd(backward, c.seq));
    // What the frontend refuses is refused, not run.
    ok &= check(config(false, 1, 64, 2, 2, 12, true), "refused: hidden_dim");
    ok &= check(config(true, 1, 64, 2, 2, 12, true), "refused: hidden_dim");
  }
  std::printf(ok ? "the cuDNN SDPA graphs pass cudnn-frontend's validation "
                   "and lower to cuDNN operation graphs\n"
                 : "surprises above\n");
  return ok ? 0 : 1;
}
