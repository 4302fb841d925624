//===- Mesh.cpp - The device mesh of a run, decided once ------------------===//

#include "kiln/Frontend/Mesh.h"

using namespace mlir;
using namespace kiln;

namespace {
constexpr llvm::StringLiteral kDpShardKey =
    "parallelism.data_parallel_shard_degree";
constexpr llvm::StringLiteral kTpKey = "parallelism.tensor_parallel_degree";
constexpr llvm::StringLiteral kPpKey = "parallelism.pipeline_parallel_degree";
constexpr llvm::StringLiteral kLayersKey =
    "parallelism.pipeline_parallel_layers_per_stage";
constexpr llvm::StringLiteral kScheduleKey =
    "parallelism.pipeline_parallel_schedule";
constexpr llvm::StringLiteral kMicrobatchKey =
    "parallelism.pipeline_parallel_microbatch_size";
constexpr llvm::StringLiteral kSplitKey =
    "parallelism.pipeline_parallel_split_points";

/// The layer a split point ("layers.N") names, if it names one.
std::optional<int64_t> splitLayer(llvm::StringRef point) {
  int64_t layer;
  if (!point.consume_front("layers.") || point.getAsInteger(10, layer) ||
      layer < 0)
    return std::nullopt;
  return layer;
}

/// The split points: each "layers.N", inside the model, increasing, and
/// not with pipeline_parallel_layers_per_stage.
LogicalResult checkSplitPoints(const Config &config, KeyErrorFn error) {
  const ParallelismConfig &p = config.parallelism;
  if (p.pipeline_parallel_layers_per_stage > 0) {
    error(kSplitKey) << kSplitKey << " and " << kLayersKey
                     << " both say how to split the layers; set one";
    return failure();
  }
  int64_t previous = 0;
  for (const std::string &point : p.pipeline_parallel_split_points) {
    std::optional<int64_t> layer = splitLayer(point);
    if (!layer || *layer <= previous || *layer >= config.model.n_layers) {
      error(kSplitKey) << kSplitKey << ": '" << point
                       << "' must be \"layers.N\" with N increasing from "
                          "split to split, in [1, model.n_layers = "
                       << config.model.n_layers << ")";
      return failure();
    }
    previous = *layer;
  }
  return success();
}

bool interleaved(const Config &config) {
  return config.parallelism.pipeline_parallel_schedule == "Interleaved1F1B";
}

/// The layer split: stages that hold whole layers, a whole number per pp
/// rank, one per rank for 1F1B and GPipe, more for Interleaved1F1B.
LogicalResult checkStages(const Config &config, KeyErrorFn error) {
  const ParallelismConfig &p = config.parallelism;
  int64_t pp = p.pipeline_parallel_degree, layers = config.model.n_layers;
  int64_t per = p.pipeline_parallel_layers_per_stage;
  bool split = !p.pipeline_parallel_split_points.empty();
  if (split && failed(checkSplitPoints(config, error)))
    return failure();
  if (per > 0 && layers % per != 0) {
    error(kLayersKey) << kLayersKey << " (" << per
                      << ") must divide model.n_layers (" << layers << ")";
    return failure();
  }
  int64_t stages = config.pipelineStages();
  if (per == 0 && !split && layers % stages != 0) {
    error(kPpKey) << "model.n_layers (" << layers
                  << ") does not split evenly into " << stages
                  << " pipeline stages (" << pp << " ranks x " << stages / pp
                  << "); set " << kLayersKey;
    return failure();
  }
  if (stages % pp != 0) {
    InFlightDiagnostic d = error(split ? kSplitKey : kLayersKey);
    if (split)
      d << kSplitKey << " makes " << stages << " stages";
    else
      d << kLayersKey << " (" << per << ") makes " << stages
        << " stages of model.n_layers (" << layers << ")";
    d << ", which " << kPpKey << " (" << pp << ") does not divide";
    return failure();
  }
  if (interleaved(config) ? stages / pp < 2 : stages != pp) {
    error(split     ? kSplitKey
          : per > 0 ? kLayersKey
                    : kScheduleKey)
        << kScheduleKey << " \"" << p.pipeline_parallel_schedule << "\" needs "
        << (interleaved(config) ? "at least two" : "one")
        << " stage per rank, but " << stages << " stages over " << pp
        << " ranks give " << stages / pp;
    return failure();
  }
  return success();
}

/// The microbatches of a pipeline-parallel step.
LogicalResult checkMicrobatches(const Config &config, int64_t dp,
                                KeyErrorFn error) {
  int64_t share = config.training.global_batch_size / dp;
  int64_t size = config.parallelism.pipeline_parallel_microbatch_size;
  int64_t pp = config.parallelism.pipeline_parallel_degree;
  if (config.training.local_batch_size != 0) {
    error("training.local_batch_size")
        << "training.local_batch_size cannot be combined with " << kPpKey
        << " (" << pp << "): the step runs its rank's whole share in "
        << kMicrobatchKey << " microbatches, in one schedule";
    return failure();
  }
  if (share % size != 0) {
    error(kMicrobatchKey) << kMicrobatchKey << " (" << size
                          << ") must divide each dp_shard rank's share of "
                             "the global batch ("
                          << config.training.global_batch_size << " / " << dp
                          << " = " << share << ")";
    return failure();
  }
  if (interleaved(config) && (share / size) % pp != 0) {
    error(kMicrobatchKey) << kScheduleKey << " \"Interleaved1F1B\" runs "
                          << "microbatches in rounds of " << kPpKey << " ("
                          << pp << "), but the step has " << share / size
                          << " (" << share << " / " << size << ")";
    return failure();
  }
  return success();
}
} // namespace

int64_t Config::pipelineStages() const {
  const ParallelismConfig &p = parallelism;
  if (!p.pipeline_parallel_split_points.empty())
    return static_cast<int64_t>(p.pipeline_parallel_split_points.size()) + 1;
  if (p.pipeline_parallel_layers_per_stage > 0)
    return std::max<int64_t>(1, model.n_layers /
                                    p.pipeline_parallel_layers_per_stage);
  return p.pipeline_parallel_degree *
         (p.pipeline_parallel_schedule == "Interleaved1F1B" ? 2 : 1);
}

std::pair<int64_t, int64_t> Config::stageLayers(int64_t s) const {
  const std::vector<std::string> &points =
      parallelism.pipeline_parallel_split_points;
  if (points.empty()) {
    int64_t per = model.n_layers / pipelineStages();
    return {s * per, (s + 1) * per};
  }
  auto at = [&](int64_t i) {
    return i == 0 ? 0
           : i > static_cast<int64_t>(points.size())
               ? model.n_layers
               : splitLayer(points[i - 1]).value_or(0);
  };
  return {at(s), at(s + 1)};
}

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
  int64_t pp = config.parallelism.pipeline_parallel_degree;
  if (pp > 1 && failed(checkStages(config, error)))
    return failure();
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
    if (world % (tp * pp) != 0) {
      InFlightDiagnostic d = error(pp > 1 ? kPpKey : kTpKey);
      if (pp > 1)
        d << kPpKey << " (" << pp << ") x ";
      d << kTpKey << " (" << tp << ") must divide the run's rank count ("
        << world << "; --world-size N or mpirun -np N)";
      return failure();
    }
    dp = world / (tp * pp);
  } else if (dp * tp * pp != world) {
    InFlightDiagnostic d = error(kDpShardKey);
    if (pp > 1)
      d << kPpKey << " (" << pp << ") x ";
    d << kDpShardKey << " (" << dp << ") x " << kTpKey << " (" << tp << ") is "
      << pp * dp * tp << " ranks, but the run has " << world
      << " (--world-size N or mpirun -np N)";
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
  if (pp > 1 && failed(checkMicrobatches(config, dp, error)))
    return failure();
  int64_t local = config.training.local_batch_size;
  if (local != 0 && (batch / dp) % local != 0) {
    error("training.local_batch_size")
        << "training.local_batch_size (" << local
        << ") must divide each dp_shard rank's share of the global batch ("
        << batch << " / " << dp << " = " << batch / dp << ")";
    return failure();
  }
  return std::optional<MeshShape>(MeshShape{dp, tp, pp});
}
