//===- GemmCheck.cpp - The cuBLASLt GEMMs against an fp64 reference -------===//
//
//   kiln-gemm-check
//
// Runs every GEMM of Gemm.h on GPU 0 on random inputs for a list of shapes
// (small ones, the tiny model's and llama3-debug's projections) and compares
// each output with an fp64 host product of the same operands (FP8 codes
// dequantized: code / scale in fp64):
//
//   - linear, linear_grad_input, linear_grad_weight in bf16 and f32;
//   - scaled_matmul e4m3 x e4m3, e5m2 x e4m3 and e4m3 x e5m2, tensorwise and
//     rowwise, with and without fast accumulation; rowwise on one side only;
//     and a few through the fallback epilogue (forced).
//
// Bound, with S = sum |p_t q_t| over the products of an output element, k
// the inner size, u its dtype's unit roundoff (2^-8 bf16, 2^-24 f32):
//
//   bf16/f32 GEMMs:      |got - ref| <= u |ref| + (k + 2) 2^-24 S
//     (f32 accumulation in any order; f32 inputs use FFMA, not TF32);
//   FP8:                 |got - ref| <= u |ref| + (k 2^-24 + 2^-10) S
//     (tensor-core partial sums are assumed to keep 14 bits, as reported for
//     Hopper by DeepSeek-V3, and to be promoted to f32 at least every 256
//     products; the reciprocal scales' roundings are below the k term);
//   FP8 fast accumulation: |got - ref| <= u |ref| + (ceil(k/32) + 1) 2^-13 S
//     (no promotion: one 14-bit add per K=32 MMA step).
//
// The FP8 bounds rest on undocumented hardware behaviour: each case prints
// its worst |got - ref| / bound so the first GPU run shows the margin. Large
// cases check every output column of a subset of the rows (the host product
// is limited to about 2^26 multiply-adds per case).
//
// Before any of that, with or without a GPU: the layouts. cuBLASLt's
// descriptors need no GPU, so each kind's are read back and a host
// emulation of cuBLASLt's column-major product over them must give the
// plan's product exactly (checkLayouts below).
//
// Each case then captures the same call in a CUDA graph (the algorithm is
// cached: no new problem, no new device memory), changes the FP8 scales on
// the device (doubled, so the reference is a quarter), replays the graph and
// checks again: scales are read when the GEMM runs. A first call of a shape
// inside a capture must be an error. With no usable GPU the tool compiles
// the wrapper's kernels with NVRTC, prints why it skips and exits 77.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Numerics/Bf16.h"
#include "kiln/Runtime/Numerics/Fp8.h"
#include "kiln/Runtime/Cuda/Gemm.h"
#include "kiln/Runtime/Cuda/KernelCompiler.h"

#include "GemmInternal.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

using namespace kiln::runtime;
using cuda::Gemms;
using cuda::gemm::Kind;

namespace {

struct Shape {
  const char *name;
  int64_t m, n, k; // plan sizes: rows, output features, input features
};

// Multiples of 16 (FP8's layouts need it). tiny: dim 64, 2 of 4 heads for
// k/v, ffn 192, vocab 256, 4 x 32 tokens. llama3-debug: dim 256, 4 of 8
// heads for k/v, ffn 704, vocab 256, 8 x 128 tokens.
const Shape kShapes[] = {
    {"small", 16, 16, 16},
    {"small", 32, 48, 64},
    {"small", 48, 80, 112},
    {"tiny q/o", 128, 64, 64},
    {"tiny k/v", 128, 32, 64},
    {"tiny gate/up", 128, 192, 64},
    {"tiny down", 128, 64, 192},
    {"tiny lm_head", 128, 256, 64},
    {"debug q/o", 1024, 256, 256},
    {"debug k/v", 1024, 128, 256},
    {"debug gate/up", 1024, 704, 256},
    {"debug down", 1024, 256, 704},
};

std::string cudaText(cudaError_t e) { return cudaGetErrorString(e); }

/// Device memory freed with the object; empty on allocation failure.
struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) {
    if (cudaMalloc(&ptr, std::max<size_t>(bytes, 1)) != cudaSuccess)
      ptr = nullptr;
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer &) = delete;
  void *ptr = nullptr;
};

/// A row-major operand as the device gets it (bytes) and as the reference
/// reads it (doubles, dequantized).
struct Operand {
  DType type;
  int64_t rows, cols;
  std::vector<uint8_t> bytes;
  std::vector<double> values;
  std::vector<float> scales; // FP8: one, or one per row
};

Operand randomFloat(DType t, int64_t rows, int64_t cols, std::mt19937 &rng) {
  Operand o{t, rows, cols, {}, {}, {}};
  std::normal_distribution<float> normal(0.0f, 1.0f);
  o.bytes.resize(rows * cols * dtypeBytes(t));
  o.values.resize(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) {
    float x = normal(rng);
    if (t == DType::BF16) {
      uint16_t bits = numerics::toBf16Bits(x);
      std::memcpy(o.bytes.data() + 2 * i, &bits, 2);
      x = numerics::fromBf16Bits(bits);
    } else {
      std::memcpy(o.bytes.data() + 4 * i, &x, 4);
    }
    o.values[i] = x;
  }
  return o;
}

/// Normal values quantized as the FP8 recipes do: scale = max / amax (per
/// row or per tensor), code = fp8(x * scale).
Operand randomFp8(DType t, int64_t rows, int64_t cols, bool rowwise,
                  std::mt19937 &rng) {
  Operand o{t, rows, cols, {}, {}, {}};
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(rows * cols);
  for (float &v : x)
    v = normal(rng);
  float maxFinite = t == DType::F8E4M3 ? 448.0f : 57344.0f;
  o.scales.assign(rowwise ? rows : 1, 0.0f);
  std::vector<float> amax(o.scales.size(), 0.0f);
  for (int64_t i = 0; i < rows * cols; ++i) {
    float &a = amax[rowwise ? i / cols : 0];
    a = std::max(a, std::fabs(x[i]));
  }
  for (size_t r = 0; r < amax.size(); ++r)
    o.scales[r] = maxFinite / std::max(amax[r], 1e-12f);
  o.bytes.resize(rows * cols);
  o.values.resize(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) {
    float s = o.scales[rowwise ? i / cols : 0];
    uint8_t code =
        t == DType::F8E4M3 ? numerics::toE4m3(x[i] * s) : numerics::toE5m2(x[i] * s);
    o.bytes[i] = code;
    float decoded =
        t == DType::F8E4M3 ? numerics::fromE4m3(code) : numerics::fromE5m2(code);
    o.values[i] = double(decoded) / double(s);
  }
  return o;
}

/// out[i][j] = sum_t p[i][t] q[j][t] and the sums of |products|, for rows
/// i of `rows` only (the rest stay 0).
void reference(const std::vector<double> &p, const std::vector<double> &q,
               int64_t outRows, int64_t outCols, int64_t inner,
               const std::vector<int64_t> &rows, std::vector<double> &ref,
               std::vector<double> &absSum) {
  ref.assign(outRows * outCols, 0.0);
  absSum.assign(outRows * outCols, 0.0);
  for (int64_t i : rows) {
    const double *pi = p.data() + i * inner;
    for (int64_t j = 0; j < outCols; ++j) {
      const double *qj = q.data() + j * inner;
      double s = 0, a = 0;
      for (int64_t t = 0; t < inner; ++t) {
        double prod = pi[t] * qj[t];
        s += prod;
        a += std::fabs(prod);
      }
      ref[i * outCols + j] = s;
      absSum[i * outCols + j] = a;
    }
  }
}

/// The operand as [cols][rows]: the reference reads both sides K-contiguous.
std::vector<double> transposed(const Operand &o) {
  std::vector<double> t(o.values.size());
  for (int64_t r = 0; r < o.rows; ++r)
    for (int64_t c = 0; c < o.cols; ++c)
      t[c * o.rows + r] = o.values[r * o.cols + c];
  return t;
}

/// The stated bound of the file comment.
double bound(double ref, double absSum, int64_t inner, DType out, bool fp8,
             bool fast) {
  double u = out == DType::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -24);
  double acc;
  if (!fp8)
    acc = double(inner + 2) * std::ldexp(1.0, -24);
  else if (!fast)
    acc = double(inner) * std::ldexp(1.0, -24) + std::ldexp(1.0, -10);
  else
    acc = double((inner + 31) / 32 + 1) * std::ldexp(1.0, -13);
  return u * std::fabs(ref) + acc * absSum * (1 + u) + 1e-30;
}

/// One GEMM to check.
struct Case {
  Kind kind;
  DType type = DType::BF16; // plain GEMMs
  Gemms::Scaled scaled;     // scaled_matmul (pointers set when run)
  bool forced = false;      // through the forced-epilogue wrapper
  std::string name;
};

class Checker {
public:
  Checker(Gemms &gemms, Gemms &forcedGemms, cudaStream_t stream)
      : gemms(gemms), forcedGemms(forcedGemms), stream(stream) {}

  /// Empty when the case passes, else what failed.
  std::string run(const Shape &shape, Case c, std::mt19937 &rng);

private:
  std::string compare(const std::vector<uint8_t> &got, DType out,
                      const std::vector<double> &ref,
                      const std::vector<double> &absSum, double factor,
                      int64_t cols, int64_t inner,
                      const std::vector<int64_t> &rows, bool fp8, bool fast,
                      double &worst);

  Gemms &gemms, &forcedGemms;
  cudaStream_t stream;
};

std::string Checker::compare(const std::vector<uint8_t> &got, DType out,
                             const std::vector<double> &ref,
                             const std::vector<double> &absSum, double factor,
                             int64_t cols, int64_t inner,
                             const std::vector<int64_t> &rows, bool fp8,
                             bool fast, double &worst) {
  for (int64_t i : rows) {
    for (int64_t j = 0; j < cols; ++j) {
      int64_t at = i * cols + j;
      double g;
      if (out == DType::BF16) {
        uint16_t bits;
        std::memcpy(&bits, got.data() + 2 * at, 2);
        g = numerics::fromBf16Bits(bits);
      } else {
        float f;
        std::memcpy(&f, got.data() + 4 * at, 4);
        g = f;
      }
      double r = ref[at] * factor;
      double b = bound(r, absSum[at] * factor, inner, out, fp8, fast);
      double err = std::fabs(g - r);
      if (!(err <= b)) { // NaN fails too
        char text[200];
        std::snprintf(text, sizeof text,
                      "element (%lld, %lld): got %.9g, reference %.9g, "
                      "bound %.3g",
                      static_cast<long long>(i), static_cast<long long>(j), g,
                      r, b);
        return text;
      }
      worst = std::max(worst, err / b);
    }
  }
  return "";
}

std::string Checker::run(const Shape &shape, Case c, std::mt19937 &rng) {
  const int64_t m = shape.m, n = shape.n, k = shape.k;
  Gemms &g = c.forced ? forcedGemms : gemms;
  bool fp8 = c.kind == Kind::Scaled;
  Gemms::Scaled &s = c.scaled;

  // The operands in the plan call's order, and the reference's two sides
  // p [outRows][inner], q [outCols][inner].
  Operand first, second;
  int64_t outRows = m, outCols = n, inner = k;
  std::vector<double> p, q;
  DType out = fp8 ? DType::BF16 : c.type;
  switch (c.kind) {
  case Kind::Linear: // x [m, k], w [n, k]
    first = randomFloat(c.type, m, k, rng);
    second = randomFloat(c.type, n, k, rng);
    p = first.values;
    q = second.values;
    break;
  case Kind::GradInput: // dy [m, n], w [n, k] -> dx [m, k]
    first = randomFloat(c.type, m, n, rng);
    second = randomFloat(c.type, n, k, rng);
    outCols = k;
    inner = n;
    p = first.values;
    q = transposed(second);
    break;
  case Kind::GradWeight: // dy [m, n], x [m, k] -> dw [n, k]
    first = randomFloat(c.type, m, n, rng);
    second = randomFloat(c.type, m, k, rng);
    outRows = n;
    outCols = k;
    inner = m;
    p = transposed(first);
    q = transposed(second);
    break;
  case Kind::Scaled: // a [m, k], b [n, k]
    first = randomFp8(s.aType, m, k, s.aRowwise, rng);
    second = randomFp8(s.bType, n, k, s.bRowwise, rng);
    p = first.values;
    q = second.values;
    break;
  }
  std::vector<int64_t> rows;
  int64_t stride = std::max<int64_t>(1, (outRows * outCols * inner) >> 26);
  for (int64_t i = 0; i < outRows; i += stride)
    rows.push_back(i);
  if (rows.back() != outRows - 1)
    rows.push_back(outRows - 1);
  std::vector<double> ref, absSum;
  reference(p, q, outRows, outCols, inner, rows, ref, absSum);

  size_t outBytes = outRows * outCols * dtypeBytes(out);
  DeviceBuffer dFirst(first.bytes.size()), dSecond(second.bytes.size()),
      dOut(outBytes), dSa(4 * first.scales.size()),
      dSb(4 * second.scales.size());
  if (!dFirst.ptr || !dSecond.ptr || !dOut.ptr || !dSa.ptr || !dSb.ptr)
    return "cudaMalloc failed";
  cudaMemcpy(dFirst.ptr, first.bytes.data(), first.bytes.size(),
             cudaMemcpyHostToDevice);
  cudaMemcpy(dSecond.ptr, second.bytes.data(), second.bytes.size(),
             cudaMemcpyHostToDevice);
  cudaMemcpy(dSa.ptr, first.scales.data(), 4 * first.scales.size(),
             cudaMemcpyHostToDevice);
  cudaMemcpy(dSb.ptr, second.scales.data(), 4 * second.scales.size(),
             cudaMemcpyHostToDevice);
  cudaDeviceSynchronize(); // the copies have landed
  s.a = dFirst.ptr;
  s.b = dSecond.ptr;
  s.aScale = static_cast<const float *>(dSa.ptr);
  s.bScale = static_cast<const float *>(dSb.ptr);
  s.out = dOut.ptr;
  s.m = m;
  s.n = n;
  s.k = k;

  auto call = [&]() -> Error {
    switch (c.kind) {
    case Kind::Linear:
      return g.linear(c.type, dFirst.ptr, dSecond.ptr, dOut.ptr, m, k, n,
                      stream);
    case Kind::GradInput:
      return g.linearGradInput(c.type, dFirst.ptr, dSecond.ptr, dOut.ptr, m, n,
                               k, stream);
    case Kind::GradWeight:
      return g.linearGradWeight(c.type, dFirst.ptr, dSecond.ptr, dOut.ptr, m, n,
                                k, stream);
    case Kind::Scaled:
      return g.scaledMatmul(s, stream);
    }
    return Error::success();
  };
  auto fetch = [&](std::vector<uint8_t> &host) -> std::string {
    if (cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess)
      return "running: " + cudaText(e);
    host.resize(outBytes);
    if (cudaError_t e =
            cudaMemcpy(host.data(), dOut.ptr, outBytes, cudaMemcpyDeviceToHost);
        e != cudaSuccess)
      return "cudaMemcpy: " + cudaText(e);
    return "";
  };

  // First call: chooses and caches the algorithm.
  std::vector<uint8_t> got;
  if (Error error = call())
    return error.takeMessage();
  if (std::string error = fetch(got); !error.empty())
    return error;
  double worst = 0;
  if (std::string error = compare(got, out, ref, absSum, 1.0, outCols, inner,
                                  rows, fp8, s.fastAccumulation, worst);
      !error.empty())
    return "first call: " + error;
  // Rowwise problems all take the same path on a device.
  if (fp8 && (c.forced ||
              ((s.aRowwise || s.bRowwise) && g.scaleEpilogueProblems() > 0)))
    c.name += " [epilogue]";

  // Second call, captured in a graph: the cached algorithm, nothing
  // allocated, scales read when the graph runs.
  int cached = g.cachedAlgorithms();
  int64_t bytes = g.deviceBytes();
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  if (cudaError_t e =
          cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);
      e != cudaSuccess)
    return "cudaStreamBeginCapture: " + cudaText(e);
  std::string captured = call().takeMessage();
  cudaError_t endError = cudaStreamEndCapture(stream, &graph);
  if (!captured.empty())
    return "captured call: " + captured;
  if (endError != cudaSuccess)
    return "cudaStreamEndCapture: " + cudaText(endError);
  if (cudaError_t e = cudaGraphInstantiate(&exec, graph, 0); e != cudaSuccess)
    return "cudaGraphInstantiate: " + cudaText(e);
  double factor = 1.0;
  if (fp8) {
    for (float &v : first.scales)
      v *= 2;
    for (float &v : second.scales)
      v *= 2;
    cudaMemcpy(dSa.ptr, first.scales.data(), 4 * first.scales.size(),
               cudaMemcpyHostToDevice);
    cudaMemcpy(dSb.ptr, second.scales.data(), 4 * second.scales.size(),
               cudaMemcpyHostToDevice);
    factor = 0.25;
  }
  cudaMemset(dOut.ptr, 0xff, outBytes); // NaNs, unless overwritten
  cudaDeviceSynchronize();
  cudaError_t launched = cudaGraphLaunch(exec, stream);
  std::string fetched = fetch(got);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  if (launched != cudaSuccess)
    return "cudaGraphLaunch: " + cudaText(launched);
  if (!fetched.empty())
    return fetched;
  if (g.cachedAlgorithms() != cached)
    return "the second call chose a new algorithm";
  if (g.deviceBytes() != bytes)
    return "the second call allocated device memory";
  double worstGraph = 0;
  if (std::string error = compare(got, out, ref, absSum, factor, outCols, inner,
                                  rows, fp8, s.fastAccumulation, worstGraph);
      !error.empty())
    return "graph replay" + std::string(fp8 ? " with doubled scales" : "") +
           ": " + error;
  std::printf("ok    %-14s %-58s worst err/bound %.3f%s\n", shape.name,
              c.name.c_str(), std::max(worst, worstGraph),
              rows.size() < size_t(outRows) ? " (sampled rows)" : "");
  return "";
}

/// Every case of a shape.
std::vector<Case> casesFor(const Shape &shape) {
  std::vector<Case> cases;
  auto plainName = [&](Kind kind, DType t) {
    cuda::gemm::Problem p;
    p.kind = kind;
    p.first = p.second = p.out = t;
    p.m = shape.m;
    p.n = shape.n;
    p.k = shape.k;
    return cuda::gemm::describe(p);
  };
  for (DType t : {DType::BF16, DType::F32})
    for (Kind kind : {Kind::Linear, Kind::GradInput, Kind::GradWeight}) {
      Case c;
      c.kind = kind;
      c.type = t;
      c.name = plainName(kind, t);
      cases.push_back(c);
    }
  auto scaled = [&](DType a, DType b, bool aRow, bool bRow, bool fast,
                    bool forced) {
    Case c;
    c.kind = Kind::Scaled;
    c.scaled.aType = a;
    c.scaled.bType = b;
    c.scaled.aRowwise = aRow;
    c.scaled.bRowwise = bRow;
    c.scaled.fastAccumulation = fast;
    c.forced = forced;
    auto name = [](DType t) { return t == DType::F8E4M3 ? "e4m3" : "e5m2"; };
    c.name = std::string("scaled_matmul ") + name(a) + " x " + name(b) +
             (aRow && bRow ? " rowwise"
              : aRow       ? " a-rowwise"
              : bRow       ? " b-rowwise"
                           : " tensorwise") +
             (fast ? " fast-accum" : "") + " m=" + std::to_string(shape.m) +
             " n=" + std::to_string(shape.n) + " k=" + std::to_string(shape.k);
    cases.push_back(c);
  };
  const std::pair<DType, DType> types[] = {{DType::F8E4M3, DType::F8E4M3},
                                           {DType::F8E5M2, DType::F8E4M3},
                                           {DType::F8E4M3, DType::F8E5M2}};
  for (auto [a, b] : types)
    for (bool rowwise : {false, true})
      for (bool fast : {false, true})
        scaled(a, b, rowwise, rowwise, fast, false);
  scaled(DType::F8E4M3, DType::F8E4M3, true, false, false, false);
  scaled(DType::F8E4M3, DType::F8E4M3, false, true, false, false);
  scaled(DType::F8E4M3, DType::F8E4M3, false, false, false, true);
  scaled(DType::F8E5M2, DType::F8E4M3, true, true, false, true);
  scaled(DType::F8E4M3, DType::F8E4M3, true, true, true, true);
  return cases;
}

// --- The layouts, on the host ----------------------------------------------
//
// cuBLASLt's descriptors can be made without a GPU. For each GEMM kind, read
// back what the wrapper put in them (transposes, rows, columns, leading
// dimensions, types, scale modes) and compute D = op(A) op(B) column-major
// from them, as cuBLASLt defines it, over the plan's operands in memory
// (cuBLASLt's A is the plan call's second operand, B its first). The result,
// read as the plan's row-major output, must be the plan's product, exactly
// (small integers). Distinct m, n, k catch any swapped size.

template <typename T>
T descAttr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr) {
  T value{};
  size_t written = 0;
  cublasLtMatmulDescGetAttribute(d, attr, &value, sizeof value, &written);
  return value;
}

template <typename T>
T layoutAttr(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr) {
  T value{};
  size_t written = 0;
  cublasLtMatrixLayoutGetAttribute(l, attr, &value, sizeof value, &written);
  return value;
}

struct Stored {
  uint64_t rows, cols;
  int64_t ld;
  int32_t type;
};

Stored storedOf(cublasLtMatrixLayout_t l) {
  return {layoutAttr<uint64_t>(l, CUBLASLT_MATRIX_LAYOUT_ROWS),
          layoutAttr<uint64_t>(l, CUBLASLT_MATRIX_LAYOUT_COLS),
          layoutAttr<int64_t>(l, CUBLASLT_MATRIX_LAYOUT_LD),
          layoutAttr<int32_t>(l, CUBLASLT_MATRIX_LAYOUT_TYPE)};
}

/// Empty when `p`'s descriptors compute the plan's product.
std::string checkLayout(const cuda::gemm::Problem &p) {
  Expected<cuda::gemm::LtMatmul> lt = cuda::gemm::LtMatmul::create(p);
  if (!lt)
    return lt.error().message();
  const int64_t m = p.m, n = p.n, k = p.k;
  // The plan's operands (row-major, in the call's order) and its product.
  int64_t firstRows = m, firstCols = k, secondRows = n, secondCols = k;
  int64_t outRows = m, outCols = n;
  if (p.kind == Kind::GradInput) {
    firstCols = n, secondRows = n, secondCols = k, outCols = k;
  } else if (p.kind == Kind::GradWeight) {
    firstCols = n, secondRows = m, secondCols = k, outRows = n, outCols = k;
  }
  std::vector<double> first(firstRows * firstCols),
      second(secondRows * secondCols), want(outRows * outCols, 0.0);
  for (size_t i = 0; i < first.size(); ++i)
    first[i] = double(int(i * 7 % 11) - 5);
  for (size_t i = 0; i < second.size(); ++i)
    second[i] = double(int(i * 5 % 13) - 6);
  for (int64_t i = 0; i < outRows; ++i)
    for (int64_t j = 0; j < outCols; ++j) {
      double sum = 0;
      if (p.kind == Kind::Linear || p.kind == Kind::Scaled) // x w^T, a b^T
        for (int64_t t = 0; t < k; ++t)
          sum += first[i * k + t] * second[j * k + t];
      else if (p.kind == Kind::GradInput) // dy[m,n] w[n,k]
        for (int64_t t = 0; t < n; ++t)
          sum += first[i * n + t] * second[t * k + j];
      else // dy[m,n]^T x[m,k]: i over n, j over k
        for (int64_t t = 0; t < m; ++t)
          sum += first[t * n + i] * second[t * k + j];
      want[i * outCols + j] = sum;
    }

  auto op = [&](cublasLtMatmulDescAttributes_t attr) {
    return descAttr<int32_t>(lt->descriptor(), attr) == CUBLAS_OP_T;
  };
  bool transA = op(CUBLASLT_MATMUL_DESC_TRANSA);
  bool transB = op(CUBLASLT_MATMUL_DESC_TRANSB);
  Stored a = storedOf(lt->layoutA()), b = storedOf(lt->layoutB()),
         d = storedOf(lt->layoutD());
  uint64_t M = d.rows, N = d.cols, K = transA ? a.rows : a.cols;
  if ((transA ? a.cols : a.rows) != M || (transB ? b.cols : b.rows) != K ||
      (transB ? b.rows : b.cols) != N || a.ld != int64_t(a.rows) ||
      b.ld != int64_t(b.rows) || d.ld != int64_t(d.rows))
    return "inconsistent cuBLASLt dimensions";
  if (uint64_t(secondRows * secondCols) != a.rows * a.cols ||
      uint64_t(firstRows * firstCols) != b.rows * b.cols ||
      uint64_t(outRows * outCols) != M * N)
    return "cuBLASLt's matrices are not the plan's operands' sizes";
  auto cudaTypeOf = [](DType t) {
    return t == DType::BF16     ? CUDA_R_16BF
           : t == DType::F8E4M3 ? CUDA_R_8F_E4M3
           : t == DType::F8E5M2 ? CUDA_R_8F_E5M2
                                : CUDA_R_32F;
  };
  if (a.type != cudaTypeOf(p.second) || b.type != cudaTypeOf(p.first) ||
      d.type != cudaTypeOf(p.out))
    return "cuBLASLt's A is not the plan's second operand's type, or B not "
           "the first's";
  if (p.kind == Kind::Scaled) {
    if (transA != true || transB != false)
      return "FP8 needs the TN layout";
    int32_t want = p.scales == cuda::gemm::ScaleMode::OuterVector
                       ? CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F
                       : CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    if (descAttr<int32_t>(lt->descriptor(),
                          CUBLASLT_MATMUL_DESC_A_SCALE_MODE) != want ||
        descAttr<int32_t>(lt->descriptor(),
                          CUBLASLT_MATMUL_DESC_B_SCALE_MODE) != want)
      return "wrong scale mode";
    if (descAttr<int8_t>(lt->descriptor(), CUBLASLT_MATMUL_DESC_FAST_ACCUM) !=
        int8_t(p.fastAccumulation))
      return "fast accumulation not set as asked";
  }
  // D(i, j) = sum_t op(A)(i, t) op(B)(t, j), column-major.
  for (uint64_t i = 0; i < M; ++i)
    for (uint64_t j = 0; j < N; ++j) {
      double sum = 0;
      for (uint64_t t = 0; t < K; ++t) {
        double av = transA ? second[t + i * a.ld] : second[i + t * a.ld];
        double bv = transB ? first[j + t * b.ld] : first[t + j * b.ld];
        sum += av * bv;
      }
      if (sum != want[i + j * d.ld])
        return "D(" + std::to_string(i) + ", " + std::to_string(j) +
               ") is not the plan's product";
    }
  return "";
}

/// Every kind, dtype and scale mode; empty when all pass.
std::string checkLayouts() {
  cuda::gemm::Problem p;
  p.m = 3;
  p.n = 5;
  p.k = 7;
  for (Kind kind : {Kind::Linear, Kind::GradInput, Kind::GradWeight})
    for (DType t : {DType::BF16, DType::F32}) {
      p.kind = kind;
      p.first = p.second = p.out = t;
      if (std::string e = checkLayout(p); !e.empty())
        return cuda::gemm::describe(p) + ": " + e;
    }
  p.kind = Kind::Scaled;
  for (auto [a, b] : {std::pair{DType::F8E5M2, DType::F8E4M3},
                      std::pair{DType::F8E4M3, DType::F8E5M2}})
    for (auto mode :
         {cuda::gemm::ScaleMode::Scalar, cuda::gemm::ScaleMode::OuterVector,
          cuda::gemm::ScaleMode::None})
      for (bool fast : {false, true}) {
        p.first = a;
        p.second = b;
        p.scales = mode;
        p.out = mode == cuda::gemm::ScaleMode::None ? DType::F32 : DType::BF16;
        p.fastAccumulation = fast;
        if (std::string e = checkLayout(p); !e.empty())
          return cuda::gemm::describe(p) + ": " + e;
      }
  return "";
}

/// Empty when GPU 0 can run, else why not.
std::string openDevice(std::string &description) {
  int n = 0;
  if (cudaError_t e = cudaGetDeviceCount(&n); e != cudaSuccess)
    return "no usable CUDA device (" + cudaText(e) + ")";
  if (n == 0)
    return "no CUDA device";
  if (cudaError_t e = cudaSetDevice(0); e != cudaSuccess)
    return cudaText(e);
  cudaDeviceProp prop;
  if (cudaError_t e = cudaGetDeviceProperties(&prop, 0); e != cudaSuccess)
    return cudaText(e);
  description = std::string(prop.name) + ", sm_" +
                std::to_string(prop.major * 10 + prop.minor) + ", cuBLASLt " +
                std::to_string(cublasLtGetVersion());
  return "";
}

} // namespace

int main() {
  // Checked with or without a GPU.
  if (std::string failure = checkLayouts(); !failure.empty()) {
    std::printf("FAIL  layouts: %s\n", failure.c_str());
    return 1;
  }
  std::printf("ok    layouts: each kind's cuBLASLt descriptors compute the "
              "plan's product (host emulation)\n");
  std::string device;
  if (std::string why = openDevice(device); !why.empty()) {
    // What can be checked without a GPU: the wrapper's kernels compile.
    for (const char *arch : {"sm_89", "sm_90", "sm_100"}) {
      Expected<cuda::CompiledKernel> cubin = cuda::compileKernel(
          cuda::gemm::scaleKernelSource(), arch, "", cuda::Arithmetic::Exact);
      if (!cubin) {
        std::fprintf(stderr,
                     "the GEMM scale kernels do not compile for %s: "
                     "%s\n",
                     arch, cubin.error().message().c_str());
        return 1;
      }
    }
    std::printf("ok    the GEMM scale kernels compile for sm_89, sm_90, "
                "sm_100 (NVRTC)\n");
    std::printf("skipped: %s\n", why.c_str());
    return 77;
  }
  std::printf("GPU 0: %s\n", device.c_str());

  Expected<std::unique_ptr<Gemms>> made = Gemms::create();
  std::unique_ptr<Gemms> gemms = made ? *std::move(made) : nullptr;
  std::unique_ptr<Gemms> forced;
  if (gemms) {
    made = Gemms::create(/*forceScaleEpilogue=*/true);
    forced = made ? *std::move(made) : nullptr;
  }
  if (!gemms || !forced) {
    std::fprintf(stderr, "Gemms::create: %s\n", made.error().message().c_str());
    return 1;
  }
  // A blocking stream: the check's synchronous copies and memsets on the
  // default stream are ordered before the GEMMs.
  cudaStream_t stream;
  if (cudaError_t e = cudaStreamCreate(&stream); e != cudaSuccess) {
    std::fprintf(stderr, "cudaStreamCreate: %s\n", cudaText(e).c_str());
    return 1;
  }

  int failures = 0, passed = 0;
  // A shape's first call inside a capture is refused, not half-done.
  {
    DeviceBuffer x(16 * 48 * 2), w(32 * 48 * 2), y(16 * 32 * 2);
    cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);
    std::string refused =
        gemms->linear(DType::BF16, x.ptr, w.ptr, y.ptr, 16, 48, 32, stream)
            .takeMessage();
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(stream, &graph);
    if (graph)
      cudaGraphDestroy(graph);
    if (refused.find("graph capture") == std::string::npos ||
        gemms->cachedAlgorithms() != 0) {
      std::printf("FAIL  a first call inside a capture: \"%s\"\n",
                  refused.c_str());
      ++failures;
    } else {
      std::printf("ok    a first call inside a capture is an error\n");
      ++passed;
    }
  }

  Checker checker(*gemms, *forced, stream);
  std::mt19937 rng(2024);
  for (const Shape &shape : kShapes) {
    for (const Case &c : casesFor(shape)) {
      if (std::string failure = checker.run(shape, c, rng); !failure.empty()) {
        std::printf("FAIL  %-14s %s: %s\n", shape.name, c.name.c_str(),
                    failure.c_str());
        ++failures;
      } else {
        ++passed;
      }
    }
  }
  std::printf("%d passed, %d failed; %d problems cached (%d through the "
              "epilogue), %lld device bytes held\n",
              passed, failures, gemms->cachedAlgorithms(),
              gemms->scaleEpilogueProblems(),
              static_cast<long long>(gemms->deviceBytes()));
  forced.reset();
  gemms.reset();
  cudaStreamDestroy(stream);
  return failures ? 1 : 0;
}
