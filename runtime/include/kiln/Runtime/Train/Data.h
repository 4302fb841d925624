//===- Data.h - Training tokens and deterministic batches -------*- C++ -*-===//

#ifndef KILN_RUNTIME_TRAIN_DATA_H
#define KILN_RUNTIME_TRAIN_DATA_H

#include "kiln/Runtime/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::runtime {

/// The text of Debian's `fortunes` package (every fortune file, in name
/// order), the default training data.
inline constexpr const char *kDefaultData = "fortunes";
inline constexpr const char *kFortunesDir = "/usr/share/games/fortunes";

/// Loads training tokens. A token file has llm.c's header (256 little-endian
/// int32: magic 20240520, version 1 for uint16 tokens or 2 for uint32, the
/// token count) followed by the tokens; any other file is raw text whose
/// bytes are the tokens (vocab 256). `kDefaultData` reads the fortunes.
/// Fails, with one line, on a missing or empty file, a truncated token
/// file, or a token id >= vocab.
Expected<std::vector<uint32_t>> loadTokens(const std::string &path,
                                           int64_t vocab);

/// The split: the first 90% of the tokens train, the rest validate.
struct Split {
  size_t trainBegin, trainEnd, validBegin, validEnd;
};
/// Fails if either part is shorter than one sequence plus its target.
Expected<Split> splitTokens(size_t count, int64_t seqLen);

/// Training data and its split into training and validation tokens.
struct Dataset {
  std::vector<uint32_t> tokens;
  Split split;
  /// Token shards read (0 for a single file or the fortunes).
  size_t trainShards = 0, validShards = 0;
};

/// Loads `path` for a model of `vocab` tokens trained on `seqLen`-token
/// sequences. `path` is what loadTokens reads (split by splitTokens), a
/// folder of token shards (its `*.bin` files), or a glob pattern of token
/// shards (`data/*_train_*.bin`). Shards are read in name order; those
/// whose file name starts with `val` or contains `_val` are the validation
/// part (as `kiln tokenize` and llm.c name them), the others train. Without
/// a validation shard the shards' tokens are split by splitTokens. Fails on
/// anything loadTokens refuses, a shard without llm.c's header, a pattern
/// or folder with no shards, or a part shorter than one sequence plus its
/// target.
Expected<Dataset> loadDataset(const std::string &path, int64_t vocab,
                              int64_t seqLen);

/// Fills `inputs` and `targets` ([batch, seq] each) with windows of
/// `tokens[begin, end)`: row b starts at a position drawn from (seed, draw,
/// b) and targets are the inputs shifted by one. The same arguments give
/// the same batch. With `firstRow` and `rows`, only rows [firstRow,
/// firstRow + rows) of that batch are drawn, into rows 0.. of the outputs
/// (one rank's share of a global batch).
void fillBatch(const std::vector<uint32_t> &tokens, size_t begin, size_t end,
               int64_t batch, int64_t seqLen, uint64_t seed, uint64_t draw,
               int32_t *inputs, int32_t *targets, int64_t firstRow = 0,
               int64_t rows = -1);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_TRAIN_DATA_H
