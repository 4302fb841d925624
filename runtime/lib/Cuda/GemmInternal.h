//===- GemmInternal.h - The plan's GEMMs as cuBLASLt problems ---*- C++ -*-===//
//
// Private to the CUDA backend's GEMMs (Gemm.cpp) and to the tools that look
// inside them: kiln-gemm-bench times cuBLASLt's candidate algorithms for the
// very descriptors the wrapper runs; kiln-gemm-check reads the descriptors
// back to check the layouts and compiles the wrapper's kernels, both without
// a GPU.
//
// Layouts. The plan's matrices are row-major; cuBLASLt's are column-major.
// A row-major [r, c] matrix (leading dimension c) read column-major is its
// transpose, a c x r matrix with the same leading dimension. So a plan GEMM
// C = P Q is given to cuBLASLt as C^T = Q^T P^T: the operands swap places
// and no data moves. With the plan's m (rows of activations), n (output
// features) and k (input features):
//
//   plan (row-major)              A          B          D       op(A) op(B)
//   linear      y[m,n] = x w^T    w: k x n   x: k x m   n x m     T     N
//   grad_input  dx[m,k] = dy w    w: k x n   dy: n x m  k x m     N     N
//   grad_weight dw[n,k] = dy^T x  x: k x m   dy: n x m  k x n     N     T
//   scaled      out[m,n] = a b^T  b: k x n   a: k x m   n x m     T     N
//
// (A, B and D as cuBLASLt sees them: column-major rows x columns, each
// contiguous, so its leading dimension is its number of rows.)
//
// cuBLASLt's (M, N, K) are then (n, m, k), (k, m, n), (k, n, m) and
// (n, m, k). In every case cuBLASLt's A is the plan call's second operand
// and its B the first. scaled_matmul is linear's layout, "TN", the only one
// FP8 GEMMs take before Blackwell; both FP8 operands are K-major as the
// plan writes them. So cuBLASLt's A scale comes from the plan's b scale (one
// per row of b: M = n values) and its B scale from the plan's a scale
// (N = m values).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_LIB_CUDA_GEMMINTERNAL_H
#define KILN_RUNTIME_LIB_CUDA_GEMMINTERNAL_H

#include "kiln/Runtime/DType.h"
#include "kiln/Runtime/Support/Error.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace kiln::runtime::cuda::gemm {

enum class Kind { Linear, GradInput, GradWeight, Scaled };
const char *kindName(Kind kind);

/// How a scaled GEMM's scales reach cuBLASLt.
enum class ScaleMode {
  /// bf16/f32 GEMMs, and the unscaled FP8 GEMM into f32 that the wrapper's
  /// epilogue then scales.
  None,
  /// One f32 per operand (CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F).
  Scalar,
  /// A vector per operand, M and N values
  /// (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F).
  OuterVector,
};
const char *scaleModeName(ScaleMode mode);

/// One GEMM of the plan: what the algorithm cache is keyed by. For `Scaled`,
/// `first`/`second` are the plan's a and b types; otherwise all three
/// types are the GEMM's dtype.
struct Problem {
  Kind kind = Kind::Linear;
  DType first = DType::BF16, second = DType::BF16, out = DType::BF16;
  int64_t m = 0, n = 0, k = 0;
  bool fastAccumulation = false;
  ScaleMode scales = ScaleMode::None;
  /// The largest power of two (at most 256) dividing every pointer: the
  /// heuristic must not pick a kernel that needs more.
  uint32_t alignment = 256;

  auto key() const {
    return std::make_tuple(kind, first, second, out, m, n, k, fastAccumulation,
                           scales, alignment);
  }
  bool operator<(const Problem &o) const { return key() < o.key(); }
};

/// "linear bf16 m=128 n=64 k=64" or "scaled e5m2 x e4m3 rowwise fast ...".
std::string describe(const Problem &p);

/// cuBLASLt's (M, N, K) for a problem (see the table above).
struct LtDims {
  uint64_t m, n, k;
};
LtDims ltDims(const Problem &p);

/// The alignment field of Problem for these pointers.
uint32_t pointerAlignment(std::initializer_list<const void *> pointers);

/// "CUBLAS_STATUS_NOT_SUPPORTED".
std::string statusName(cublasStatus_t status);

/// A problem's cuBLASLt descriptors (the matmul, A, B, and D, which is also
/// C: beta is 0). Move-only.
class LtMatmul {
public:
  /// The error when cuBLASLt refuses a descriptor.
  static Expected<LtMatmul> create(const Problem &p);
  LtMatmul(LtMatmul &&o) noexcept;
  LtMatmul &operator=(LtMatmul &&o) noexcept;
  LtMatmul(const LtMatmul &) = delete;
  ~LtMatmul();

  /// The device f32 scales cuBLASLt multiplies A's and B's products by
  /// (ScaleMode::Scalar or OuterVector); read when the GEMM runs.
  Error setScales(const float *aScale, const float *bScale);

  /// Up to `count` algorithms, cuBLASLt's best first, that need no more than
  /// `workspaceBytes`. An empty list is no error (cuBLASLt has none); a
  /// CUBLAS_STATUS_NOT_SUPPORTED from the query is read the same way, and
  /// `status` (when given) tells which.
  Error heuristics(cublasLtHandle_t handle, size_t workspaceBytes, int count,
                   std::vector<cublasLtMatmulHeuristicResult_t> &out,
                   cublasStatus_t *status = nullptr) const;

  /// D = op(A) op(B) with the plan call's operands (`first`, `second` in the
  /// plan's order; mapped to B and A here).
  cublasStatus_t run(cublasLtHandle_t handle, const cublasLtMatmulAlgo_t &algo,
                     const void *first, const void *second, void *out,
                     void *workspace, size_t workspaceBytes,
                     cudaStream_t stream) const;

  const Problem &problem() const { return p; }
  /// For the host check of the layouts (GemmCheck.cpp).
  cublasLtMatmulDesc_t descriptor() const { return desc; }
  cublasLtMatrixLayout_t layoutA() const { return a; }
  cublasLtMatrixLayout_t layoutB() const { return b; }
  cublasLtMatrixLayout_t layoutD() const { return d; }

private:
  LtMatmul() = default;
  void release();
  Problem p;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
};

/// The wrapper's two kernels, CUDA C++ compiled by NVRTC at first use:
///
///   kiln_gemm_reciprocals: ra[i] = 1 / sa[i or 0], rb[j] = 1 / sb[j or 0]
///     (f32, IEEE division): the plan's quantize scales turned into the
///     dequantize factors cuBLASLt multiplies by; a tensorwise scale
///     broadcast to a vector where the other operand is rowwise.
///   kiln_gemm_scale_bf16: out[i, j] = bf16(acc[i, j] * (ra[i] * rb[j])),
///     round to nearest even: the epilogue of the fallback for rowwise
///     scales that cuBLASLt cannot take.
const std::string &scaleKernelSource();

class ScaleKernels {
public:
  ScaleKernels() = default;
  ScaleKernels(const ScaleKernels &) = delete;
  ~ScaleKernels();

  /// Compiles (through the kernel cache) for the current device and loads.
  Error load();
  bool loaded() const { return library != nullptr; }

  Error reciprocals(const float *sa, int64_t saCount, const float *sb,
                    int64_t sbCount, float *ra, int64_t raCount, float *rb,
                    int64_t rbCount, cudaStream_t stream);
  /// acc and out are row-major [m, n].
  Error scaleToBf16(const float *acc, const float *ra, const float *rb,
                    int64_t m, int64_t n, void *out, cudaStream_t stream);

private:
  cudaLibrary_t library = nullptr;
  cudaKernel_t reciprocalKernel = nullptr, scaleKernel = nullptr;
};

/// "sm_90" for the current device, or the error reading it.
Expected<std::string> currentArch();

} // namespace kiln::runtime::cuda::gemm

#endif // KILN_RUNTIME_LIB_CUDA_GEMMINTERNAL_H
