//===- AttentionOps.cpp - Attention forward and backward on the CPU -------===//
//
// One query row at a time: scores for the visible keys, their max, the
// log-sum-exp; never a seq x seq matrix. The backward recomputes each row's
// probabilities from the saved log-sum-exp. Accumulation order is fixed
// (heads, then rows, then keys), so the result is deterministic.
//
//===----------------------------------------------------------------------===//

#include "OpsInternal.h"

#include <cmath>
#include <cstring>

namespace kiln::runtime::ops {

namespace {
struct Shape {
  int64_t batch, seq, heads, kvHeads, dim, group;
  explicit Shape(const View &q, const View &k)
      : batch(q.shape[0]), seq(q.shape[1]), heads(q.shape[2]),
        kvHeads(k.shape[2]), dim(q.shape[3]), group(heads / kvHeads) {}
  int64_t q(int64_t b, int64_t s, int64_t h) const {
    return ((b * seq + s) * heads + h) * dim;
  }
  int64_t kv(int64_t b, int64_t s, int64_t h) const {
    return ((b * seq + s) * kvHeads + h) * dim;
  }
};

float dot(const float *a, const float *b, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i)
    s += a[i] * b[i];
  return s;
}
} // namespace

KILN_CPU_OP(attention) {
  const View &q = in[0], &k = in[1], &v = in[2];
  Shape sh(q, k);
  float scale = static_cast<float>(step.f64("scale"));
  bool causal = step.flag("causal");
  std::vector<float> scores(sh.seq);
  std::vector<double> acc(sh.dim);
  for (int64_t b = 0; b < sh.batch; ++b)
    for (int64_t h = 0; h < sh.heads; ++h) {
      int64_t kh = h / sh.group;
      for (int64_t i = 0; i < sh.seq; ++i) {
        int64_t visible = causal ? i + 1 : sh.seq;
        const float *qi = q.f32() + sh.q(b, i, h);
        float mx = -INFINITY;
        for (int64_t j = 0; j < visible; ++j) {
          scores[j] = scale * dot(qi, k.f32() + sh.kv(b, j, kh), sh.dim);
          mx = std::max(mx, scores[j]);
        }
        double sum = 0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < visible; ++j) {
          double p = std::exp(double(scores[j]) - mx);
          sum += p;
          const float *vj = v.f32() + sh.kv(b, j, kh);
          for (int64_t d = 0; d < sh.dim; ++d)
            acc[d] += p * vj[d];
        }
        float *o = out[0].f32() + sh.q(b, i, h);
        for (int64_t d = 0; d < sh.dim; ++d)
          o[d] = static_cast<float>(acc[d] / sum);
        out[1].f32()[(b * sh.heads + h) * sh.seq + i] =
            static_cast<float>(mx + std::log(sum));
      }
    }
  return "";
}

KILN_CPU_OP(attentionGrad) {
  const View &dout = in[0], &q = in[1], &k = in[2], &v = in[3], &o = in[4],
             &lse = in[5];
  Shape sh(q, k);
  float scale = static_cast<float>(step.f64("scale"));
  bool causal = step.flag("causal");
  float *dq = out[0].f32(), *dk = out[1].f32(), *dv = out[2].f32();
  std::memset(dq, 0, out[0].numElements() * sizeof(float));
  std::memset(dk, 0, out[1].numElements() * sizeof(float));
  std::memset(dv, 0, out[2].numElements() * sizeof(float));
  for (int64_t b = 0; b < sh.batch; ++b)
    for (int64_t h = 0; h < sh.heads; ++h) {
      int64_t kh = h / sh.group;
      for (int64_t i = 0; i < sh.seq; ++i) {
        int64_t visible = causal ? i + 1 : sh.seq;
        const float *qi = q.f32() + sh.q(b, i, h);
        const float *gi = dout.f32() + sh.q(b, i, h);
        float rowLse = lse.f32()[(b * sh.heads + h) * sh.seq + i];
        float delta = dot(gi, o.f32() + sh.q(b, i, h), sh.dim);
        float *dqi = dq + sh.q(b, i, h);
        for (int64_t j = 0; j < visible; ++j) {
          const float *kj = k.f32() + sh.kv(b, j, kh);
          const float *vj = v.f32() + sh.kv(b, j, kh);
          float p = std::exp(scale * dot(qi, kj, sh.dim) - rowLse);
          float ds = p * (dot(gi, vj, sh.dim) - delta);
          float *dkj = dk + sh.kv(b, j, kh), *dvj = dv + sh.kv(b, j, kh);
          for (int64_t d = 0; d < sh.dim; ++d) {
            dqi[d] += scale * ds * kj[d];
            dkj[d] += scale * ds * qi[d];
            dvj[d] += p * gi[d];
          }
        }
      }
    }
  return "";
}

} // namespace kiln::runtime::ops
