//===- Mesh.cpp - The device mesh of a run, decided once ------------------===//

#include "kiln/Frontend/Mesh.h"

using namespace mlir;
using namespace kiln;

namespace {
constexpr llvm::StringLiteral kDpShardKey =
    "parallelism.data_parallel_shard_degree";
constexpr llvm::StringLiteral kTpKey = "parallelism.tensor_parallel_degree";
} // namespace

FailureOr<std::optional<MeshShape>>
kiln::resolveMesh(const Config &config, std::optional<int64_t> worldSize,
                  KeyErrorFn error) {
  const ModelConfig &m = config.model;
  int64_t dp = config.parallelism.data_parallel_shard_degree;
  int64_t tp = config.parallelism.tensor_parallel_degree;
  // The schema's ranges refuse tp < 1 and dp < -1 as each key is read.
  if (dp == 0) {
    error(kDpShardKey) << kDpShardKey
                       << " must be -1 (all ranks) or at least 1, got 0";
    return failure();
  }
  if (tp < 1) {
    error(kTpKey) << kTpKey << " must be at least 1, got " << tp;
    return failure();
  }
  // What each tp rank owns a slice of (docs/tp.md, the partition).
  auto mustDivide = [&](llvm::StringRef what, int64_t n, llvm::StringRef from,
                        llvm::StringRef why) -> LogicalResult {
    if (n % tp == 0)
      return success();
    error(kTpKey) << kTpKey << " (" << tp << ") must divide " << what << " ("
                  << n << from << "): " << why;
    return failure();
  };
  if (failed(mustDivide("model.n_heads", m.n_heads, "",
                        "each tp rank computes n_heads / tp query heads")) ||
      failed(mustDivide("model.n_kv_heads", m.kvHeads(), "",
                        "each tp rank computes n_kv_heads / tp kv heads")) ||
      failed(mustDivide("the FFN's hidden size", m.ffnHiddenDim(),
                        ", from model.dim, model.ffn_dim_multiplier and "
                        "model.multiple_of",
                        "each tp rank owns hidden / tp of w1, w3 and w2")) ||
      failed(mustDivide("training.seq_len", config.training.seq_len, "",
                        "sequence parallel gives each tp rank seq_len / tp "
                        "positions between blocks")))
    return failure();
  if (!worldSize)
    return std::optional<MeshShape>();

  int64_t world = *worldSize;
  if (dp == -1) {
    if (world % tp != 0) {
      error(kTpKey) << kTpKey << " (" << tp
                    << ") must divide the run's rank count (" << world
                    << "; --world-size N or mpirun -np N)";
      return failure();
    }
    dp = world / tp;
  } else if (dp * tp != world) {
    error(kDpShardKey) << kDpShardKey << " (" << dp << ") x " << kTpKey << " ("
                       << tp << ") is " << dp * tp << " ranks, but the run has "
                       << world << " (--world-size N or mpirun -np N)";
    return failure();
  }
  int64_t batch = config.training.global_batch_size;
  if (batch % dp != 0) {
    error("training.global_batch_size")
        << "training.global_batch_size (" << batch
        << ") does not split evenly over the mesh's " << dp
        << " dp_shard ranks";
    return failure();
  }
  int64_t local = config.training.local_batch_size;
  if (local != 0 && (batch / dp) % local != 0) {
    error("training.local_batch_size")
        << "training.local_batch_size (" << local
        << ") must divide each dp_shard rank's share of the global batch ("
        << batch << " / " << dp << " = " << batch / dp << ")";
    return failure();
  }
  return std::optional<MeshShape>(MeshShape{dp, tp});
}
