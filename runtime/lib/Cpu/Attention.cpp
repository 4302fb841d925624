//===- Attention.cpp - Scaled dot-product attention, GQA, causal ----------===//
//
// Both directions are small matrix products on tiles, computed by one
// register-blocked kernel (multiplyTile), plus a vectorised exp (FastExp.h).
//
// Forward, per (batch, query head): K is copied transposed (dim x seq) and V
// as rows; then for each group of kRows query rows, the scores against all
// keys the group's last row sees are one product, a two-pass softmax runs
// over each row (scaled scores and their maximum; exponentials and their
// sum), and the rows times V is a second product. Scratch is O(seq * dim).
//
// Backward, per (batch, kv head), for each query head of its group and each
// block of kBlockRows query rows: the block's scores and dout . v products
// (kRows rows at a time, as in the forward); p = exp(s - lse) and
// ds = scale * p * (dout . v - D) in place; dq of the rows as ds times K;
// then dk += ds^T q and dv += p^T dout for every key the block sees. A task
// owns its dk and dv and the dq rows of its query heads, and every sum runs
// in a fixed order, so the results are the same bits for every thread count.
// Scratch is O(seq * (dim + kBlockRows)).
//
// Causal masking is done at kRows granularity: a group of rows computes
// scores up to its last row's keys, the masked ones among them get
// probability and ds +0 exactly, and each sum over keys or query rows stops
// (or starts) where the group's rows stop seeing anything. A +0 term times
// a finite value leaves a running sum's bits unchanged, so the extra terms
// cost time only. (Up to kRows - 1 keys past a row's last one do enter its
// sums that way, so an inf or NaN in their v or k would reach it.)
//
// Every product, exp and sum is written as lane-wise float operations in a
// fixed order, identical in the baseline (SSE2) and AVX2 copies of the
// loops (Simd.h): the CPU running the kernel changes the speed, not the
// bits.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Cpu/Attention.h"

#include "FastExp.h"
#include "Parallel.h"
#include "Simd.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace kiln::runtime::cpu {

using detail::fastExp;
using detail::Float4;
using detail::Float8;
using detail::lanes;
using detail::parallelFor;

namespace {

/// Rows of a multiplyTile tile: query rows per score group, key rows per dk
/// and dv group. The same for both copies of the loops, so that they mask
/// and skip the same terms.
constexpr int64_t kRows = 4;

/// Query rows per backward block: the k dimension of the dk and dv
/// products. A multiple of kRows.
constexpr int64_t kBlockRows = 64;

int64_t roundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/// Tasks per thread so that a thread gets about 2^20 multiply-adds.
int64_t taskGrain(int64_t workPerTask) {
  return std::max<int64_t>(1, (int64_t(1) << 20) /
                                  std::max<int64_t>(workPerTask, 1));
}

/// Strides of the [batch, seq, heads, dim] layouts, in floats.
struct Layout {
  int64_t qRow, kvRow, qBatch, kvBatch;
  explicit Layout(const AttentionShape &s)
      : qRow(s.qHeads * s.headDim), kvRow(s.kvHeads * s.headDim),
        qBatch(s.seq * s.qHeads * s.headDim),
        kvBatch(s.seq * s.kvHeads * s.headDim) {}
};

struct ForwardArgs {
  const float *q, *k, *v;
  float *out, *lse;
  AttentionShape shape;
  float scale;
  bool causal;
};

struct BackwardArgs {
  const float *q, *k, *v, *out, *lse, *dout;
  float *dq, *dk, *dv;
  AttentionShape shape;
  float scale;
  bool causal;
};

/// The kRows x (2 * lanes<V>()) tile at c (row stride ldc):
///
///   c[i][j] = (accumulate ? c[i][j] : 0) + sum_{p0 <= p < p1} a(i, p) b[p][j]
///
/// with a(i, p) = a[i * aRow + p * aCol] (so A may be read transposed) and
/// b[p][j] = b[p * ldb + j]. The sum runs over increasing p, one rounded
/// product and one rounded sum per term, whatever V is.
template <typename V>
KILN_ALWAYS_INLINE void multiplyTile(const float *a, int64_t aRow, int64_t aCol,
                                     const float *b, int64_t ldb, int64_t p0,
                                     int64_t p1, float *c, int64_t ldc,
                                     bool accumulate) {
  constexpr int W = lanes<V>();
  V acc[kRows][2];
  for (int64_t i = 0; i < kRows; ++i)
    for (int j = 0; j < 2; ++j) {
      if (accumulate)
        detail::vload(acc[i][j], c + i * ldc + j * W);
      else
        detail::vzero(acc[i][j]);
    }
  for (int64_t p = p0; p < p1; ++p) {
    V b0, b1;
    detail::vload(b0, b + p * ldb);
    detail::vload(b1, b + p * ldb + W);
    const float *ap = a + p * aCol;
    for (int64_t i = 0; i < kRows; ++i) {
      float ai = ap[i * aRow];
      detail::vmulAdd(acc[i][0], b0, ai);
      detail::vmulAdd(acc[i][1], b1, ai);
    }
  }
  for (int64_t i = 0; i < kRows; ++i)
    for (int j = 0; j < 2; ++j)
      detail::vstore(c + i * ldc + j * W, acc[i][j]);
}

/// x[0, n) *= scale, and returns the maximum (-inf when n is 0). Eight
/// fixed lanes: the maximum does not depend on the order anyway, and NaN
/// never wins a comparison, as in std::max.
KILN_ALWAYS_INLINE float scaleAndMax(float *x, int64_t n, float scale) {
  for (int64_t j = 0; j < n; ++j)
    x[j] *= scale;
  float m[8];
  std::fill(m, m + 8, -std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int l = 0; l < 8; ++l)
      m[l] = detail::selectFloat(x[j + l] > m[l], x[j + l], m[l]);
  for (; j < n; ++j)
    m[j % 8] = detail::selectFloat(x[j] > m[j % 8], x[j], m[j % 8]);
  for (int l = 1; l < 8; ++l)
    m[0] = detail::selectFloat(m[l] > m[0], m[l], m[0]);
  return m[0];
}

/// sum of x[0, n) in double, in eight fixed lanes combined pairwise.
KILN_ALWAYS_INLINE double sumDouble(const float *x, int64_t n) {
  double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int l = 0; l < 8; ++l)
      s[l] += double(x[j + l]);
  for (; j < n; ++j)
    s[j % 8] += double(x[j]);
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

/// Leading dimension of a scratch matrix with n columns: a multiple of nr,
/// plus 16 floats (a cache line) so that a walk down a column does not keep
/// landing in the same cache sets when n is a power of two.
int64_t paddedLd(int64_t n, int64_t nr) { return roundUp(n, nr) + 16; }

/// Zero-filled floats whose first element is 64-byte aligned (one cache
/// line, and the widest vector load).
class Scratch {
public:
  explicit Scratch(int64_t n) : storage(n + 16, 0.0f) {
    auto address = reinterpret_cast<uintptr_t>(storage.data());
    first = storage.data() + (64 - address % 64) % 64 / sizeof(float);
  }
  float *data() { return first; }
  float &operator[](int64_t i) { return first[i]; }

private:
  std::vector<float> storage;
  float *first;
};

/// Copies the kv head's rows [0, seq) of src (row stride `row`) into
/// transposed [dim, ldt]; columns past seq stay as they are (zero). Eight
/// keys at a time, so that every store fills part of one cache line.
KILN_ALWAYS_INLINE void packTransposed(const float *src, int64_t row,
                                       int64_t seq, int64_t dim, float *dst,
                                       int64_t ldt) {
  int64_t j0 = 0;
  for (; j0 + 8 <= seq; j0 += 8)
    for (int64_t d = 0; d < dim; ++d)
      for (int64_t j = j0; j < j0 + 8; ++j)
        dst[d * ldt + j] = src[j * row + d];
  for (int64_t d = 0; d < dim; ++d)
    for (int64_t j = j0; j < seq; ++j)
      dst[d * ldt + j] = src[j * row + d];
}

/// Copies rows [0, rows) of src (row stride `row`, dim floats each) into
/// [rows, ld]; columns past dim stay as they are (zero).
KILN_ALWAYS_INLINE void packRows(const float *src, int64_t row, int64_t rows,
                                 int64_t dim, float *dst, int64_t ld) {
  for (int64_t j = 0; j < rows; ++j)
    for (int64_t d = 0; d < dim; ++d)
      dst[j * ld + d] = src[j * row + d];
}

template <typename V>
KILN_ALWAYS_INLINE void forwardTasks(const ForwardArgs &args, int64_t begin,
                                     int64_t end) {
  constexpr int64_t NR = 2 * lanes<V>();
  const AttentionShape &shape = args.shape;
  const int64_t seq = shape.seq, dim = shape.headDim, qHeads = shape.qHeads,
                group = qHeads / shape.kvHeads;
  const bool causal = args.causal;
  const float scale = args.scale;
  const Layout L(shape);
  // Matrices indexed by key have leading dimension ldk, those indexed by
  // dim have dimCols (only walked along rows).
  const int64_t ldk = paddedLd(seq, NR), dimCols = roundUp(dim, NR);

  // kt: K transposed; vp: V as rows; qt: the group's q rows; s: its scores,
  // then probabilities; o: p v. Zero-filled once: the padding of kt and vp
  // is never written, and qt's rows past seq are cleared for the last group.
  Scratch kt(dim * ldk), vp(seq * dimCols), qt(kRows * dimCols), s(kRows * ldk),
      o(kRows * dimCols);
  float rowLse[kRows], rowInv[kRows];
  for (int64_t task = begin; task < end; ++task) {
    int64_t b = task / qHeads, h = task % qHeads, kh = h / group;
    const float *qh = args.q + b * L.qBatch + h * dim;
    float *oh = args.out + b * L.qBatch + h * dim;
    float *lseRow = args.lse + (b * qHeads + h) * seq;
    packTransposed(args.k + b * L.kvBatch + kh * dim, L.kvRow, seq, dim,
                   kt.data(), ldk);
    packRows(args.v + b * L.kvBatch + kh * dim, L.kvRow, seq, dim, vp.data(),
             dimCols);

    for (int64_t i0 = 0; i0 < seq; i0 += kRows) {
      const int64_t rows = std::min(kRows, seq - i0);
      // Keys seen by the group's last row: [0, n).
      const int64_t n = causal ? i0 + rows : seq;
      packRows(qh + i0 * L.qRow, L.qRow, rows, dim, qt.data(), dimCols);
      std::fill(qt.data() + rows * dimCols, qt.data() + kRows * dimCols, 0.0f);

      // Scores q k^T of the group, kRows x roundUp(n, NR).
      for (int64_t j0 = 0; j0 < n; j0 += NR)
        multiplyTile<V>(qt.data(), dimCols, 1, kt.data() + j0, ldk, 0, dim,
                        s.data() + j0, ldk, /*accumulate=*/false);

      // Row softmax, max-subtracted: p = exp(s - m), lse = m + log(sum p),
      // the sum in double. Masked keys up to n get p = +0.
      for (int64_t r = 0; r < rows; ++r) {
        float *sr = s.data() + r * ldk;
        const int64_t visible = causal ? i0 + r + 1 : seq;
        const float m = scaleAndMax(sr, visible, scale);
        for (int64_t j = 0; j < visible; ++j)
          sr[j] = fastExp(sr[j] - m);
        std::fill(sr + visible, sr + n, 0.0f);
        const double sum = sumDouble(sr, visible);
        rowLse[r] = float(double(m) + std::log(sum));
        rowInv[r] = float(1.0 / sum);
      }

      // o = p v over keys [0, n), then out = o / sum. Rows past seq (zero
      // q rows) are computed and dropped.
      for (int64_t c0 = 0; c0 < dimCols; c0 += NR)
        multiplyTile<V>(s.data(), ldk, 1, vp.data() + c0, dimCols, 0, n,
                        o.data() + c0, dimCols, /*accumulate=*/false);
      for (int64_t r = 0; r < rows; ++r) {
        float *oi = oh + (i0 + r) * L.qRow;
        for (int64_t d = 0; d < dim; ++d)
          oi[d] = o[r * dimCols + d] * rowInv[r];
        lseRow[i0 + r] = rowLse[r];
      }
    }
  }
}

template <typename V>
KILN_ALWAYS_INLINE void backwardTasks(const BackwardArgs &args, int64_t begin,
                                      int64_t end) {
  constexpr int64_t NR = 2 * lanes<V>();
  const AttentionShape &shape = args.shape;
  const int64_t seq = shape.seq, dim = shape.headDim, qHeads = shape.qHeads,
                kvHeads = shape.kvHeads, group = qHeads / kvHeads;
  const bool causal = args.causal;
  const float scale = args.scale;
  const Layout L(shape);
  const int64_t ldk = paddedLd(seq, NR), dimCols = roundUp(dim, NR);
  // Key groups of kRows never pass keyRows (NR is a multiple of kRows).
  const int64_t keyRows = roundUp(seq, NR);
  const int64_t blockRows = std::min(kBlockRows, roundUp(seq, kRows));

  // kt, vt: K and V transposed; kp: K as rows; dkAcc, dvAcc: the task's dk
  // and dv; qb, gb: the block's q and dout rows; sp: its scores, then p;
  // dp: its dout . v, then scale * ds; dqt: dq of a group. Padding stays
  // zero, as in forwardTasks.
  Scratch kt(dim * ldk), vt(dim * ldk), kp(seq * dimCols),
      dkAcc(keyRows * dimCols), dvAcc(keyRows * dimCols),
      qb(blockRows * dimCols), gb(blockRows * dimCols), sp(blockRows * ldk),
      dp(blockRows * ldk), dqt(kRows * dimCols);
  std::vector<float> rowD(blockRows), rowLse(blockRows);
  for (int64_t task = begin; task < end; ++task) {
    int64_t b = task / kvHeads, kh = task % kvHeads;
    const float *kb = args.k + b * L.kvBatch + kh * dim;
    const float *vb = args.v + b * L.kvBatch + kh * dim;
    packTransposed(kb, L.kvRow, seq, dim, kt.data(), ldk);
    packTransposed(vb, L.kvRow, seq, dim, vt.data(), ldk);
    packRows(kb, L.kvRow, seq, dim, kp.data(), dimCols);
    std::fill(dkAcc.data(), dkAcc.data() + keyRows * dimCols, 0.0f);
    std::fill(dvAcc.data(), dvAcc.data() + keyRows * dimCols, 0.0f);

    for (int64_t h = kh * group; h < (kh + 1) * group; ++h) {
      const float *qh = args.q + b * L.qBatch + h * dim;
      const float *oh = args.out + b * L.qBatch + h * dim;
      const float *gh = args.dout + b * L.qBatch + h * dim;
      float *dqh = args.dq + b * L.qBatch + h * dim;
      const float *lseRow = args.lse + (b * qHeads + h) * seq;

      for (int64_t i0 = 0; i0 < seq; i0 += blockRows) {
        const int64_t rows = std::min(blockRows, seq - i0);
        packRows(qh + i0 * L.qRow, L.qRow, rows, dim, qb.data(), dimCols);
        packRows(gh + i0 * L.qRow, L.qRow, rows, dim, gb.data(), dimCols);
        std::fill(qb.data() + rows * dimCols, qb.data() + blockRows * dimCols,
                  0.0f);
        std::fill(gb.data() + rows * dimCols, gb.data() + blockRows * dimCols,
                  0.0f);
        // D = dout . out, summed in the order multiplyTile sums dout . v:
        // a row that sees one key (out = v) gets ds = 0 exactly.
        for (int64_t r = 0; r < rows; ++r) {
          const float *gi = gh + (i0 + r) * L.qRow,
                      *oi = oh + (i0 + r) * L.qRow;
          float sum = 0;
          for (int64_t d = 0; d < dim; ++d)
            sum += gi[d] * oi[d];
          rowD[r] = sum;
          rowLse[r] = lseRow[i0 + r];
        }

        for (int64_t g0 = 0; g0 < rows; g0 += kRows) {
          const int64_t gEnd = std::min(g0 + kRows, rows);
          // Keys seen by the group's last row: [0, n), computed to cols.
          const int64_t n = causal ? i0 + gEnd : seq;
          const int64_t cols = roundUp(n, NR);
          float *sg = sp.data() + g0 * ldk, *dg = dp.data() + g0 * ldk;
          for (int64_t j0 = 0; j0 < cols; j0 += NR) {
            multiplyTile<V>(qb.data() + g0 * dimCols, dimCols, 1,
                            kt.data() + j0, ldk, 0, dim, sg + j0, ldk,
                            /*accumulate=*/false);
            multiplyTile<V>(gb.data() + g0 * dimCols, dimCols, 1,
                            vt.data() + j0, ldk, 0, dim, dg + j0, ldk,
                            /*accumulate=*/false);
          }
          // p = exp(scale s - lse) and ds = p (dout . v - D), kept times
          // scale. Masked entries and the padding up to cols become +0:
          // the dk and dv products below read them.
          for (int64_t r = g0; r < gEnd; ++r) {
            float *sr = sp.data() + r * ldk, *dr = dp.data() + r * ldk;
            const int64_t visible = causal ? i0 + r + 1 : seq;
            const float lse = rowLse[r], rd = rowD[r];
            for (int64_t j = 0; j < visible; ++j) {
              float p = fastExp(scale * sr[j] - lse);
              sr[j] = p;
              dr[j] = scale * (p * (dr[j] - rd));
            }
            std::fill(sr + visible, sr + cols, 0.0f);
            std::fill(dr + visible, dr + cols, 0.0f);
          }
          // dq of the group = (scale ds) k over keys [0, n). Rows past seq
          // (zero q and dout rows) are computed and dropped.
          for (int64_t c0 = 0; c0 < dimCols; c0 += NR)
            multiplyTile<V>(dg, ldk, 1, kp.data() + c0, dimCols, 0, n,
                            dqt.data() + c0, dimCols, /*accumulate=*/false);
          for (int64_t r = g0; r < gEnd; ++r) {
            float *dqi = dqh + (i0 + r) * L.qRow;
            for (int64_t d = 0; d < dim; ++d)
              dqi[d] = dqt[(r - g0) * dimCols + d];
          }
        }

        // dk[j] += sum_i (scale ds_ij) q_i and dv[j] += sum_i p_ij dout_i
        // over the block's rows i in order, kRows keys at a time, for the
        // keys the block sees. Under the mask, rows before j0 see none of
        // the keys j0.. and are skipped; the rows from j0 on read the +0
        // entries of keys they do not see.
        const int64_t n = causal ? i0 + rows : seq;
        for (int64_t j0 = 0; j0 < n; j0 += kRows) {
          const int64_t p0 = causal ? std::max<int64_t>(0, j0 - i0) : 0;
          for (int64_t c0 = 0; c0 < dimCols; c0 += NR) {
            multiplyTile<V>(dp.data() + j0, 1, ldk, qb.data() + c0, dimCols, p0,
                            rows, dkAcc.data() + j0 * dimCols + c0, dimCols,
                            /*accumulate=*/true);
            multiplyTile<V>(sp.data() + j0, 1, ldk, gb.data() + c0, dimCols, p0,
                            rows, dvAcc.data() + j0 * dimCols + c0, dimCols,
                            /*accumulate=*/true);
          }
        }
      }
    }

    float *dkh = args.dk + b * L.kvBatch + kh * dim;
    float *dvh = args.dv + b * L.kvBatch + kh * dim;
    for (int64_t j = 0; j < seq; ++j)
      for (int64_t d = 0; d < dim; ++d) {
        dkh[j * L.kvRow + d] = dkAcc[j * dimCols + d];
        dvh[j * L.kvRow + d] = dvAcc[j * dimCols + d];
      }
  }
}

using ForwardFn = void (*)(const ForwardArgs &, int64_t, int64_t);
using BackwardFn = void (*)(const BackwardArgs &, int64_t, int64_t);

void forwardBaseline(const ForwardArgs &args, int64_t begin, int64_t end) {
  forwardTasks<Float4>(args, begin, end);
}

void backwardBaseline(const BackwardArgs &args, int64_t begin, int64_t end) {
  backwardTasks<Float4>(args, begin, end);
}

#if KILN_HAVE_AVX2_PATH
KILN_TARGET_AVX2 void forwardAvx2(const ForwardArgs &args, int64_t begin,
                                  int64_t end) {
  forwardTasks<Float8>(args, begin, end);
}

KILN_TARGET_AVX2 void backwardAvx2(const BackwardArgs &args, int64_t begin,
                                   int64_t end) {
  backwardTasks<Float8>(args, begin, end);
}
#endif

/// The copy of the task loops this CPU runs (Simd.h).
ForwardFn forwardFn() {
#if KILN_HAVE_AVX2_PATH
  if (detail::useAvx2())
    return forwardAvx2;
#endif
  return forwardBaseline;
}

BackwardFn backwardFn() {
#if KILN_HAVE_AVX2_PATH
  if (detail::useAvx2())
    return backwardAvx2;
#endif
  return backwardBaseline;
}

} // namespace

void attention(const float *q, const float *k, const float *v, float *out,
               float *lse, const AttentionShape &shape, float scale,
               bool causal) {
  const int64_t seq = shape.seq, dim = shape.headDim;
  if (shape.batch <= 0 || seq <= 0 || shape.qHeads <= 0 || shape.kvHeads <= 0)
    return;
  const ForwardArgs args{q, k, v, out, lse, shape, scale, causal};
  const ForwardFn tasks = forwardFn();
  parallelFor(shape.batch * shape.qHeads, taskGrain(seq * seq * dim),
              [&](int64_t begin, int64_t end) { tasks(args, begin, end); });
}

void attentionBackward(const float *q, const float *k, const float *v,
                       const float *out, const float *lse, const float *dout,
                       float *dq, float *dk, float *dv,
                       const AttentionShape &shape, float scale, bool causal) {
  const int64_t seq = shape.seq, dim = shape.headDim, kvHeads = shape.kvHeads;
  if (shape.batch <= 0 || seq <= 0 || shape.qHeads <= 0 || kvHeads <= 0)
    return;
  const int64_t group = shape.qHeads / kvHeads;
  const BackwardArgs args{q,  k,  v,  out,   lse,   dout,
                          dq, dk, dv, shape, scale, causal};
  const BackwardFn tasks = backwardFn();
  parallelFor(shape.batch * kvHeads, taskGrain(group * seq * seq * dim),
              [&](int64_t begin, int64_t end) { tasks(args, begin, end); });
}

} // namespace kiln::runtime::cpu
