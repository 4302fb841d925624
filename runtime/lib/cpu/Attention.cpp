//===- Attention.cpp - Scaled dot-product attention, GQA, causal ----------===//
//
// Forward: for each (batch, query head) and each query row, a two-pass
// softmax over one row of scores (O(seq) scratch): the scores and their
// maximum, then the exponentials, their sum and the weighted sum of values.
//
// Backward: for each (batch, kv head), every query head of its group and
// every query row in increasing order recomputes its probabilities from
// lse and adds its share to dk and dv; dq of the row is finished before the
// next row starts. A (batch, kv head) task owns its dk and dv rows and the
// dq rows of its query heads, so tasks never write the same memory and the
// order of every sum is fixed: the same bits for every thread count.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Cpu/Attention.h"

#include "Parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace kiln::runtime::cpu {

using detail::axpy;
using detail::dot;
using detail::parallelFor;

namespace {

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

} // namespace

void attention(const float *q, const float *k, const float *v, float *out,
               float *lse, const AttentionShape &shape, float scale,
               bool causal) {
  const int64_t seq = shape.seq, dim = shape.headDim, qHeads = shape.qHeads;
  if (shape.batch <= 0 || seq <= 0 || qHeads <= 0 || shape.kvHeads <= 0)
    return;
  const int64_t group = qHeads / shape.kvHeads;
  const Layout L(shape);

  parallelFor(shape.batch * qHeads, taskGrain(seq * seq * dim),
              [&](int64_t begin, int64_t end) {
    std::vector<float> scores(seq), acc(dim);
    for (int64_t task = begin; task < end; ++task) {
      int64_t b = task / qHeads, h = task % qHeads, kh = h / group;
      const float *qb = q + b * L.qBatch + h * dim;
      const float *kb = k + b * L.kvBatch + kh * dim;
      const float *vb = v + b * L.kvBatch + kh * dim;
      float *ob = out + b * L.qBatch + h * dim;
      float *lseRow = lse + (b * qHeads + h) * seq;

      for (int64_t i = 0; i < seq; ++i) {
        const float *qi = qb + i * L.qRow;
        int64_t visible = causal ? i + 1 : seq;
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < visible; ++j) {
          scores[j] = scale * dot(qi, kb + j * L.kvRow, dim);
          m = std::max(m, scores[j]);
        }
        float sum = 0;
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t j = 0; j < visible; ++j) {
          float p = std::exp(scores[j] - m);
          sum += p;
          axpy(p, vb + j * L.kvRow, acc.data(), dim);
        }
        float inv = 1.0f / sum;
        float *oi = ob + i * L.qRow;
        for (int64_t d = 0; d < dim; ++d)
          oi[d] = acc[d] * inv;
        lseRow[i] = m + std::log(sum);
      }
    }
  });
}

void attentionBackward(const float *q, const float *k, const float *v,
                       const float *out, const float *lse, const float *dout,
                       float *dq, float *dk, float *dv,
                       const AttentionShape &shape, float scale, bool causal) {
  const int64_t seq = shape.seq, dim = shape.headDim, qHeads = shape.qHeads,
                kvHeads = shape.kvHeads;
  if (shape.batch <= 0 || seq <= 0 || qHeads <= 0 || kvHeads <= 0)
    return;
  const int64_t group = qHeads / kvHeads;
  const Layout L(shape);

  parallelFor(shape.batch * kvHeads, taskGrain(group * seq * seq * dim),
              [&](int64_t begin, int64_t end) {
    std::vector<float> dqAcc(dim);
    for (int64_t task = begin; task < end; ++task) {
      int64_t b = task / kvHeads, kh = task % kvHeads;
      const float *kb = k + b * L.kvBatch + kh * dim;
      const float *vb = v + b * L.kvBatch + kh * dim;
      float *dkb = dk + b * L.kvBatch + kh * dim;
      float *dvb = dv + b * L.kvBatch + kh * dim;
      for (int64_t j = 0; j < seq; ++j) {
        std::fill(dkb + j * L.kvRow, dkb + j * L.kvRow + dim, 0.0f);
        std::fill(dvb + j * L.kvRow, dvb + j * L.kvRow + dim, 0.0f);
      }

      for (int64_t h = kh * group; h < (kh + 1) * group; ++h) {
        const float *qb = q + b * L.qBatch + h * dim;
        const float *ob = out + b * L.qBatch + h * dim;
        const float *gb = dout + b * L.qBatch + h * dim;
        float *dqb = dq + b * L.qBatch + h * dim;
        const float *lseRow = lse + (b * qHeads + h) * seq;

        for (int64_t i = 0; i < seq; ++i) {
          const float *qi = qb + i * L.qRow, *gi = gb + i * L.qRow;
          float rowD = dot(gi, ob + i * L.qRow, dim);
          float rowLse = lseRow[i];
          int64_t visible = causal ? i + 1 : seq;
          std::fill(dqAcc.begin(), dqAcc.end(), 0.0f);
          for (int64_t j = 0; j < visible; ++j) {
            const float *kj = kb + j * L.kvRow, *vj = vb + j * L.kvRow;
            float p = std::exp(scale * dot(qi, kj, dim) - rowLse);
            float ds = p * (dot(gi, vj, dim) - rowD);
            axpy(ds, kj, dqAcc.data(), dim);
            axpy(scale * ds, qi, dkb + j * L.kvRow, dim);
            axpy(p, gi, dvb + j * L.kvRow, dim);
          }
          float *dqi = dqb + i * L.qRow;
          for (int64_t d = 0; d < dim; ++d)
            dqi[d] = scale * dqAcc[d];
        }
      }
    }
  });
}

} // namespace kiln::runtime::cpu
