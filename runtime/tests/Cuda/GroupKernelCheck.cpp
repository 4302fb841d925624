//===- GroupKernelCheck.cpp - Generated group kernels against the CPU -----===//
//
//   kiln-group-kernel-check [--device host|gpu] PLAN...
//
// Runs the CUDA C++ that GroupKernelSource.h generates for every distinct
// fused group of the plans and compares each result with the CPU backend's
// interpreter (CpuFusedGroup) on the same random inputs. Exits 1 on the
// first difference.
//
// --device host (default; no GPU and no CUDA toolkit needed): the source is
// compiled by the host C++ compiler against a shim of the CUDA built-ins it
// uses (HostShim.h: threads of a block are std::threads meeting at a
// std::barrier for __syncthreads, blocks run one after another, FP8
// conversions are the CPU backend's, which match cuda_fp8.h bit for bit).
// Both sides use the host's libm, so every output must agree bit for bit
// (NaN with NaN).
//
// KILN_KEEP_HOST_KERNELS=1 keeps the host build's sources (kN.cpp) and
// prints where.
//
// --device gpu (builds with the CUDA backend): NVRTC compiles the source
// for GPU 0 (KernelCompiler.h) and cudart launches it as the CUDA backend
// does. Outputs must be the CPU's bits, except in groups that use exp, log
// or sigmoid (CUDA's expf/logf are not libm's): there 2 units in the last
// place of the output's dtype, or a difference below its smallest normal,
// is the stated tolerance. With no
// usable GPU it prints why and exits 77 (ctest counts the test skipped).
//
//===----------------------------------------------------------------------===//

#include "HostShim.h"

#include "kiln/Runtime/Numerics/Bf16.h"
#include "kiln/Runtime/Numerics/Fp8.h"
#include "kiln/Runtime/Cpu/CpuFusedGroup.h"
#include "kiln/Runtime/Cuda/GroupKernelSource.h"
#ifdef KILN_HAVE_CUDA
#include "kiln/Runtime/Cuda/KernelCompiler.h"
#include <cuda_runtime.h>
#endif
#include "kiln/Runtime/Plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <unistd.h>
#include <vector>

using namespace kiln::runtime;
using hostshim::valueAt;

namespace {

// The check's entry point, after the generated source (HostShim.h runs
// the blocks).
const char *kLauncher = R"(
extern "C" void kiln_host_launch(const void *const *in, int nin,
                                 void *const *out, int nout, long long rows,
                                 long long cols, double *partials,
                                 const unsigned *geometry) {
  KilnArgs a;
  for (int i = 0; i < nin; ++i) a.in[i] = in[i];
  for (int i = 0; i < nout; ++i) a.out[i] = out[i];
  a.rows = rows; a.cols = cols; a.partials = partials;
  kiln_host_grid2(geometry[0], geometry[1], geometry[2], geometry[3], 0,
                  [&a] { kiln_group(a); });
#ifdef KILN_HAS_COL_SUM
  kiln_host_grid(geometry[4], geometry[5], 0,
                 [&a, geometry] { kiln_group_col_sum(a, (int)geometry[6]); });
#endif
}
)";

/// Random values of `t`: normal floats, or any finite FP8 code.
/// Random values of `t`: normal floats with, every 61st element, one of
/// zero, minus zero, a subnormal and a large value; any finite FP8 code. A
/// scalar operand (an amax a cast scales with) is |x|, as amaxes are.
std::vector<uint8_t> randomBuffer(DType t, int64_t n, bool scalar,
                                  std::mt19937 &rng) {
  std::vector<uint8_t> b(n * dtypeBytes(t));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float special[] = {0.0f, -0.0f, 1e-40f, 3e4f};
  for (int64_t i = 0; i < n; ++i) {
    float x = i % 61 == 60 ? special[(i / 61) % 4] : normal(rng);
    if (scalar)
      x = std::fabs(x);
    if (t == DType::F32) {
      std::memcpy(b.data() + 4 * i, &x, 4);
    } else if (t == DType::BF16) {
      uint16_t bits = numerics::toBf16Bits(x);
      std::memcpy(b.data() + 2 * i, &bits, 2);
    } else {
      uint8_t code = static_cast<uint8_t>(rng());
      if ((code & 0x7f) == 0x7f || (t == DType::F8E5M2 && (code & 0x7c) == 0x7c))
        code = 0; // NaN or infinity codes
      b[i] = code;
    }
  }
  return b;
}


bool run(const std::string &command) { return std::system(command.c_str()) == 0; }

/// Runs a generated kernel on buffers (inputs, outputs zeroed).
class Launcher {
public:
  virtual ~Launcher() = default;
  /// Empty on success, else why not.
  virtual std::string launch(const cuda::GroupKernelSource &kernel,
                             const FusedGroup &group,
                             std::vector<std::vector<uint8_t>> &in,
                             std::vector<std::vector<uint8_t>> &out) = 0;
  /// Whether results must be the CPU backend's bits.
  virtual bool exact() const = 0;
};

using LaunchFn = void (*)(const void *const *, int, void *const *, int,
                          long long, long long, double *, const unsigned *);

class HostLauncher final : public Launcher {
public:
  explicit HostLauncher(std::string dir) : dir(std::move(dir)) {}
  bool exact() const override { return true; }
  std::string launch(const cuda::GroupKernelSource &k, const FusedGroup &g,
                     std::vector<std::vector<uint8_t>> &in,
                     std::vector<std::vector<uint8_t>> &out) override {
    std::string base = dir + "/k" + std::to_string(count++);
    Expected<std::unique_ptr<hostshim::HostLibrary>> compiled =
        hostshim::HostLibrary::compile(
            (k.hasColSum ? "#define KILN_HAS_COL_SUM 1\n" : "") + k.source,
            kLauncher, base);
    if (!compiled)
      return compiled.error().message();
    std::unique_ptr<hostshim::HostLibrary> lib = std::move(*compiled);
    auto launchFn = reinterpret_cast<LaunchFn>(lib->symbol("kiln_host_launch"));
    std::vector<const void *> inPtrs;
    std::vector<void *> outPtrs;
    for (auto &b : in)
      inPtrs.push_back(b.data());
    for (auto &b : out)
      outPtrs.push_back(b.data());
    Expected<cuda::GroupLaunch> l = cuda::groupLaunch(g);
    if (!l)
      return l.error().message();
    std::vector<double> partials(
        std::max<int64_t>(1, l->partialBytes / sizeof(double)));
    unsigned geometry[] = {l->grid[0],  l->grid[1],   l->block[0],
                           l->block[1], l->sumGrid,   l->sumBlock,
                           static_cast<unsigned>(l->partialBlocks)};
    launchFn(inPtrs.data(), static_cast<int>(inPtrs.size()), outPtrs.data(),
             static_cast<int>(outPtrs.size()), g.rows, g.cols,
             partials.data(), geometry);
    return "";
  }

private:
  std::string dir;
  int count = 0;
};

#ifdef KILN_HAVE_CUDA
std::string cudaText(cudaError_t e) { return cudaGetErrorString(e); }

class GpuLauncher final : public Launcher {
public:
  bool exact() const override { return false; }

  /// Empty when GPU 0 can run kernels, else why not.
  std::string open() {
    Expected<std::string> a = cuda::deviceKernelArch(0);
    if (!a)
      return a.error().message();
    arch = *a;
    return "";
  }

  std::string launch(const cuda::GroupKernelSource &k, const FusedGroup &g,
                     std::vector<std::vector<uint8_t>> &in,
                     std::vector<std::vector<uint8_t>> &out) override {
    Expected<cuda::CompiledKernel> cubin = cuda::compileKernel(
        k.source, arch, cuda::defaultKernelCacheDir(), k.arithmetic);
    if (!cubin)
      return cubin.error().message();
    cudaLibrary_t lib;
    if (cudaError_t e = cudaLibraryLoadData(&lib, cubin->cubin.data(), nullptr,
                                            nullptr, 0, nullptr, nullptr, 0);
        e != cudaSuccess)
      return "loading the CUBIN: " + cudaText(e);
    std::vector<void *> device;
    auto fail = [&](const std::string &what, cudaError_t e) {
      for (void *p : device)
        cudaFree(p);
      cudaLibraryUnload(lib);
      return what + ": " + cudaText(e);
    };
    // KilnArgs: max(inputs, 1) and the output pointers, rows, cols, the
    // column sums' partials; all 8-byte fields, so laid out back to back.
    std::vector<uint64_t> args;
    for (auto &b : in) {
      void *p = nullptr;
      if (cudaError_t e = cudaMalloc(&p, std::max<size_t>(b.size(), 1));
          e != cudaSuccess)
        return fail("cudaMalloc", e);
      device.push_back(p);
      cudaMemcpy(p, b.data(), b.size(), cudaMemcpyHostToDevice);
      args.push_back(reinterpret_cast<uint64_t>(p));
    }
    if (in.empty())
      args.push_back(0);
    size_t firstOut = device.size();
    for (auto &b : out) {
      void *p = nullptr;
      if (cudaError_t e = cudaMalloc(&p, std::max<size_t>(b.size(), 1));
          e != cudaSuccess)
        return fail("cudaMalloc", e);
      device.push_back(p);
      cudaMemset(p, 0, b.size()); // amax outputs start at 0
      args.push_back(reinterpret_cast<uint64_t>(p));
    }
    Expected<cuda::GroupLaunch> l = cuda::groupLaunch(g);
    if (!l)
      return l.error().message();
    int blocks = l->partialBlocks;
    void *partials = nullptr;
    if (cudaError_t e =
            cudaMalloc(&partials, std::max<int64_t>(8, l->partialBytes));
        e != cudaSuccess)
      return fail("cudaMalloc", e);
    device.push_back(partials);
    args.push_back(static_cast<uint64_t>(g.rows));
    args.push_back(static_cast<uint64_t>(g.cols));
    args.push_back(reinterpret_cast<uint64_t>(partials));

    cudaKernel_t kernel;
    if (cudaError_t e = cudaLibraryGetKernel(&kernel, lib, "kiln_group");
        e != cudaSuccess)
      return fail("kiln_group", e);
    void *params[] = {args.data()};
    if (cudaError_t e = cudaLaunchKernel(
            reinterpret_cast<const void *>(kernel),
            dim3(l->grid[0], l->grid[1]), dim3(l->block[0], l->block[1]),
            params, 0, nullptr);
        e != cudaSuccess)
      return fail("launching kiln_group", e);
    if (k.hasColSum) {
      cudaKernel_t sum;
      if (cudaError_t e = cudaLibraryGetKernel(&sum, lib, "kiln_group_col_sum");
          e != cudaSuccess)
        return fail("kiln_group_col_sum", e);
      void *sumParams[] = {args.data(), &blocks};
      if (cudaError_t e = cudaLaunchKernel(
              reinterpret_cast<const void *>(sum), dim3(l->sumGrid),
              dim3(l->sumBlock), sumParams, 0, nullptr);
          e != cudaSuccess)
        return fail("launching kiln_group_col_sum", e);
    }
    if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess)
      return fail("running the kernels", e);
    for (size_t i = 0; i < out.size(); ++i)
      cudaMemcpy(out[i].data(), device[firstOut + i], out[i].size(),
                 cudaMemcpyDeviceToHost);
    for (void *p : device)
      cudaFree(p);
    cudaLibraryUnload(lib);
    return "";
  }

private:
  std::string arch;
};
#endif

/// Units in the last place and the smallest normal of `t`'s values.
std::pair<float, float> precisionOf(DType t) {
  switch (t) {
  case DType::BF16:
    return {0x1p-7f, 0x1p-126f};
  case DType::F8E4M3:
    return {0x1p-3f, 0x1p-6f};
  case DType::F8E5M2:
    return {0x1p-2f, 0x1p-14f};
  default:
    return {0x1p-23f, 0x1p-126f};
  }
}

/// How far a kernel may be from the CPU interpreter: nothing, or, where
/// the group uses exp, log or sigmoid and runs on a GPU (CUDA's expf and
/// logf are not libm's, 2 and 1 ulp), 4 ulp of the element in the result's
/// dtype plus 4 f32 ulp of the result's largest magnitude (the arithmetic
/// is f32, and a difference of two terms, as in silu's gradient, keeps the
/// terms' error, not the result's). Measured on an H100 (docs/cuda.md,
/// "The first GPU run"): up to 4.5 ulp of the element.
constexpr double kTranscendentalUlps = 4;

/// Whether `got` matches `want` (of a result whose largest magnitude is
/// `largest`): bit for bit, or where `transcendental`, within the tolerance
/// above, or below the dtype's smallest normal.
bool matches(float got, float want, DType t, bool transcendental,
             double largest) {
  if (std::isnan(want) && std::isnan(got))
    return true;
  if (std::memcmp(&want, &got, 4) == 0)
    return true;
  if (!transcendental)
    return false;
  auto [ulp, smallest] = precisionOf(t);
  double diff = std::fabs(double(got) - want);
  return diff <= kTranscendentalUlps *
                     (ulp * std::fabs(want) + 0x1p-23 * largest) ||
         diff < smallest;
}

/// The largest differences seen: in ulp of the element in the result's
/// dtype, and as a share of the result's largest magnitude.
struct Worst {
  double ofElement = 0, shareOfLargest = 0;
};

/// Runs `k` through `launcher` and the CPU interpreter on the same random
/// inputs; empty when every output matches, else the first difference.
/// `worst` grows to the largest differences seen.
std::string checkKernel(const Plan &plan, const cuda::PlanGroupKernel &k,
                        Launcher &launcher, std::mt19937 &rng, Worst &worst) {
  const PlanStep &step = *k.step;
  const FusedGroup &g = *step.group;
  std::vector<std::vector<uint8_t>> in, outKernel, outCpu;
  std::vector<View> inViews, cpuViews;
  for (int64_t id : step.operands) {
    const PlanValue &v = plan.values[id];
    in.push_back(randomBuffer(v.dtype, v.numElements(), v.shape.empty(), rng));
    inViews.push_back(View{in.back().data(), v.dtype, v.shape});
  }
  for (int64_t id : step.results) {
    const PlanValue &v = plan.values[id];
    outKernel.emplace_back(v.numElements() * dtypeBytes(v.dtype), 0);
    outCpu.emplace_back(v.numElements() * dtypeBytes(v.dtype), 0);
    cpuViews.push_back(View{outCpu.back().data(), v.dtype, v.shape});
  }
  bool inexact = !launcher.exact() && cuda::usesTranscendentals(g);
  if (std::string failure = launcher.launch(k.kernel, g, in, outKernel);
      !failure.empty())
    return failure;
  if (Error failure = runFusedGroup(g, inViews, cpuViews, false))
    return "the CPU interpreter failed: " + failure.message();
  std::string first;
  for (size_t o = 0; o < outCpu.size(); ++o) {
    const PlanValue &v = plan.values[step.results[o]];
    double largest = 0;
    for (int64_t i = 0, n = v.numElements(); i < n; ++i)
      if (float w = valueAt(v.dtype, outCpu[o], i); std::isfinite(w))
        largest = std::max(largest, std::fabs(double(w)));
    double ulp = precisionOf(v.dtype).first;
    for (int64_t i = 0, n = v.numElements(); i < n; ++i) {
      float want = valueAt(v.dtype, outCpu[o], i);
      float got = valueAt(v.dtype, outKernel[o], i);
      if (std::isfinite(want) && std::isfinite(got) && got != want) {
        double diff = std::fabs(double(got) - want);
        if (want != 0)
          worst.ofElement =
              std::max(worst.ofElement, diff / (ulp * std::fabs(double(want))));
        if (largest > 0)
          worst.shareOfLargest = std::max(worst.shareOfLargest, diff / largest);
      }
      if (!first.empty() || matches(got, want, v.dtype, inexact, largest))
        continue;
      char text[160];
      std::snprintf(text, sizeof text,
                    "result %zu element %lld: kernel %.9g, CPU backend %.9g",
                    o, static_cast<long long>(i), got, want);
      first = std::string("fused group ") +
              (step.attrs.count("ops") ? step.str("ops") : "") + ", " + text;
    }
  }
  if (!first.empty() && std::getenv("KILN_PRINT_FAILED_KERNELS"))
    first += "\n--- source ---\n" + k.kernel.source;
  return first;
}

} // namespace

int main(int argc, char **argv) {
  std::string deviceName = "host";
  std::vector<std::string> plans;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--device") == 0 && i + 1 < argc)
      deviceName = argv[++i];
    else
      plans.push_back(argv[i]);
  }
  if (plans.empty() || (deviceName != "host" && deviceName != "gpu")) {
    std::fprintf(stderr,
                 "usage: kiln-group-kernel-check [--device host|gpu] PLAN...\n");
    return 1;
  }
  char dirTemplate[] = "/tmp/kiln-host-kernels-XXXXXX";
  const char *dir = mkdtemp(dirTemplate);
  if (!dir) {
    std::fprintf(stderr, "cannot make a temporary folder\n");
    return 1;
  }
  std::unique_ptr<Launcher> launcher;
  if (deviceName == "host") {
    launcher = std::make_unique<HostLauncher>(dir);
  } else {
#ifdef KILN_HAVE_CUDA
    auto gpu = std::make_unique<GpuLauncher>();
    if (std::string why = gpu->open(); !why.empty()) {
      std::printf("skipped: %s\n", why.c_str());
      return 77;
    }
    launcher = std::move(gpu);
#else
    std::printf("skipped: this build has no CUDA backend\n");
    return 77;
#endif
  }

  std::set<std::string> checked;
  std::mt19937 rng(7);
  int kernels = 0, tiled = 0, contracted = 0, failures = 0;
  Worst worst;
  for (const std::string &path : plans) {
    Expected<Plan> plan = loadPlan(path);
    int groups = 0;
    Expected<std::vector<cuda::PlanGroupKernel>> fresh =
        plan ? cuda::distinctGroupKernels(*plan, checked, groups)
             : plan.takeError();
    if (!fresh) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(),
                   fresh.error().message().c_str());
      return 1;
    }
    for (const cuda::PlanGroupKernel &k : *fresh) {
      ++kernels;
      tiled += k.kernel.tiled;
      contracted += k.kernel.arithmetic == cuda::Arithmetic::Contracted;
      if (std::string failure = checkKernel(*plan, k, *launcher, rng, worst);
          !failure.empty()) {
        std::fprintf(stderr, "%s, %s: %s\n", k.entry.c_str(),
                     k.step->loc.c_str(), failure.c_str());
        ++failures;
      }
    }
  }
  // The numbers the tolerance is stated from.
  std::printf("largest difference from the CPU backend: %.3g ulp of the "
              "element, %.3g of the result's largest magnitude\n",
              worst.ofElement, worst.shareOfLargest);
  if (failures) {
    std::printf("%d of %d generated group kernels differ from the CPU backend "
                "(KILN_PRINT_FAILED_KERNELS=1 prints their source)\n",
                failures, kernels);
    return 1;
  }
  std::printf("%d generated group kernels (%d one thread per point, %d by "
              "rows) on the %s match the CPU backend (%s)\n",
              kernels, tiled, kernels - tiled, deviceName.c_str(),
              launcher->exact() ? "bit for bit"
                                : "bit for bit, or within 4 ulp of the element "
                                  "and 4 f32 ulp of the largest where exp/log "
                                  "are used");
  // The compile policy (groupArithmetic): --fmad=false only where the bits
  // are asserted.
  std::printf("%d compiled exact (--fmad=false), %d with contracted "
              "multiply-adds (exp or log)\n",
              kernels - contracted, contracted);
  if (std::getenv("KILN_KEEP_HOST_KERNELS"))
    std::printf("host kernels kept in %s\n", dir);
  else
    run(std::string("rm -rf ") + dir);
  return 0;
}
