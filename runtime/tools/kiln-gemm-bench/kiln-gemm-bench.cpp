//===- kiln-gemm-bench.cpp - The GEMM wrapper against cuBLASLt's best ----===//
//
//   kiln-gemm-bench [--runs N] [--warmup W] [--top K] [--fast-accum]
//                   [--dtype bf16|fp8|fp8-rowwise|all] [NAME=T,OUT,IN ...]
//
// For each linear layer shape (T tokens, OUT output features, IN input
// features; built in: the q/k/v/o/gate/up/down projections of Llama-3 1B
// and of an 8B-wide slice, dim 4096 and ffn 14336, at 2048 and 8192 tokens)
// and each of its three GEMMs (forward, input gradient, weight gradient) in
// bf16 and FP8 (forward e4m3 x e4m3, gradients e5m2 x e4m3, as the FP8
// recipes quantize them; tensorwise and rowwise scales), prints:
//
//   - the wrapper's time (Gemms, the algorithm it caches; scaled GEMMs
//     include the reciprocal kernel, and the epilogue where it falls back):
//     median of N runs after W warm-up runs, each timed by CUDA events;
//   - cuBLASLt's best: each of the heuristic's top K algorithms for the same
//     descriptors timed the same way, the fastest median;
//   - their ratio and the wrapper's TFLOP/s (2 T OUT IN per GEMM).
//
// A benchmark, not a test. Exits 77 when no GPU is usable.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Numerics/Bf16.h"
#include "kiln/Runtime/Numerics/Fp8.h"
#include "kiln/Runtime/Cuda/Gemm.h"

#include "GemmInternal.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

using namespace kiln::runtime;
using cuda::Gemms;
using cuda::gemm::Kind;
using cuda::gemm::LtMatmul;
using cuda::gemm::Problem;
using cuda::gemm::ScaleMode;

namespace {

struct Layer {
  std::string name;
  int64_t tokens, out, in;
};

std::vector<Layer> builtInLayers() {
  struct Model {
    const char *name;
    int64_t dim, kv, ffn;
  };
  // Llama-3.2 1B: 32 heads of 64, 8 kv heads; ffn 8192. 8B: 32 heads of
  // 128, 8 kv heads; ffn 14336. Projections of equal shape share a row.
  const Model models[] = {{"1b", 2048, 512, 8192}, {"8b", 4096, 1024, 14336}};
  std::vector<Layer> layers;
  for (int64_t tokens : {2048, 8192})
    for (const Model &m : models) {
      std::string p = std::string(m.name) + " ";
      layers.push_back({p + "q/o", tokens, m.dim, m.dim});
      layers.push_back({p + "k/v", tokens, m.kv, m.dim});
      layers.push_back({p + "gate/up", tokens, m.ffn, m.dim});
      layers.push_back({p + "down", tokens, m.dim, m.ffn});
    }
  return layers;
}

struct Options {
  int runs = 20, warmup = 5, top = 8;
  bool fastAccumulation = false;
  std::string dtype = "all";
};

/// Device memory freed with the object.
struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) {
    if (cudaMalloc(&ptr, std::max<size_t>(bytes, 1)) != cudaSuccess)
      ptr = nullptr;
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer &) = delete;
  void *ptr = nullptr;
};

/// Random normal values of `t` (FP8: quantized with a tensorwise scale of
/// 64), a 1 MiB block repeated: the bench times, it does not check.
bool fillRandom(void *device, DType t, int64_t count, std::mt19937 &rng) {
  const int64_t block = 1 << 20;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  size_t bytes = dtypeBytes(t);
  std::vector<uint8_t> host(block * bytes);
  for (int64_t i = 0; i < block; ++i) {
    float x = normal(rng);
    uint8_t *at = host.data() + i * bytes;
    if (t == DType::BF16) {
      uint16_t bits = numerics::toBf16Bits(x);
      std::memcpy(at, &bits, 2);
    } else if (t == DType::F32) {
      std::memcpy(at, &x, 4);
    } else {
      *at = t == DType::F8E4M3 ? numerics::toE4m3(64 * x) : numerics::toE5m2(64 * x);
    }
  }
  for (int64_t done = 0; done < count; done += block) {
    int64_t n = std::min(block, count - done);
    if (cudaMemcpy(static_cast<uint8_t *>(device) + done * bytes, host.data(),
                   n * bytes, cudaMemcpyHostToDevice) != cudaSuccess)
      return false;
  }
  return true;
}

/// Median milliseconds of `runs` calls after `warmup`; negative on error.
double timeMedian(const std::function<bool()> &call, const Options &o,
                  cudaStream_t stream) {
  for (int i = 0; i < o.warmup; ++i)
    if (!call())
      return -1;
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> times;
  for (int i = 0; i < o.runs; ++i) {
    cudaEventRecord(start, stream);
    bool ok = call();
    cudaEventRecord(stop, stream);
    if (!ok || cudaEventSynchronize(stop) != cudaSuccess) {
      times.clear();
      break;
    }
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (times.empty())
    return -1;
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

/// One GEMM of a layer, in plan terms (Problem's m, n, k).
struct Gemm {
  const char *label; // fwd, dgrad, wgrad
  Problem problem;
};

/// The three GEMMs of a layer for a dtype: bf16, fp8, fp8-rowwise.
std::vector<Gemm> gemmsOf(const Layer &l, const std::string &dtype, bool fast) {
  std::vector<Gemm> out;
  int64_t t = l.tokens;
  if (dtype == "bf16") {
    const std::pair<const char *, Kind> kinds[] = {{"fwd", Kind::Linear},
                                                   {"dgrad", Kind::GradInput},
                                                   {"wgrad", Kind::GradWeight}};
    for (auto [label, kind] : kinds) {
      Problem p;
      p.kind = kind;
      p.m = t;
      p.n = l.out;
      p.k = l.in;
      out.push_back({label, p});
    }
    return out;
  }
  // FP8: every GEMM a scaled_matmul of K-major operands. dgrad: a = dy
  // [t, out] e5m2, b = w^T [in, out]; wgrad: a = dy^T [out, t] e5m2,
  // b = x^T [in, t].
  struct Dims {
    const char *label;
    DType a;
    int64_t m, n, k;
  };
  const Dims dims[] = {{"fwd", DType::F8E4M3, t, l.out, l.in},
                       {"dgrad", DType::F8E5M2, t, l.in, l.out},
                       {"wgrad", DType::F8E5M2, l.out, l.in, t}};
  for (const Dims &d : dims) {
    Problem p;
    p.kind = Kind::Scaled;
    p.first = d.a;
    p.second = DType::F8E4M3;
    p.m = d.m;
    p.n = d.n;
    p.k = d.k;
    p.fastAccumulation = fast;
    p.scales = dtype == "fp8" ? ScaleMode::Scalar : ScaleMode::OuterVector;
    out.push_back({d.label, p});
  }
  return out;
}

class Bench {
public:
  Bench(Gemms &gemms, cublasLtHandle_t handle, void *workspace,
        cudaStream_t stream, const Options &o)
      : gemms(gemms), handle(handle), workspace(workspace), stream(stream),
        o(o) {}

  void run(const Layer &layer, const Gemm &g, std::mt19937 &rng);

private:
  Gemms &gemms;
  cublasLtHandle_t handle;
  void *workspace;
  cudaStream_t stream;
  const Options &o;
};

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

void Bench::run(const Layer &layer, const Gemm &g, std::mt19937 &rng) {
  Problem p = g.problem;
  bool scaled = p.kind == Kind::Scaled;
  // Operand sizes in the plan call's order (Gemm.h).
  int64_t firstCount = 0, secondCount = 0, outCount = 0;
  switch (p.kind) {
  case Kind::Linear:
  case Kind::Scaled:
    firstCount = p.m * p.k, secondCount = p.n * p.k, outCount = p.m * p.n;
    break;
  case Kind::GradInput:
    firstCount = p.m * p.n, secondCount = p.n * p.k, outCount = p.m * p.k;
    break;
  case Kind::GradWeight:
    firstCount = p.m * p.n, secondCount = p.m * p.k, outCount = p.n * p.k;
    break;
  }
  DType firstType = scaled ? p.first : DType::BF16;
  DType secondType = scaled ? p.second : DType::BF16;
  DeviceBuffer first(firstCount * dtypeBytes(firstType)),
      second(secondCount * dtypeBytes(secondType)), out(outCount * 2),
      scratch(scaled ? outCount * 4 : 0), sa(4 * p.m), sb(4 * p.n);
  std::string row = layer.name + " T=" + std::to_string(layer.tokens);
  const char *dtypeLabel = !scaled                         ? "bf16"
                           : p.scales == ScaleMode::Scalar ? "fp8 tensor"
                                                           : "fp8 rowwise";
  auto fail = [&](const std::string &why) {
    std::printf("%-22s %-6s %-12s error: %s\n", row.c_str(), g.label,
                dtypeLabel, why.c_str());
  };
  if (!first.ptr || !second.ptr || !out.ptr || !scratch.ptr || !sa.ptr ||
      !sb.ptr)
    return fail("cudaMalloc failed");
  if (!fillRandom(first.ptr, firstType, firstCount, rng) ||
      !fillRandom(second.ptr, secondType, secondCount, rng))
    return fail("cudaMemcpy failed");
  std::vector<float> ones(std::max(p.m, p.n), 1.0f / 64);
  cudaMemcpy(sa.ptr, ones.data(), 4 * p.m, cudaMemcpyHostToDevice);
  cudaMemcpy(sb.ptr, ones.data(), 4 * p.n, cudaMemcpyHostToDevice);
  cudaDeviceSynchronize(); // the copies have landed before any timing

  // The wrapper.
  Error error;
  Gemms::Scaled s;
  s.aType = p.first;
  s.bType = p.second;
  s.a = first.ptr;
  s.b = second.ptr;
  s.aScale = static_cast<const float *>(sa.ptr);
  s.bScale = static_cast<const float *>(sb.ptr);
  s.aRowwise = s.bRowwise = p.scales == ScaleMode::OuterVector;
  s.out = out.ptr;
  s.m = p.m;
  s.n = p.n;
  s.k = p.k;
  s.fastAccumulation = p.fastAccumulation;
  auto wrapperCall = [&]() {
    switch (p.kind) {
    case Kind::Linear:
      error = gemms.linear(DType::BF16, first.ptr, second.ptr, out.ptr, p.m,
                           p.k, p.n, stream);
      break;
    case Kind::GradInput:
      error = gemms.linearGradInput(DType::BF16, first.ptr, second.ptr, out.ptr,
                                    p.m, p.n, p.k, stream);
      break;
    case Kind::GradWeight:
      error = gemms.linearGradWeight(DType::BF16, first.ptr, second.ptr,
                                     out.ptr, p.m, p.n, p.k, stream);
      break;
    case Kind::Scaled:
      error = gemms.scaledMatmul(s, stream);
      break;
    }
    return !error;
  };
  double wrapperMs = timeMedian(wrapperCall, o, stream);
  if (wrapperMs < 0)
    return fail(!error ? "CUDA error while timing" : error.message());
  // Rowwise problems all take the same path on a device.
  bool epilogue =
      p.scales == ScaleMode::OuterVector && gemms.scaleEpilogueProblems() > 0;

  // cuBLASLt's top K for the same descriptors; the fallback's unscaled
  // GEMM where the wrapper falls back.
  Problem lt = p;
  if (!scaled) {
    lt.first = lt.second = lt.out = DType::BF16;
  } else if (epilogue) {
    lt.scales = ScaleMode::None;
    lt.out = DType::F32;
  }
  Expected<LtMatmul> matmul = LtMatmul::create(lt);
  if (!matmul)
    return fail(matmul.error().message());
  if (lt.scales != ScaleMode::None) {
    // Reciprocal buffers of the right lengths (values only matter for
    // overflow; 1/64 keeps the products in range).
    if (Error e = matmul->setScales(static_cast<const float *>(sb.ptr),
                                    static_cast<const float *>(sa.ptr)))
      return fail(e.message());
  }
  std::vector<cublasLtMatmulHeuristicResult_t> results;
  if (Error e = matmul->heuristics(handle, kWorkspaceBytes, o.top, results))
    return fail(e.message());
  double bestMs = -1;
  int bestIndex = -1;
  void *target = epilogue ? scratch.ptr : out.ptr;
  for (size_t i = 0; i < results.size(); ++i) {
    const cublasLtMatmulAlgo_t &algo = results[i].algo;
    double ms = timeMedian(
        [&]() {
          return matmul->run(handle, algo, first.ptr, second.ptr, target,
                             workspace, kWorkspaceBytes,
                             stream) == CUBLAS_STATUS_SUCCESS;
        },
        o, stream);
    if (ms >= 0 && (bestMs < 0 || ms < bestMs)) {
      bestMs = ms;
      bestIndex = static_cast<int>(i);
    }
  }
  double flops = 2.0 * double(p.m) * double(p.n) * double(p.k);
  char mnk[48];
  std::snprintf(mnk, sizeof mnk, "%lldx%lldx%lld", static_cast<long long>(p.m),
                static_cast<long long>(p.n), static_cast<long long>(p.k));
  char best[32] = "-", ratio[16] = "-";
  if (bestMs >= 0) {
    std::snprintf(best, sizeof best, "%.3f (#%d/%zu)", bestMs, bestIndex,
                  results.size());
    std::snprintf(ratio, sizeof ratio, "%.2f", wrapperMs / bestMs);
  }
  std::printf("%-22s %-6s %-12s %-18s %10.3f %16s %6s %8.1f%s\n", row.c_str(),
              g.label, dtypeLabel, mnk, wrapperMs, best, ratio,
              flops / (wrapperMs * 1e-3) / 1e12,
              epilogue ? "  epilogue fallback" : "");
}

int usage() {
  std::fprintf(stderr,
               "usage: kiln-gemm-bench [--runs N] [--warmup W] [--top K] "
               "[--fast-accum]\n"
               "         [--dtype bf16|fp8|fp8-rowwise|all] "
               "[NAME=TOKENS,OUT,IN ...]\n");
  return 1;
}

} // namespace

int main(int argc, char **argv) {
  Options o;
  std::vector<Layer> layers;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto next = [&]() { return i + 1 < argc ? argv[++i] : nullptr; };
    if (arg == "--runs" || arg == "--warmup" || arg == "--top") {
      const char *v = next();
      if (!v)
        return usage();
      (arg == "--runs"     ? o.runs
       : arg == "--warmup" ? o.warmup
                           : o.top) = std::max(1, std::atoi(v));
    } else if (arg == "--fast-accum") {
      o.fastAccumulation = true;
    } else if (arg == "--dtype") {
      const char *v = next();
      if (!v)
        return usage();
      o.dtype = v;
    } else {
      size_t eq = arg.find('=');
      long long t = 0, out = 0, in = 0;
      if (eq == std::string::npos ||
          std::sscanf(arg.c_str() + eq + 1, "%lld,%lld,%lld", &t, &out, &in) !=
              3 ||
          t <= 0 || out <= 0 || in <= 0)
        return usage();
      layers.push_back({arg.substr(0, eq), t, out, in});
    }
  }
  std::vector<std::string> dtypes;
  if (o.dtype == "all")
    dtypes = {"bf16", "fp8", "fp8-rowwise"};
  else if (o.dtype == "bf16" || o.dtype == "fp8" || o.dtype == "fp8-rowwise")
    dtypes = {o.dtype};
  else
    return usage();
  if (layers.empty())
    layers = builtInLayers();

  int devices = 0;
  if (cudaError_t e = cudaGetDeviceCount(&devices);
      e != cudaSuccess || devices == 0) {
    std::printf("skipped: %s\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device");
    return 77;
  }
  cudaSetDevice(0);
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  Expected<std::unique_ptr<Gemms>> gemms = Gemms::create();
  cublasLtHandle_t handle = nullptr;
  DeviceBuffer workspace(kWorkspaceBytes);
  cudaStream_t stream = nullptr;
  if (!gemms || cublasLtCreate(&handle) != CUBLAS_STATUS_SUCCESS ||
      !workspace.ptr || cudaStreamCreate(&stream) != cudaSuccess) {
    std::fprintf(stderr, "setup failed: %s\n", gemms.error().message().c_str());
    return 1;
  }
  std::printf("GPU 0: %s (sm_%d%d), cuBLASLt %zu; median of %d runs after "
              "%d warm-up; cuBLASLt's best of its top %d%s\n",
              prop.name, prop.major, prop.minor, cublasLtGetVersion(), o.runs,
              o.warmup, o.top,
              o.fastAccumulation ? "; FP8 fast accumulation" : "");
  std::printf("%-22s %-6s %-12s %-18s %10s %16s %6s %8s\n", "layer", "gemm",
              "dtype", "MxNxK", "kiln ms", "cuBLASLt best ms", "ratio",
              "TFLOP/s");
  Bench bench(**gemms, handle, workspace.ptr, stream, o);
  std::mt19937 rng(1);
  for (const Layer &layer : layers)
    for (const std::string &dtype : dtypes)
      for (const Gemm &g : gemmsOf(layer, dtype, o.fastAccumulation))
        bench.run(layer, g, rng);
  gemms->reset();
  cublasLtDestroy(handle);
  cudaStreamDestroy(stream);
  return 0;
}
