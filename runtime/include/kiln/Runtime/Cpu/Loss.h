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

} // namespace kiln::runtime::cpu

#endif // KILN_RUNTIME_CPU_LOSS_H
