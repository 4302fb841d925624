//===- Embedding.cpp - Token embedding lookup and its gradient ------------===//
//
// Tokens are checked before anything is written, so a bad id leaves the
// outputs untouched. The lookup splits tokens over threads. The gradient
// splits the columns: each thread adds, for every token in order, its slice
// of dout into its slice of dtable, so repeated tokens accumulate in the
// same order whatever the thread count.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Cpu/Embedding.h"

#include "Parallel.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace kiln::runtime::cpu {

using detail::parallelFor;

namespace {

constexpr int64_t kGrainElements = 1 << 15;

/// Fails on the first token outside [0, vocab).
Error checkTokens(const char *op, const int32_t *tokens, int64_t numTokens,
                  int64_t vocab) {
  for (int64_t t = 0; t < numTokens; ++t)
    if (tokens[t] < 0 || tokens[t] >= vocab)
      return Error(std::string(op) + ": token " + std::to_string(tokens[t]) +
                   " at position " + std::to_string(t) + " is outside [0, " +
                   std::to_string(vocab) + ")");
  return Error::success();
}

} // namespace

Error embedding(const float *table, const int32_t *tokens, float *out,
                int64_t numTokens, TableSlice slice, int64_t dim) {
  if (Error e = checkTokens("embedding", tokens, numTokens, slice.vocab))
    return e;
  if (dim <= 0)
    return Error::success();
  int64_t grain = std::max<int64_t>(1, kGrainElements / dim);
  parallelFor(numTokens, grain, [=](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      int64_t row = tokens[t] - slice.start;
      if (row >= 0 && row < slice.rows)
        std::memcpy(out + t * dim, table + row * dim, sizeof(float) * dim);
      else
        std::fill_n(out + t * dim, dim, 0.0f);
    }
  });
  return Error::success();
}

Error embeddingBackward(const float *dout, const int32_t *tokens, float *dtable,
                        int64_t numTokens, TableSlice slice, int64_t dim) {
  if (Error e = checkTokens("embedding_grad", tokens, numTokens, slice.vocab))
    return e;
  if (numTokens <= 0)
    return Error::success();
  // Column ranges of at least 16 floats (one cache line of each row).
  int64_t grain = std::max<int64_t>(16, kGrainElements / numTokens);
  parallelFor(dim, grain, [=](int64_t b, int64_t e) {
    for (int64_t t = 0; t < numTokens; ++t) {
      int64_t r = tokens[t] - slice.start;
      if (r < 0 || r >= slice.rows)
        continue;
      const float *g = dout + t * dim;
      float *row = dtable + r * dim;
      for (int64_t i = b; i < e; ++i)
        row[i] += g[i];
    }
  });
  return Error::success();
}

} // namespace kiln::runtime::cpu
