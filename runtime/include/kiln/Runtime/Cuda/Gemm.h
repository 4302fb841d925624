//===- Gemm.h - The plan's GEMMs on cuBLASLt --------------------*- C++ -*-===//
//
// The CUDA backend's matrix products, all through cuBLASLt with fp32
// accumulation, in the plan's row-major layout:
//
//   linear              y[m, n]  = x[m, k] w[n, k]^T
//   linear_grad_input   dx[m, k] = dy[m, n] w[n, k]
//   linear_grad_weight  dw[n, k] = dy[m, n]^T x[m, k]
//   scaled_matmul       out[m, n] = sum_k (a[i, k] / sa) (b[j, k] / sb)
//
// where a and b are FP8 codes (e4m3 x e4m3 or e5m2 x e4m3, either order),
// both K-major as the plan writes them (cuBLASLt's "TN" FP8 layout), and sa,
// sb are the plan's quantize scales (the factors the codes were multiplied
// by): one f32 each (tensorwise) or one per row of a and of b (rowwise).
// The output is bf16. Scales are read on the device (no host sync), so a
// step that uses these can be captured in a CUDA graph once every shape has
// run once (the algorithm for each shape is chosen on its first call and
// cached; nothing is allocated after that).
//
// Errors are one-line messages naming the cuBLASLt status; nothing aborts.
// A first call of a shape inside a graph capture is an error (choosing the
// algorithm allocates). Not thread-safe, and one stream at a time: calls
// share the workspace, so calls on different streams must not overlap (use
// one Gemms per concurrent stream). The layouts, the scale handling and the
// checks: docs/cuda-gemm.md.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CUDA_GEMM_H
#define KILN_RUNTIME_CUDA_GEMM_H

#include "kiln/Runtime/DType.h"
#include "kiln/Runtime/Support/Error.h"

#include <cstdint>
#include <memory>
#include <string>

typedef struct CUstream_st *cudaStream_t;

namespace kiln::runtime::cuda {

class Gemms {
public:
  /// A cuBLASLt handle and workspace on the current device. With
  /// `forceScaleEpilogue` every scaled_matmul takes the fallback path below
  /// (an unscaled FP8 GEMM into f32, then the wrapper's scaling epilogue),
  /// even where cuBLASLt could apply the scales itself: for tests.
  static Expected<std::unique_ptr<Gemms>>
  create(bool forceScaleEpilogue = false);
  virtual ~Gemms();

  /// x, w, y all of dtype `t` (bf16 or f32).
  virtual Error linear(DType t, const void *x, const void *w, void *y,
                       int64_t m, int64_t k, int64_t n,
                       cudaStream_t stream) = 0;
  virtual Error linearGradInput(DType t, const void *dy, const void *w,
                                void *dx, int64_t m, int64_t n, int64_t k,
                                cudaStream_t stream) = 0;
  virtual Error linearGradWeight(DType t, const void *dy, const void *x,
                                 void *dw, int64_t m, int64_t n, int64_t k,
                                 cudaStream_t stream) = 0;

  /// `fastAccumulation`: Hopper's FP8 fast accumulation (fewer promotions
  /// to fp32), which the executor asks for only where the recipe allows it.
  /// A rowwise scale the device's cuBLASLt cannot take as a per-row vector
  /// (it can on Hopper, sm_90) is applied by the wrapper's own epilogue
  /// instead (same result up to rounding order; docs/cuda-gemm.md).
  /// `aScale`/`bScale` point to device memory: 1 float (tensorwise) or m
  /// (n) floats (rowwise); either operand may be rowwise alone.
  struct Scaled {
    DType aType = DType::F8E4M3, bType = DType::F8E4M3;
    const void *a = nullptr, *b = nullptr;
    const float *aScale = nullptr, *bScale = nullptr;
    bool aRowwise = false, bRowwise = false;
    void *out = nullptr; // bf16
    int64_t m = 0, k = 0, n = 0;
    bool fastAccumulation = false;
  };
  virtual Error scaledMatmul(const Scaled &g, cudaStream_t stream) = 0;

  /// Allocates the fallback's f32 product scratch once, `bytes` large (the
  /// plan's largest scaled_matmul output, fallbackScratchBytes), before any
  /// graph capture: a graph keeps the address it captured, so the scratch
  /// never moves after this. A later problem needing more fails instead of
  /// growing it. Without a reservation (tests, benchmarks) the scratch
  /// grows as problems need.
  virtual Error reserveFallbackScratch(int64_t bytes) = 0;

  /// Device bytes held (workspace, scale buffers, the fallback's f32
  /// scratch): 32 MiB after create, growing at each new problem's first
  /// call (a few KiB of scale reciprocals; for a fallback problem larger
  /// than any before, its m * n * 4 bytes of scratch).
  virtual int64_t deviceBytes() const = 0;
  /// Distinct problems whose algorithm has been chosen (for tests): a
  /// problem is the GEMM, its dtypes, m, n, k, fast accumulation, the scale
  /// mode and the pointers' alignment (up to 256 bytes).
  virtual int cachedAlgorithms() const = 0;
  /// Of those, the scaled ones that run the fallback epilogue.
  virtual int scaleEpilogueProblems() const = 0;
};

} // namespace kiln::runtime::cuda

#endif // KILN_RUNTIME_CUDA_GEMM_H
