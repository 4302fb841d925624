//===- Loss.h - Cross-entropy over the vocabulary ---------------*- C++ -*-===//
//
// logits are [rows, vocab], targets int32 [rows], each in [0, vocab):
//
//   lse_n = m_n + log(sum_v exp(logit_nv - m_n)),  m_n = max_v logit_nv
//           (exp in fp32, the sum and log in double)
//   loss  = (float) (mean over n of (lse_n - logit_n,t_n))   (double)
//
// and the gradient for an upstream dloss:
//
//   dlogit_nv = (exp(logit_nv - lse_n) - [v == t_n]) * (dloss / rows)
//
// with lse_n rounded to float and dloss / rows computed in double and
// rounded to float; the rest in fp32. A target outside [0, vocab) fails
// with the row and value in the message, and nothing is written. rows == 0
// gives a NaN loss (the mean of nothing, as in PyTorch).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CPU_LOSS_H
#define KILN_RUNTIME_CPU_LOSS_H

#include "kiln/Runtime/Cpu/Common.h"

#include <cstdint>

namespace kiln::runtime::cpu {

/// *loss = mean cross-entropy of `logits` against `targets`.
Error crossEntropy(const float *logits, const int32_t *targets, float *loss,
                   int64_t rows, int64_t vocab);

/// dlogits [rows, vocab] (overwritten; may be `logits`).
Error crossEntropyBackward(const float *logits, const int32_t *targets,
                           float dloss, float *dlogits, int64_t rows,
                           int64_t vocab);

/// Loss parallel (docs/tp.md, "The ends"): logits [rows, slice] are the
/// vocabulary entries [start, start + slice) of each row; those at `vocab`
/// or beyond are padding and take no part. Targets are f32 ids.
///
///   max_n      = max over the valid columns of logit_nv            (fp32)
///   stats_n,0  = sum over the valid columns of exp(logit_nv - m_n)
///                (exp in fp32, the sum in double, stored as float)
///   stats_n,1  = logit_n,(t_n - start) if t_n lies in the slice, else 0
///   loss       = (float) mean over n of (log s_n + m_n - t_n)       (double)
///   dstats_n   = (dloss / (rows s_n), -dloss / rows)       (double, rounded)
///   dlogit_nv  = dstats_n,0 exp(logit_nv - m_n) + dstats_n,1 [v = t_n - start]
///                on valid columns, 0 on padding                     (fp32)
///
/// with m and s the max and sums reduced over the tp ranks. A target that
/// is not an integer in [0, vocab) fails like cross_entropy's.
void vocabParallelMax(const float *logits, float *max, int64_t rows,
                      int64_t slice, int64_t start, int64_t vocab);
Error vocabParallelStats(const float *logits, const float *max,
                         const float *targets, float *stats, int64_t rows,
                         int64_t slice, int64_t start, int64_t vocab);
Error vocabParallelStatsBackward(const float *dstats, const float *logits,
                                 const float *max, const float *targets,
                                 float *dlogits, int64_t rows, int64_t slice,
                                 int64_t start, int64_t vocab);
void vocabParallelLoss(const float *stats, const float *max, float *loss,
                       int64_t rows);
void vocabParallelLossBackward(float dloss, const float *stats, float *dstats,
                               int64_t rows);

} // namespace kiln::runtime::cpu

#endif // KILN_RUNTIME_CPU_LOSS_H
