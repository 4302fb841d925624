//===- Embedding.h - Token embedding lookup and its gradient ----*- C++ -*-===//
//
// table is [vocab, dim], tokens int32 [numTokens]:
//
//   out[t, :] = table[tokens[t], :]
//   dtable[tokens[t], :] += dout[t, :]      for t = 0, 1, ... in order
//
// The backward ACCUMULATES into dtable: zero it first for a plain gradient.
// Each row of dtable receives its updates in increasing t, so the result
// is bit-identical for every thread count (threads split the columns).
// A token outside [0, vocab) fails with its position and value in the
// message, and nothing is written.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CPU_EMBEDDING_H
#define KILN_RUNTIME_CPU_EMBEDDING_H

#include "kiln/Runtime/Cpu/Common.h"

#include <cstdint>

namespace kiln::runtime::cpu {

/// out [numTokens, dim] = rows of `table` [vocab, dim].
Error embedding(const float *table, const int32_t *tokens, float *out,
                int64_t numTokens, int64_t vocab, int64_t dim);

/// dtable [vocab, dim] += scatter of dout [numTokens, dim] by token.
Error embeddingBackward(const float *dout, const int32_t *tokens, float *dtable,
                        int64_t numTokens, int64_t vocab, int64_t dim);

} // namespace kiln::runtime::cpu

#endif // KILN_RUNTIME_CPU_EMBEDDING_H
