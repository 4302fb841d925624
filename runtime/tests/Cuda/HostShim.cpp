//===- HostShim.cpp - Generated CUDA C++ run on the host ------------------===//

#include "HostShim.h"

#include "kiln/Runtime/Numerics/Bf16.h"
#include "kiln/Runtime/Numerics/Fp8.h"

#include <cstdint>
#include <cstdlib>
#include <dlfcn.h>
#include <fstream>

namespace kiln::runtime::hostshim {

namespace {

// The CUDA built-ins the generated kernels use, for the host.
const char *kShim = R"(#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <math.h>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>
using std::isfinite;
using std::isinf;
using std::isnan;
using std::signbit;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __align__(n) alignas(n)
#define __shared__ static
struct kiln_dim3 { unsigned x = 0, y = 0, z = 0; };
static thread_local kiln_dim3 threadIdx, blockIdx;
static kiln_dim3 blockDim, gridDim;
static std::barrier<> *kiln_barrier;
// Warp shuffles: each lane leaves its value in a slot, the warp meets,
// each lane reads its partner's, the warp meets again.
static thread_local unsigned kiln_linear_tid;
static std::vector<std::barrier<> *> kiln_warp_barriers;
static double kiln_shuffle_slots[1024];
template <typename T> static T __shfl_xor_sync(unsigned, T v, int m) {
  unsigned t = kiln_linear_tid;
  kiln_shuffle_slots[t] = (double)v;
  kiln_warp_barriers[t / 32]->arrive_and_wait();
  T r = (T)kiln_shuffle_slots[t ^ (unsigned)m];
  kiln_warp_barriers[t / 32]->arrive_and_wait();
  return r;
}
static unsigned char *kiln_dynamic_shared;
#define KILN_DYNAMIC_SHARED(T, name) T *name = (T *)kiln_dynamic_shared
#define __syncthreads() kiln_barrier->arrive_and_wait()
static inline unsigned __float_as_uint(float x) { unsigned u; std::memcpy(&u, &x, 4); return u; }
static inline float __uint_as_float(unsigned u) { float x; std::memcpy(&x, &u, 4); return x; }
static inline float __int_as_float(int u) { float x; std::memcpy(&x, &u, 4); return x; }
static inline int __clz(unsigned x) { return x ? __builtin_clz(x) : 32; }
static std::mutex kiln_atomic;
template <typename T> static inline T atomicMax(T *p, T v) {
  std::lock_guard<std::mutex> lock(kiln_atomic);
  T old = *p;
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
// A launch: the gx x gy blocks of bx x by threads each run one after
// another (x fastest); a block's threads are std::threads that run `body`
// and meet at the barrier before the next block starts.
template <typename F>
static void kiln_host_grid2(unsigned gx, unsigned gy, unsigned bx,
                            unsigned by, size_t shared, F body) {
  std::vector<unsigned char> dynamic(shared + 16, 0xff);
  kiln_dynamic_shared = dynamic.data() + (16 - (uintptr_t)dynamic.data() % 16) % 16;
  gridDim.x = gx;
  gridDim.y = gy;
  blockDim.x = bx;
  blockDim.y = by;
  std::barrier<> bar(bx * by);
  kiln_barrier = &bar;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  kiln_warp_barriers.clear();
  for (unsigned w = 0; w * 32 < bx * by; ++w) {
    warps.push_back(std::make_unique<std::barrier<>>(
        std::min(32u, bx * by - w * 32)));
    kiln_warp_barriers.push_back(warps.back().get());
  }
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < bx * by; ++t)
    threads.emplace_back([&, t] {
      kiln_linear_tid = t;
      threadIdx.x = t % bx;
      threadIdx.y = t / bx;
      for (unsigned b = 0; b < gx * gy; ++b) {
        blockIdx.x = b % gx;
        blockIdx.y = b / gx;
        body();
        bar.arrive_and_wait(); // the block is done before the next starts
      }
    });
  for (auto &t : threads) t.join();
}
template <typename F>
static void kiln_host_grid(unsigned grid, unsigned block, size_t shared,
                           F body) {
  kiln_host_grid2(grid, 1, block, 1, shared, body);
}
)";

const char *kInit = R"(
extern "C" void kiln_host_init(uint8_t (*e4)(float), uint8_t (*e5)(float),
                               float (*d4)(uint8_t), float (*d5)(uint8_t)) {
  kiln_to_e4m3 = e4; kiln_to_e5m2 = e5; kiln_of_e4m3 = d4; kiln_of_e5m2 = d5;
}
)";

using InitFn = void (*)(uint8_t (*)(float), uint8_t (*)(float),
                        float (*)(uint8_t), float (*)(uint8_t));

} // namespace

Expected<std::unique_ptr<HostLibrary>>
HostLibrary::compile(const std::string &source, const std::string &epilogue,
                     const std::string &base) {
  const std::string include = "#include <cuda_fp8.h>";
  std::string text = source;
  size_t at = text.find(include);
  if (at == std::string::npos)
    return Error("the source does not include <cuda_fp8.h>");
  text.replace(at, include.size(), kShim);
  {
    std::ofstream f(base + ".cpp");
    f << text << kInit << epilogue;
  }
  std::string command = "c++ -std=c++20 -O1 -shared -fPIC -ffp-contract=off "
                        "-pthread -w -o " +
                        base + ".so " + base + ".cpp";
  if (std::system(command.c_str()) != 0)
    return Error("the host compiler rejects " + base + ".cpp");
  void *handle = dlopen((base + ".so").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    return Error(dlerror());
  std::unique_ptr<HostLibrary> lib(new HostLibrary(handle));
  auto init = reinterpret_cast<InitFn>(lib->symbol("kiln_host_init"));
  init(numerics::toE4m3, numerics::toE5m2, numerics::fromE4m3, numerics::fromE5m2);
  return lib;
}

HostLibrary::~HostLibrary() { dlclose(handle); }

void *HostLibrary::symbol(const std::string &name) const {
  return dlsym(handle, name.c_str());
}

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
    return numerics::fromBf16Bits(bits);
  }
  case DType::F8E4M3:
    return numerics::fromE4m3(b[i]);
  default:
    return numerics::fromE5m2(b[i]);
  }
}

} // namespace kiln::runtime::hostshim
