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
// A tensor-parallel rank's table holds a slice of the vocabulary's rows
// (TableSlice): a token of the vocabulary outside the slice looks up a row
// of zeros and adds to no row, so the ranks' lookups sum to the whole
// table's and their gradients are its rows.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CPU_EMBEDDING_H
#define KILN_RUNTIME_CPU_EMBEDDING_H

#include "kiln/Runtime/Cpu/Common.h"

#include <cstdint>

namespace kiln::runtime::cpu {

/// The rows a table holds: the ids [start, start + rows) of a vocabulary
/// of `vocab` ids (rows past `vocab` are padding).
struct TableSlice {
  int64_t rows = 0, start = 0, vocab = 0;
  /// A whole table of `rows` ids.
  static TableSlice whole(int64_t rows) { return {rows, 0, rows}; }
};

/// out [numTokens, dim] = rows of `table` [rows, dim].
Error embedding(const float *table, const int32_t *tokens, float *out,
                int64_t numTokens, TableSlice slice, int64_t dim);

/// dtable [rows, dim] += scatter of dout [numTokens, dim] by token.
Error embeddingBackward(const float *dout, const int32_t *tokens, float *dtable,
                        int64_t numTokens, TableSlice slice, int64_t dim);

} // namespace kiln::runtime::cpu

#endif // KILN_RUNTIME_CPU_EMBEDDING_H
