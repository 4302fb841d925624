//===- Gemm.cpp - The plan's GEMMs on cuBLASLt ----------------------------===//
//
// One cuBLASLt handle, one 32 MiB workspace (the size NVIDIA's cuBLAS
// documentation recommends for Hopper; more than other GPUs use) and a cache
// of problems. A problem's first call builds its descriptors, asks
// cublasLtMatmulAlgoGetHeuristic for the best algorithm and allocates what
// it needs; later calls only launch, so a step can be captured in a graph
// once every shape has run.
//
// scaled_matmul, per call: kiln_gemm_reciprocals turns the plan's scales
// into the problem's own reciprocal buffers, then cuBLASLt reads those
// through CUBLASLT_MATMUL_DESC_A/B_SCALE_POINTER. Rowwise scales use the
// outer-vector scale mode where cuBLASLt has an algorithm for it (sm_90,
// cuBLAS 12.9 and later); elsewhere (or when forced) the problem falls back
// to an unscaled FP8 GEMM into an f32 scratch and kiln_gemm_scale_bf16.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Cuda/Gemm.h"

#include "GemmInternal.h"

#include <map>
#include <memory>

namespace kiln::runtime::cuda {

Gemms::~Gemms() = default;

namespace {

using namespace gemm;

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

std::string cudaText(const std::string &what, cudaError_t e) {
  return what + ": " + cudaGetErrorString(e);
}

/// Offsets into a problem's scale buffer start 256-byte aligned.
int64_t roundUp(int64_t count) { return (count + 63) / 64 * 64; }

struct DeviceFree {
  void operator()(float *p) const { cudaFree(p); }
};

/// A problem whose algorithm has been chosen.
struct Entry {
  std::optional<LtMatmul> lt; // for the fallback: the unscaled GEMM into f32
  cublasLtMatmulAlgo_t algo{};
  /// Scaled GEMMs: 1/sb (rb, one or n floats) then 1/sa (ra, one or m),
  /// in one allocation.
  std::unique_ptr<float, DeviceFree> buffer;
  float *ra = nullptr, *rb = nullptr;
  int64_t raCount = 0, rbCount = 0, bytes = 0;
  bool epilogue = false;
};

class LtGemms final : public Gemms {
public:
  LtGemms(cublasLtHandle_t handle, void *workspace, bool forceEpilogue)
      : handle(handle), workspace(workspace), forceEpilogue(forceEpilogue) {}

  ~LtGemms() override {
    cache.clear();
    if (scratch)
      cudaFree(scratch);
    cudaFree(workspace);
    cublasLtDestroy(handle);
  }

  Error linear(DType t, const void *x, const void *w, void *y, int64_t m,
               int64_t k, int64_t n, cudaStream_t stream) override {
    return plain(Kind::Linear, t, x, w, y, m, n, k, stream);
  }
  Error linearGradInput(DType t, const void *dy, const void *w, void *dx,
                        int64_t m, int64_t n, int64_t k,
                        cudaStream_t stream) override {
    return plain(Kind::GradInput, t, dy, w, dx, m, n, k, stream);
  }
  Error linearGradWeight(DType t, const void *dy, const void *x, void *dw,
                         int64_t m, int64_t n, int64_t k,
                         cudaStream_t stream) override {
    return plain(Kind::GradWeight, t, dy, x, dw, m, n, k, stream);
  }

  Error scaledMatmul(const Scaled &g, cudaStream_t stream) override;

  int64_t deviceBytes() const override {
    int64_t bytes = static_cast<int64_t>(kWorkspaceBytes + scratchBytes);
    for (const auto &[problem, entry] : cache)
      bytes += entry.bytes;
    return bytes;
  }
  int cachedAlgorithms() const override {
    return static_cast<int>(cache.size());
  }
  int scaleEpilogueProblems() const override {
    int count = 0;
    for (const auto &[problem, entry] : cache)
      count += entry.epilogue;
    return count;
  }

private:
  Error plain(Kind kind, DType t, const void *first, const void *second,
              void *out, int64_t m, int64_t n, int64_t k, cudaStream_t stream);
  /// Empty sizes: nothing to do, or (no inner dimension) zeros. Sets
  /// `done` when it handled the call.
  Error degenerate(const Problem &p, void *out, cudaStream_t stream,
                   bool &done);
  /// The cached entry of `p`, made on its first call.
  Expected<Entry *> find(const Problem &p, cudaStream_t stream);
  /// cuBLASLt's first algorithm for `lt`, or why there is none.
  Error choose(const LtMatmul &lt, const std::string &arch,
               cublasLtMatmulAlgo_t &algo);
  /// Builds `p`'s descriptors into `e` with cuBLASLt's first algorithm.
  Error chooseFor(Entry &e, const Problem &p, const std::string &arch);
  Error allocateScales(const Problem &p, Entry &e);
  Error growScratch(size_t bytes);
  Error reserveFallbackScratch(int64_t bytes) override {
    if (Error e = growScratch(static_cast<size_t>(bytes)))
      return e;
    reserved = true;
    return Error::success();
  }

  cublasLtHandle_t handle;
  void *workspace;
  bool forceEpilogue;
  std::map<Problem, Entry> cache;
  ScaleKernels kernels;
  /// The fallback's f32 products, shared by its problems (one stream at a
  /// time) and as large as the largest.
  void *scratch = nullptr;
  size_t scratchBytes = 0;
  /// Set by reserveFallbackScratch: the scratch never moves again.
  bool reserved = false;
};

Error LtGemms::degenerate(const Problem &p, void *out, cudaStream_t stream,
                          bool &done) {
  LtDims dims = ltDims(p);
  done = dims.m == 0 || dims.n == 0 || dims.k == 0;
  if (dims.m == 0 || dims.n == 0 || dims.k != 0)
    return Error::success();
  // A sum over nothing: zeros, whose bits are 0 in bf16 and f32 alike.
  if (cudaError_t e =
          cudaMemsetAsync(out, 0, dims.m * dims.n * dtypeBytes(p.out), stream);
      e != cudaSuccess)
    return Error(
        cudaText(std::string(kindName(p.kind)) + ": cudaMemsetAsync", e));
  return Error::success();
}

Error LtGemms::choose(const LtMatmul &lt, const std::string &arch,
                      cublasLtMatmulAlgo_t &algo) {
  std::vector<cublasLtMatmulHeuristicResult_t> results;
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  if (Error error = lt.heuristics(handle, kWorkspaceBytes, 1, results, &status))
    return error;
  if (results.empty())
    return Error(
        "cuBLASLt cublasLtMatmulAlgoGetHeuristic: " + statusName(status) +
        ", no algorithm for " + describe(lt.problem()) + " on " + arch);
  algo = results[0].algo;
  return Error::success();
}

Error LtGemms::growScratch(size_t bytes) {
  if (bytes <= scratchBytes)
    return Error::success();
  if (reserved)
    return Error("needs " + std::to_string(bytes) +
                 " bytes of f32 scratch, more than the " +
                 std::to_string(scratchBytes) +
                 " reserved for the plan before any capture");
  if (scratch)
    cudaFree(scratch);
  scratch = nullptr;
  scratchBytes = 0;
  if (cudaError_t e = cudaMalloc(&scratch, bytes); e != cudaSuccess)
    return Error(cudaText("allocating the scaled GEMMs' f32 scratch", e));
  scratchBytes = bytes;
  return Error::success();
}

Error LtGemms::allocateScales(const Problem &p, Entry &e) {
  // Tensorwise in cuBLASLt: one factor each. Otherwise vectors of m and n,
  // a tensorwise side broadcast, as the outer-vector mode and the epilogue
  // both index per row and per column.
  bool scalar = p.scales == ScaleMode::Scalar && !forceEpilogue;
  e.raCount = scalar ? 1 : p.m;
  e.rbCount = scalar ? 1 : p.n;
  e.bytes = (roundUp(e.rbCount) + e.raCount) * int64_t(sizeof(float));
  void *buffer = nullptr;
  if (cudaError_t err = cudaMalloc(&buffer, e.bytes); err != cudaSuccess)
    return Error(
        cudaText("allocating scale reciprocals for " + describe(p), err));
  e.buffer.reset(static_cast<float *>(buffer));
  e.rb = e.buffer.get();
  e.ra = e.rb + roundUp(e.rbCount);
  return Error::success();
}

Error LtGemms::chooseFor(Entry &e, const Problem &p, const std::string &arch) {
  Expected<LtMatmul> lt = LtMatmul::create(p);
  if (!lt)
    return lt.takeError();
  // The heuristic sees the scale pointers (a vector scale mode without one
  // is refused). cuBLASLt's A is the plan's b (GemmInternal.h).
  if (p.scales != ScaleMode::None)
    if (Error error = lt->setScales(e.rb, e.ra))
      return error;
  if (Error error = choose(*lt, arch, e.algo))
    return error;
  e.lt = *std::move(lt);
  return Error::success();
}

Expected<Entry *> LtGemms::find(const Problem &p, cudaStream_t stream) {
  if (auto it = cache.find(p); it != cache.end())
    return &it->second;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) == cudaSuccess &&
      capture != cudaStreamCaptureStatusNone)
    return Error(describe(p) +
                 ": first call inside a CUDA graph capture (choosing its "
                 "algorithm allocates); run every shape once before "
                 "capturing");
  Expected<std::string> arch = currentArch();
  if (!arch)
    return arch.takeError();
  Entry entry;
  bool scaled = p.kind == Kind::Scaled;
  if (scaled) {
    if (Error error = kernels.load())
      return error;
    if (Error error = allocateScales(p, entry))
      return error;
  }

  // Rowwise scales as outer vectors first; any refusal there (no kernel on
  // this architecture, an unknown scale mode) means the fallback. Any other
  // problem cuBLASLt refuses is an error.
  entry.epilogue = scaled && forceEpilogue;
  if (!entry.epilogue) {
    Error error = chooseFor(entry, p, *arch);
    if (error && p.scales != ScaleMode::OuterVector)
      return error;
    entry.epilogue = static_cast<bool>(error);
  }
  if (entry.epilogue) {
    Problem unscaled = p;
    unscaled.scales = ScaleMode::None;
    unscaled.out = DType::F32;
    Error error = chooseFor(entry, unscaled, *arch);
    if (!error)
      error = growScratch(p.m * p.n * sizeof(float));
    if (error)
      return Error(error.takeMessage() + " (the fallback of " + describe(p) +
                   ")");
  }
  return &cache.emplace(p, std::move(entry)).first->second;
}

Error LtGemms::plain(Kind kind, DType t, const void *first, const void *second,
                     void *out, int64_t m, int64_t n, int64_t k,
                     cudaStream_t stream) {
  if (t != DType::BF16 && t != DType::F32)
    return Error(std::string(kindName(kind)) + ": dtype " + dtypeName(t) +
                 " is not supported (bf16 or f32)");
  if (m < 0 || n < 0 || k < 0)
    return Error(std::string(kindName(kind)) + ": negative size");
  Problem p;
  p.kind = kind;
  p.first = p.second = p.out = t;
  p.m = m;
  p.n = n;
  p.k = k;
  p.alignment = pointerAlignment({first, second, out});
  bool done = false;
  if (Error error = degenerate(p, out, stream, done); done)
    return error;
  Expected<Entry *> found = find(p, stream);
  if (!found)
    return found.takeError();
  Entry *e = *found;
  if (cublasStatus_t s = e->lt->run(handle, e->algo, first, second, out,
                                    workspace, kWorkspaceBytes, stream);
      s != CUBLAS_STATUS_SUCCESS)
    return Error("cuBLASLt cublasLtMatmul: " + statusName(s) + " (" +
                 describe(p) + ")");
  return Error::success();
}

Error LtGemms::scaledMatmul(const Scaled &g, cudaStream_t stream) {
  if (!isFp8(g.aType) || !isFp8(g.bType))
    return Error(std::string("scaled_matmul: operands must be FP8, not ") +
                 dtypeName(g.aType) + " x " + dtypeName(g.bType));
  if (g.aType == DType::F8E5M2 && g.bType == DType::F8E5M2)
    return Error("scaled_matmul: e5m2 x e5m2 has no cuBLASLt kernel (one "
                 "operand must be e4m3)");
  if (g.m < 0 || g.n < 0 || g.k < 0)
    return Error("scaled_matmul: negative size");
  Problem p;
  p.kind = Kind::Scaled;
  p.first = g.aType;
  p.second = g.bType;
  p.out = DType::BF16;
  p.m = g.m;
  p.n = g.n;
  p.k = g.k;
  p.fastAccumulation = g.fastAccumulation;
  p.scales =
      g.aRowwise || g.bRowwise ? ScaleMode::OuterVector : ScaleMode::Scalar;
  p.alignment = pointerAlignment({g.a, g.b, g.out});
  bool done = false;
  if (Error error = degenerate(p, g.out, stream, done); done)
    return error;
  if (!g.a || !g.b || !g.out || !g.aScale || !g.bScale)
    return Error("scaled_matmul: a null operand or scale");
  Expected<Entry *> found = find(p, stream);
  if (!found)
    return found.takeError();
  Entry *e = *found;

  if (Error error = kernels.reciprocals(g.aScale, g.aRowwise ? g.m : 1,
                                        g.bScale, g.bRowwise ? g.n : 1, e->ra,
                                        e->raCount, e->rb, e->rbCount, stream))
    return error;
  void *product = e->epilogue ? scratch : g.out;
  if (cublasStatus_t s = e->lt->run(handle, e->algo, g.a, g.b, product,
                                    workspace, kWorkspaceBytes, stream);
      s != CUBLAS_STATUS_SUCCESS)
    return Error("cuBLASLt cublasLtMatmul: " + statusName(s) + " (" +
                 describe(e->lt->problem()) + ")");
  if (e->epilogue)
    return kernels.scaleToBf16(static_cast<const float *>(scratch), e->ra,
                               e->rb, g.m, g.n, g.out, stream);
  return Error::success();
}

} // namespace

Expected<std::unique_ptr<Gemms>> Gemms::create(bool forceScaleEpilogue) {
  void *workspace = nullptr;
  if (cudaError_t e = cudaMalloc(&workspace, kWorkspaceBytes); e != cudaSuccess)
    return Error(cudaText("allocating the cuBLASLt workspace", e));
  cublasLtHandle_t handle = nullptr;
  if (cublasStatus_t s = cublasLtCreate(&handle); s != CUBLAS_STATUS_SUCCESS) {
    cudaFree(workspace);
    return Error("cuBLASLt cublasLtCreate: " + statusName(s));
  }
  return std::unique_ptr<Gemms>(
      std::make_unique<LtGemms>(handle, workspace, forceScaleEpilogue));
}

} // namespace kiln::runtime::cuda
