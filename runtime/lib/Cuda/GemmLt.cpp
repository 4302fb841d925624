//===- GemmLt.cpp - The plan's GEMMs as cuBLASLt descriptors --------------===//
//
// The layout mapping of GemmInternal.h made into cuBLASLt descriptors, the
// heuristic query and the call. Every descriptor is built once per problem
// and kept with its cached algorithm, so a call costs no descriptor work.
//
//===----------------------------------------------------------------------===//

#include "GemmInternal.h"

#include <algorithm>

namespace kiln::runtime::cuda::gemm {

namespace {

cudaDataType_t cudaType(DType t) {
  switch (t) {
  case DType::BF16:
    return CUDA_R_16BF;
  case DType::F8E4M3:
    return CUDA_R_8F_E4M3;
  case DType::F8E5M2:
    return CUDA_R_8F_E5M2;
  default:
    return CUDA_R_32F;
  }
}

/// "e4m3" rather than "f8e4m3" in the scaled GEMM's description.
const char *shortName(DType t) {
  switch (t) {
  case DType::F8E4M3:
    return "e4m3";
  case DType::F8E5M2:
    return "e5m2";
  default:
    return dtypeName(t);
  }
}

std::string failed(const char *call, cublasStatus_t status, const Problem &p) {
  return std::string("cuBLASLt ") + call + ": " + statusName(status) + " (" +
         describe(p) + ")";
}

/// A column-major layout of `rows` x `cols`, contiguous.
cublasStatus_t makeLayout(cublasLtMatrixLayout_t &layout, DType t,
                          uint64_t rows, uint64_t cols) {
  // cuBLASLt takes a leading dimension of at least 1 even for empty
  // matrices; the wrapper never runs those.
  return cublasLtMatrixLayoutCreate(
      &layout, cudaType(t), rows, cols,
      static_cast<int64_t>(std::max<uint64_t>(rows, 1)));
}

template <typename T>
cublasStatus_t setDesc(cublasLtMatmulDesc_t desc,
                       cublasLtMatmulDescAttributes_t attr, T value) {
  return cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof value);
}

} // namespace

const char *kindName(Kind kind) {
  switch (kind) {
  case Kind::Linear:
    return "linear";
  case Kind::GradInput:
    return "linear_grad_input";
  case Kind::GradWeight:
    return "linear_grad_weight";
  case Kind::Scaled:
    return "scaled_matmul";
  }
  return "?";
}

const char *scaleModeName(ScaleMode mode) {
  switch (mode) {
  case ScaleMode::None:
    return "unscaled";
  case ScaleMode::Scalar:
    return "tensorwise";
  case ScaleMode::OuterVector:
    return "rowwise";
  }
  return "?";
}

std::string describe(const Problem &p) {
  std::string s = kindName(p.kind);
  if (p.kind == Kind::Scaled) {
    s += std::string(" ") + shortName(p.first) + " x " + shortName(p.second) +
         " " + scaleModeName(p.scales) + " -> " + dtypeName(p.out);
    if (p.fastAccumulation)
      s += " fast-accum";
  } else {
    s += std::string(" ") + dtypeName(p.out);
  }
  return s + " m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) +
         " k=" + std::to_string(p.k);
}

LtDims ltDims(const Problem &p) {
  auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  switch (p.kind) {
  case Kind::GradInput:
    return {u(p.k), u(p.m), u(p.n)};
  case Kind::GradWeight:
    return {u(p.k), u(p.n), u(p.m)};
  default: // linear, scaled
    return {u(p.n), u(p.m), u(p.k)};
  }
}

uint32_t pointerAlignment(std::initializer_list<const void *> pointers) {
  uintptr_t alignment = 256;
  for (const void *ptr : pointers) {
    auto v = reinterpret_cast<uintptr_t>(ptr);
    if (v != 0)
      alignment = std::min(alignment, v & (~v + 1)); // lowest set bit
  }
  return static_cast<uint32_t>(alignment);
}

std::string statusName(cublasStatus_t status) {
  const char *name = cublasLtGetStatusName(status);
  return name ? name : "cuBLAS status " + std::to_string(status);
}

Expected<LtMatmul> LtMatmul::create(const Problem &p) {
  LtMatmul lt;
  lt.p = p;
  auto fail = [&](const char *call, cublasStatus_t status) {
    return Error(failed(call, status, p));
  };
  if (cublasStatus_t s =
          cublasLtMatmulDescCreate(&lt.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
      s != CUBLAS_STATUS_SUCCESS)
    return fail("cublasLtMatmulDescCreate", s);

  // The mapping of GemmInternal.h: (M, N, K), the stored shapes of A and B,
  // and which of them cuBLASLt transposes.
  LtDims dims = ltDims(p);
  bool transA = p.kind == Kind::Linear || p.kind == Kind::Scaled;
  bool transB = p.kind == Kind::GradWeight;
  uint64_t aRows = transA ? dims.k : dims.m, aCols = transA ? dims.m : dims.k;
  uint64_t bRows = transB ? dims.n : dims.k, bCols = transB ? dims.k : dims.n;
  DType aType = p.kind == Kind::Scaled ? p.second : p.out;
  DType bType = p.kind == Kind::Scaled ? p.first : p.out;

  cublasStatus_t s = setDesc<int32_t>(lt.desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                      transA ? CUBLAS_OP_T : CUBLAS_OP_N);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = setDesc<int32_t>(lt.desc, CUBLASLT_MATMUL_DESC_TRANSB,
                         transB ? CUBLAS_OP_T : CUBLAS_OP_N);
  if (s == CUBLAS_STATUS_SUCCESS && p.kind == Kind::Scaled)
    s = setDesc<int8_t>(lt.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM,
                        p.fastAccumulation ? 1 : 0);
  if (s == CUBLAS_STATUS_SUCCESS && p.scales == ScaleMode::OuterVector) {
    s = setDesc<int32_t>(lt.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                         CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F);
    if (s == CUBLAS_STATUS_SUCCESS)
      s = setDesc<int32_t>(lt.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
                           CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F);
  }
  if (s != CUBLAS_STATUS_SUCCESS)
    return fail("cublasLtMatmulDescSetAttribute", s);

  if ((s = makeLayout(lt.a, aType, aRows, aCols)) != CUBLAS_STATUS_SUCCESS ||
      (s = makeLayout(lt.b, bType, bRows, bCols)) != CUBLAS_STATUS_SUCCESS ||
      (s = makeLayout(lt.d, p.out, dims.m, dims.n)) != CUBLAS_STATUS_SUCCESS)
    return fail("cublasLtMatrixLayoutCreate", s);
  return lt;
}

LtMatmul::LtMatmul(LtMatmul &&o) noexcept
    : p(o.p), desc(o.desc), a(o.a), b(o.b), d(o.d) {
  o.desc = nullptr;
  o.a = o.b = o.d = nullptr;
}

LtMatmul &LtMatmul::operator=(LtMatmul &&o) noexcept {
  if (this != &o) {
    release();
    p = o.p;
    desc = o.desc;
    a = o.a;
    b = o.b;
    d = o.d;
    o.desc = nullptr;
    o.a = o.b = o.d = nullptr;
  }
  return *this;
}

LtMatmul::~LtMatmul() { release(); }

void LtMatmul::release() {
  for (cublasLtMatrixLayout_t layout : {a, b, d})
    if (layout)
      cublasLtMatrixLayoutDestroy(layout);
  if (desc)
    cublasLtMatmulDescDestroy(desc);
  desc = nullptr;
  a = b = d = nullptr;
}

Error LtMatmul::setScales(const float *aScale, const float *bScale) {
  cublasStatus_t s =
      setDesc<const void *>(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, aScale);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = setDesc<const void *>(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                              bScale);
  if (s != CUBLAS_STATUS_SUCCESS)
    return Error(failed("cublasLtMatmulDescSetAttribute", s, p));
  return Error::success();
}

Error LtMatmul::heuristics(cublasLtHandle_t handle, size_t workspaceBytes,
                           int count,
                           std::vector<cublasLtMatmulHeuristicResult_t> &out,
                           cublasStatus_t *status) const {
  out.clear();
  cublasLtMatmulPreference_t pref = nullptr;
  if (cublasStatus_t s = cublasLtMatmulPreferenceCreate(&pref);
      s != CUBLAS_STATUS_SUCCESS)
    return Error(failed("cublasLtMatmulPreferenceCreate", s, p));
  uint64_t maxWorkspace = workspaceBytes;
  cublasStatus_t s = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &maxWorkspace,
      sizeof maxWorkspace);
  // The heuristic assumes 256-byte aligned pointers unless told otherwise.
  for (cublasLtMatmulPreferenceAttributes_t attr :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    if (s == CUBLAS_STATUS_SUCCESS)
      s = cublasLtMatmulPreferenceSetAttribute(pref, attr, &p.alignment,
                                               sizeof p.alignment);
  if (s != CUBLAS_STATUS_SUCCESS) {
    cublasLtMatmulPreferenceDestroy(pref);
    return Error(failed("cublasLtMatmulPreferenceSetAttribute", s, p));
  }
  std::vector<cublasLtMatmulHeuristicResult_t> results(std::max(count, 1));
  int returned = 0;
  s = cublasLtMatmulAlgoGetHeuristic(handle, desc, a, b, d, d, pref,
                                     static_cast<int>(results.size()),
                                     results.data(), &returned);
  cublasLtMatmulPreferenceDestroy(pref);
  if (status)
    *status = s;
  // cuBLASLt answers a combination it has no kernel for (an FP8 scale mode
  // on another architecture, say) with NOT_SUPPORTED rather than with an
  // empty list.
  if (s == CUBLAS_STATUS_NOT_SUPPORTED)
    return Error::success();
  if (s != CUBLAS_STATUS_SUCCESS)
    return Error(failed("cublasLtMatmulAlgoGetHeuristic", s, p));
  for (int i = 0; i < returned; ++i)
    if (results[i].state == CUBLAS_STATUS_SUCCESS)
      out.push_back(results[i]);
  return Error::success();
}

cublasStatus_t LtMatmul::run(cublasLtHandle_t handle,
                             const cublasLtMatmulAlgo_t &algo,
                             const void *first, const void *second, void *out,
                             void *workspace, size_t workspaceBytes,
                             cudaStream_t stream) const {
  // Host alpha and beta (the default pointer mode): their values are taken
  // when the call is made, so a captured graph holds them.
  const float alpha = 1.0f, beta = 0.0f;
  return cublasLtMatmul(handle, desc, &alpha, second, a, first, b, &beta, out,
                        d, out, d, &algo, workspace, workspaceBytes, stream);
}

Expected<std::string> currentArch() {
  int device = 0, major = 0, minor = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess)
    e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                               device);
  if (e == cudaSuccess)
    e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor,
                               device);
  if (e != cudaSuccess)
    return Error(std::string("reading the device's compute capability: ") +
                 cudaGetErrorString(e));
  return "sm_" + std::to_string(major * 10 + minor);
}

} // namespace kiln::runtime::cuda::gemm
