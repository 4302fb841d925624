//===- Attention.h - Scaled dot-product attention, GQA, causal --*- C++ -*-===//
//
// q is [batch, seq, qHeads, dim]; k and v are [batch, seq, kvHeads, dim];
// kvHeads divides qHeads and query head h reads kv head h / (qHeads /
// kvHeads). Query row i sees keys j < seq, or j <= i when causal:
//
//   s_ij = scale * (q_i . k_j)                               (fp32)
//   lse_i = log(sum_j exp(s_ij))   (max-subtracted)          [batch, qHeads, seq]
//   out_i = sum_j exp(s_ij - lse_i) v_j                      [batch, seq, qHeads, dim]
//
// Gradient, from dout and the forward's out and lse:
//
//   p_ij = exp(s_ij - lse_i),  D_i = dout_i . out_i
//   ds_ij = p_ij (dout_i . v_j - D_i)
//   dq_i = scale * sum_j ds_ij k_j
//   dk_j = scale * sum_i ds_ij q_i,  dv_j = sum_i p_ij dout_i
//
// with dk and dv also summed over the query heads that share a kv head.
// Scores are formed for a few query rows at a time (4 in a group, 64 in a
// backward block) against the keys they see, as small matrix products:
// memory is O(seq * (dim + 64)) per thread, never seq x seq. The softmax
// denominator accumulates in double; exp is a polynomial approximation
// within 1 ulp (lib/Cpu/FastExp.h). Work is split over
// (batch, head) in the forward and over (batch, kv head) in the backward,
// each computed serially in a fixed order, so results do not depend on the
// thread count, nor on whether the kernels' AVX2 loops or their baseline
// (SSE2) loops run.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CPU_ATTENTION_H
#define KILN_RUNTIME_CPU_ATTENTION_H

#include <cstdint>

namespace kiln::runtime::cpu {

struct AttentionShape {
  int64_t batch = 0, seq = 0, qHeads = 0, kvHeads = 0, headDim = 0;
};

/// out [batch, seq, qHeads, dim] and lse [batch, qHeads, seq] (both fp32).
void attention(const float *q, const float *k, const float *v, float *out,
               float *lse, const AttentionShape &shape, float scale,
               bool causal);

/// dq (shaped like q), dk and dv (shaped like k), all overwritten.
void attentionBackward(const float *q, const float *k, const float *v,
                       const float *out, const float *lse, const float *dout,
                       float *dq, float *dk, float *dv,
                       const AttentionShape &shape, float scale, bool causal);

} // namespace kiln::runtime::cpu

#endif // KILN_RUNTIME_CPU_ATTENTION_H
