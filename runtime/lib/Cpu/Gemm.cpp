//===- Gemm.cpp - OpenBLAS, or Kiln's own blocked f32 GEMM ----------------===//
//
// gemm() forwards to cblas_sgemm when built with OpenBLAS
// (KILN_HAVE_OPENBLAS, set on this file only) unless the portable loops
// were chosen (usePortableGemm), else to portableGemm.
//
// portableGemm (Gemm.h gives the order of its sums): for each kNc-column
// block of op(B) and each kKc-deep slice of the inner dimension, the slice
// of op(B) is packed into panels 2 * lanes<V>() columns wide, each holding
// its kKc rows one after the other; then for each kMc-row block of op(A)
// the block is packed into panels of R rows (per inner index, the R values
// of the panel's rows), and each R x 2 * lanes<V>() tile of C is one pass
// of register accumulators over the slice. Packing copies zeros past the
// edges, so the tiles run full width; only the valid part is written. A
// B panel (16 KiB with AVX2) stays in L1 while the A block (96 KiB) is
// swept from L2.
//
//===----------------------------------------------------------------------===//

#include "Gemm.h"

#include "Parallel.h"
#include "Simd.h"

#if KILN_HAVE_OPENBLAS
#include <cblas.h>
#endif

#include <algorithm>
#include <atomic>
#include <vector>

namespace kiln::runtime::cpu::detail {

namespace {

/// Depth of a packed slice, rows of a packed A block (a multiple of both
/// copies' R), columns of a packed B block.
constexpr int64_t kKc = 256;
constexpr int64_t kMc = 96;
constexpr int64_t kNc = 1024;

int64_t roundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/// One thread's share of C: rows [r0, r1), columns [c0, c1).
struct GemmRange {
  const GemmOperand *a, *b;
  float *c;
  int64_t ldc, k, r0, r1, c0, c1;
  bool accumulate;
};

/// Packs op(A) rows [r0, r0 + rows) by inner [p0, p0 + kc) into panels of
/// R rows: panel q, inner index p, row i at out[q * kc * R + p * R + i];
/// rows past `rows` are zeros.
template <int R>
KILN_ALWAYS_INLINE void packA(const GemmOperand &a, int64_t r0, int64_t rows,
                              int64_t p0, int64_t kc, float *out) {
  for (int64_t q = 0; q * R < rows; ++q) {
    float *panel = out + q * kc * R;
    const int64_t valid = std::min<int64_t>(R, rows - q * R);
    for (int64_t i = 0; i < R; ++i) {
      if (i >= valid) {
        for (int64_t p = 0; p < kc; ++p)
          panel[p * R + i] = 0.0f;
        continue;
      }
      const int64_t r = r0 + q * R + i;
      if (a.transposed)
        for (int64_t p = 0; p < kc; ++p)
          panel[p * R + i] = a.data[(p0 + p) * a.ld + r];
      else
        for (int64_t p = 0; p < kc; ++p)
          panel[p * R + i] = a.data[r * a.ld + p0 + p];
    }
  }
}

/// Packs op(B) inner [p0, p0 + kc) by columns [c0, c0 + cols) into panels
/// of C columns: panel q, inner index p, column j at out[q * kc * C + p * C
/// + j]; columns past `cols` are zeros.
template <int C>
KILN_ALWAYS_INLINE void packB(const GemmOperand &b, int64_t p0, int64_t kc,
                              int64_t c0, int64_t cols, float *out) {
  for (int64_t q = 0; q * C < cols; ++q) {
    float *panel = out + q * kc * C;
    const int64_t valid = std::min<int64_t>(C, cols - q * C);
    for (int64_t p = 0; p < kc; ++p) {
      float *row = panel + p * C;
      if (b.transposed)
        for (int64_t j = 0; j < valid; ++j)
          row[j] = b.data[(c0 + q * C + j) * b.ld + p0 + p];
      else
        for (int64_t j = 0; j < valid; ++j)
          row[j] = b.data[(p0 + p) * b.ld + c0 + q * C + j];
      for (int64_t j = valid; j < C; ++j)
        row[j] = 0.0f;
    }
  }
}

/// The R x 2W tile of C at c: the sum over the slice of the packed panels'
/// products, from zero in increasing inner order, then stored (or added to
/// C when `add`) for the first `rows` rows and `cols` columns.
template <typename V, int R>
KILN_ALWAYS_INLINE void multiplyTile(int64_t kc, const float *a, const float *b,
                                     float *c, int64_t ldc, int64_t rows,
                                     int64_t cols, bool add) {
  constexpr int W = lanes<V>();
  V acc[R][2];
  for (int i = 0; i < R; ++i) {
    vzero(acc[i][0]);
    vzero(acc[i][1]);
  }
  for (int64_t p = 0; p < kc; ++p) {
    V b0, b1;
    vload(b0, b + p * 2 * W);
    vload(b1, b + p * 2 * W + W);
    const float *ap = a + p * R;
    for (int i = 0; i < R; ++i) {
      vmulAdd(acc[i][0], b0, ap[i]);
      vmulAdd(acc[i][1], b1, ap[i]);
    }
  }
  float tile[R][2 * W];
  for (int i = 0; i < R; ++i) {
    vstore(tile[i], acc[i][0]);
    vstore(tile[i] + W, acc[i][1]);
  }
  for (int64_t i = 0; i < rows; ++i) {
    float *row = c + i * ldc;
    if (add)
      for (int64_t j = 0; j < cols; ++j)
        row[j] += tile[i][j];
    else
      for (int64_t j = 0; j < cols; ++j)
        row[j] = tile[i][j];
  }
}

/// C over one range, blocked and packed (the file comment).
template <typename V, int R>
KILN_ALWAYS_INLINE void multiplyRange(const GemmRange &g) {
  constexpr int64_t C = 2 * lanes<V>();
  const GemmOperand &a = *g.a, &b = *g.b;
  const int64_t cols = g.c1 - g.c0, rows = g.r1 - g.r0;
  std::vector<float> aPack(roundUp(std::min(kMc, rows), R) *
                           std::min(kKc, g.k));
  std::vector<float> bPack(roundUp(std::min(kNc, cols), C) *
                           std::min(kKc, g.k));
  for (int64_t jc = g.c0; jc < g.c1; jc += kNc) {
    const int64_t nc = std::min(kNc, g.c1 - jc);
    for (int64_t pc = 0; pc < g.k; pc += kKc) {
      const int64_t kc = std::min(kKc, g.k - pc);
      const bool add = g.accumulate || pc > 0;
      packB<C>(b, pc, kc, jc, nc, bPack.data());
      for (int64_t ic = g.r0; ic < g.r1; ic += kMc) {
        const int64_t mc = std::min(kMc, g.r1 - ic);
        packA<R>(a, ic, mc, pc, kc, aPack.data());
        for (int64_t jr = 0; jr < nc; jr += C)
          for (int64_t ir = 0; ir < mc; ir += R)
            multiplyTile<V, R>(
                kc, aPack.data() + ir * kc, bPack.data() + jr * kc,
                g.c + (ic + ir) * g.ldc + jc + jr, g.ldc,
                std::min<int64_t>(R, mc - ir), std::min(C, nc - jr), add);
      }
    }
  }
}

using RangeFn = void (*)(const GemmRange &);

void multiplyBaseline(const GemmRange &g) { multiplyRange<Float4, 4>(g); }

#if KILN_HAVE_AVX2_PATH
KILN_TARGET_AVX2 void multiplyAvx2(const GemmRange &g) {
  multiplyRange<Float8, 6>(g);
}
#endif

/// The copy of the loops this CPU runs (Simd.h).
RangeFn rangeFn() {
#if KILN_HAVE_AVX2_PATH
  if (useAvx2())
    return multiplyAvx2;
#endif
  return multiplyBaseline;
}

} // namespace

void portableGemm(const GemmOperand &a, const GemmOperand &b, float *c,
                  int64_t ldc, int64_t m, int64_t n, int64_t k,
                  bool accumulate) {
  RangeFn run = rangeFn();
  GemmRange whole{&a, &b, c, ldc, k, 0, m, 0, n, accumulate};
  // Threads take ranges of the longer side of C, each worth about 2^22
  // multiply-adds (threads are started per call).
  const int64_t work = int64_t(1) << 22;
  if (m >= n) {
    parallelFor(m, std::max<int64_t>(16, work / (n * k)),
                [&](int64_t begin, int64_t end) {
                  GemmRange part = whole;
                  part.r0 = begin;
                  part.r1 = end;
                  run(part);
                });
  } else {
    parallelFor(n, std::max<int64_t>(64, work / (m * k)),
                [&](int64_t begin, int64_t end) {
                  GemmRange part = whole;
                  part.c0 = begin;
                  part.c1 = end;
                  run(part);
                });
  }
}

namespace {
std::atomic<bool> portableChosen{false};
} // namespace

void usePortableGemm(bool portable) {
  portableChosen.store(portable, std::memory_order_relaxed);
}

#if KILN_HAVE_OPENBLAS

bool haveOpenBlas() { return true; }

void gemm(const GemmOperand &a, const GemmOperand &b, float *c, int64_t ldc,
          int64_t m, int64_t n, int64_t k, bool accumulate) {
  if (portableChosen.load(std::memory_order_relaxed))
    return portableGemm(a, b, c, ldc, m, n, k, accumulate);
  cblas_sgemm(CblasRowMajor, a.transposed ? CblasTrans : CblasNoTrans,
              b.transposed ? CblasTrans : CblasNoTrans, int(m), int(n), int(k),
              1.0f, a.data, int(a.ld), b.data, int(b.ld),
              accumulate ? 1.0f : 0.0f, c, int(ldc));
}

const char *gemmLibrary() {
  return portableChosen.load(std::memory_order_relaxed) ? "portable"
                                                        : "OpenBLAS";
}

void setGemmThreads(int n) { openblas_set_num_threads(n); }

#else

bool haveOpenBlas() { return false; }

void gemm(const GemmOperand &a, const GemmOperand &b, float *c, int64_t ldc,
          int64_t m, int64_t n, int64_t k, bool accumulate) {
  portableGemm(a, b, c, ldc, m, n, k, accumulate);
}

const char *gemmLibrary() { return "portable"; }

void setGemmThreads(int) {}

#endif

} // namespace kiln::runtime::cpu::detail
