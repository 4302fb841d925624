//===- GroupKernelHostCheck.cpp - Generated group kernels on the host -----===//
//
//   kiln-group-kernel-host-check PLAN...
//
// Runs the CUDA C++ that GroupKernelSource.h generates for every distinct
// fused group of the plans, on the CPU: the source is compiled by the host
// C++ compiler against a shim of the CUDA built-ins it uses (threads of a
// block are std::threads meeting at a std::barrier for __syncthreads,
// blocks run one after another, FP8 conversions are the CPU backend's,
// which match cuda_fp8.h bit for bit), launched as the CUDA backend would,
// and compared with the CPU backend's interpreter (CpuFusedGroup) on the
// same random inputs. Both use the host's libm, so every output must agree
// bit for bit (NaN with NaN). Exits 1 on the first difference. No GPU and
// no CUDA toolkit needed: this checks what the kernels compute; NVRTC
// (kiln-nvrtc-check) checks that they compile for the device.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Cpu/Bf16.h"
#include "kiln/Runtime/Cpu/Fp8.h"
#include "kiln/Runtime/CpuFusedGroup.h"
#include "kiln/Runtime/Cuda/GroupKernelSource.h"
#include "kiln/Runtime/Plan.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <unistd.h>
#include <vector>

using namespace kiln::runtime;

namespace {

// The CUDA built-ins the generated kernels use, for the host.
const char *kShim = R"(#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>
using std::isinf;
using std::isnan;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static
struct kiln_dim3 { unsigned x = 0, y = 0, z = 0; };
static thread_local kiln_dim3 threadIdx;
static kiln_dim3 blockIdx, blockDim, gridDim;
static std::barrier<> *kiln_barrier;
#define __syncthreads() kiln_barrier->arrive_and_wait()
static inline unsigned __float_as_uint(float x) { unsigned u; std::memcpy(&u, &x, 4); return u; }
static inline float __uint_as_float(unsigned u) { float x; std::memcpy(&x, &u, 4); return x; }
static inline float __int_as_float(int u) { float x; std::memcpy(&x, &u, 4); return x; }
static inline int __clz(unsigned x) { return x ? __builtin_clz(x) : 32; }
static std::mutex kiln_atomic;
static inline unsigned atomicMax(unsigned *p, unsigned v) {
  std::lock_guard<std::mutex> lock(kiln_atomic);
  unsigned old = *p;
  if (v > old) *p = v;
  return old;
}
enum { __NV_SATFINITE };
enum kiln_fp8_kind { __NV_E4M3, __NV_E5M2 };
static uint8_t (*kiln_to_e4m3)(float), (*kiln_to_e5m2)(float);
static float (*kiln_of_e4m3)(uint8_t), (*kiln_of_e5m2)(uint8_t);
struct __half { float f; };
static inline uint8_t __nv_cvt_float_to_fp8(float x, int, kiln_fp8_kind k) {
  return k == __NV_E4M3 ? kiln_to_e4m3(x) : kiln_to_e5m2(x);
}
static inline __half __nv_cvt_fp8_to_halfraw(uint8_t c, kiln_fp8_kind k) {
  return {k == __NV_E4M3 ? kiln_of_e4m3(c) : kiln_of_e5m2(c)};
}
static inline float __half2float(__half h) { return h.f; }
)";

const char *kLauncher = R"(
extern "C" void kiln_host_init(uint8_t (*e4)(float), uint8_t (*e5)(float),
                               float (*d4)(uint8_t), float (*d5)(uint8_t)) {
  kiln_to_e4m3 = e4; kiln_to_e5m2 = e5; kiln_of_e4m3 = d4; kiln_of_e5m2 = d5;
}
extern "C" void kiln_host_launch(const void *const *in, int nin,
                                 void *const *out, int nout, long long rows,
                                 long long cols, double *partials) {
  KilnArgs a;
  for (int i = 0; i < nin; ++i) a.in[i] = in[i];
  for (int i = 0; i < nout; ++i) a.out[i] = out[i];
  a.rows = rows; a.cols = cols; a.partials = partials;
  int blocks = (int)((rows + KILN_BLOCK_ROWS - 1) / KILN_BLOCK_ROWS);
  gridDim.x = blocks; blockDim.x = KILN_BLOCK_ROWS;
  for (int b = 0; b < blocks; ++b) {
    blockIdx.x = b;
    std::barrier<> bar(KILN_BLOCK_ROWS);
    kiln_barrier = &bar;
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < KILN_BLOCK_ROWS; ++t)
      threads.emplace_back([&a, t] { threadIdx.x = t; kiln_group(a); });
    for (auto &t : threads) t.join();
  }
#ifdef KILN_HAS_COL_SUM
  blockDim.x = 128;
  for (long long c = 0; c < cols; ++c) {
    blockIdx.x = (unsigned)(c / 128); threadIdx.x = (unsigned)(c % 128);
    kiln_group_col_sum(a, blocks);
  }
#endif
}
)";

/// Random values of `t`: normal floats, or any finite FP8 code.
std::vector<uint8_t> randomBuffer(DType t, int64_t n, std::mt19937 &rng) {
  std::vector<uint8_t> b(n * dtypeBytes(t));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) {
    float x = normal(rng);
    if (t == DType::F32) {
      std::memcpy(b.data() + 4 * i, &x, 4);
    } else if (t == DType::BF16) {
      uint16_t bits = cpu::toBf16Bits(x);
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

/// Element `i` of a buffer of `t` as a float (FP8 decoded).
float valueAt(DType t, const std::vector<uint8_t> &b, int64_t i) {
  switch (t) {
  case DType::F32: {
    float x;
    std::memcpy(&x, b.data() + 4 * i, 4);
    return x;
  }
  case DType::BF16: {
    uint16_t bits;
    std::memcpy(&bits, b.data() + 2 * i, 2);
    return cpu::fromBf16Bits(bits);
  }
  case DType::F8E4M3:
    return cpu::fromE4m3(b[i]);
  default:
    return cpu::fromE5m2(b[i]);
  }
}

bool run(const std::string &command) { return std::system(command.c_str()) == 0; }

using InitFn = void (*)(uint8_t (*)(float), uint8_t (*)(float),
                        float (*)(uint8_t), float (*)(uint8_t));
using LaunchFn = void (*)(const void *const *, int, void *const *, int,
                          long long, long long, double *);

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: kiln-group-kernel-host-check PLAN...\n");
    return 1;
  }
  char dirTemplate[] = "/tmp/kiln-host-kernels-XXXXXX";
  const char *dir = mkdtemp(dirTemplate);
  if (!dir) {
    std::fprintf(stderr, "cannot make a temporary folder\n");
    return 1;
  }
  std::set<std::string> checked;
  std::mt19937 rng(7);
  int kernels = 0;
  for (int p = 1; p < argc; ++p) {
    std::string error;
    std::optional<Plan> plan = loadPlan(argv[p], error);
    if (!plan) {
      std::fprintf(stderr, "%s: %s\n", argv[p], error.c_str());
      return 1;
    }
    for (const auto &[name, entry] : plan->entries)
      for (const PlanStep &step : entry.steps) {
        if (!step.group)
          continue;
        cuda::GroupKernelSource k = cuda::groupKernelSource(*plan, step, error);
        if (k.source.empty()) {
          std::fprintf(stderr, "%s, %s: %s\n", name.c_str(), step.loc.c_str(),
                       error.c_str());
          return 1;
        }
        if (!checked.insert(k.source).second)
          continue;
        std::string base = std::string(dir) + "/k" + std::to_string(kernels++);
        std::string source = k.source;
        source.replace(source.find("#include <cuda_fp8.h>"),
                       std::strlen("#include <cuda_fp8.h>"), kShim);
        {
          std::ofstream f(base + ".cpp");
          f << (k.hasColSum ? "#define KILN_HAS_COL_SUM 1\n" : "") << source
            << kLauncher;
        }
        if (!run("c++ -std=c++20 -O1 -shared -fPIC -ffp-contract=off -pthread -w -o " +
                 base + ".so " + base + ".cpp")) {
          std::fprintf(stderr, "%s, %s: the host compiler rejects %s.cpp\n",
                       name.c_str(), step.loc.c_str(), base.c_str());
          return 1;
        }
        void *lib = dlopen((base + ".so").c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
          std::fprintf(stderr, "%s\n", dlerror());
          return 1;
        }
        auto init = reinterpret_cast<InitFn>(dlsym(lib, "kiln_host_init"));
        auto launch = reinterpret_cast<LaunchFn>(dlsym(lib, "kiln_host_launch"));
        init(cpu::toE4m3, cpu::toE5m2, cpu::fromE4m3, cpu::fromE5m2);

        const FusedGroup &g = *step.group;
        std::vector<std::vector<uint8_t>> in, outKernel, outCpu;
        std::vector<View> inViews, cpuViews;
        std::vector<const void *> inPtrs;
        std::vector<void *> outPtrs;
        for (int64_t id : step.operands) {
          const PlanValue &v = plan->values[id];
          in.push_back(randomBuffer(v.dtype, v.numElements(), rng));
        }
        for (size_t i = 0; i < in.size(); ++i) {
          const PlanValue &v = plan->values[step.operands[i]];
          inViews.push_back(View{in[i].data(), v.dtype, v.shape});
          inPtrs.push_back(in[i].data());
        }
        for (int64_t id : step.results) {
          const PlanValue &v = plan->values[id];
          outKernel.emplace_back(v.numElements() * dtypeBytes(v.dtype), 0);
          outCpu.emplace_back(v.numElements() * dtypeBytes(v.dtype), 0);
        }
        for (size_t i = 0; i < outKernel.size(); ++i) {
          const PlanValue &v = plan->values[step.results[i]];
          outPtrs.push_back(outKernel[i].data());
          cpuViews.push_back(View{outCpu[i].data(), v.dtype, v.shape});
        }
        int64_t blocks = (g.rows + cuda::kKilnGroupBlockRows - 1) /
                         cuda::kKilnGroupBlockRows;
        std::vector<double> partials(
            std::max<int64_t>(1, blocks * g.cols * g.outputs.size()));
        launch(inPtrs.data(), static_cast<int>(inPtrs.size()), outPtrs.data(),
               static_cast<int>(outPtrs.size()), g.rows, g.cols,
               partials.data());
        if (std::string failure = runFusedGroup(g, inViews, cpuViews, false);
            !failure.empty()) {
          std::fprintf(stderr, "the CPU interpreter failed: %s\n",
                       failure.c_str());
          return 1;
        }
        for (size_t o = 0; o < outCpu.size(); ++o) {
          const PlanValue &v = plan->values[step.results[o]];
          for (int64_t i = 0, n = v.numElements(); i < n; ++i) {
            float want = valueAt(v.dtype, outCpu[o], i);
            float got = valueAt(v.dtype, outKernel[o], i);
            if (std::isnan(want) && std::isnan(got))
              continue;
            if (std::memcmp(&want, &got, 4) != 0) {
              std::fprintf(stderr,
                           "%s, %s (fused group %s): result %zu element %lld: "
                           "kernel %.9g, CPU backend %.9g (source %s.cpp)\n",
                           name.c_str(), step.loc.c_str(),
                           step.attrs.count("ops") ? step.str("ops").c_str()
                                                   : "",
                           o, static_cast<long long>(i), got, want,
                           base.c_str());
              return 1;
            }
          }
        }
        dlclose(lib);
      }
  }
  std::printf("%d generated group kernels computed the CPU backend's bits\n",
              kernels);
  run(std::string("rm -rf ") + dir);
  return 0;
}
