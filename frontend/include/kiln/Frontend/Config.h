//===- Config.h - A model description, parsed and validated ----*- C++ -*-===//
//
// Every key a model file may set, with its default. The schema in
// ConfigSchema.cpp maps TOML keys onto these fields and is the one source of
// truth for types, ranges, documentation (docs/config.md is generated from
// it) and for which keys have taken effect yet.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_FRONTEND_CONFIG_H
#define KILN_FRONTEND_CONFIG_H

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

struct ModelConfig {
  int64_t dim = 0;        // required
  int64_t n_layers = 0;   // required
  int64_t n_heads = 0;    // required
  int64_t n_kv_heads = 0; // 0: unset, same as n_heads
  int64_t vocab_size = 0; // required
  int64_t multiple_of = 256;
  double ffn_dim_multiplier = 0.0; // 0: unset
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  int64_t max_seq_len = 131072;
  bool tie_embeddings = false;

  int64_t kvHeads() const { return n_kv_heads ? n_kv_heads : n_heads; }
  int64_t headDim() const { return dim / n_heads; }
  /// Hidden size of the SwiGLU feed-forward block, Llama's rule: 2/3 of 4*dim,
  /// times ffn_dim_multiplier if set, rounded up to a multiple of multiple_of.
  int64_t ffnHiddenDim() const;
};

struct TrainingConfig {
  int64_t global_batch_size = 8;
  /// Sequences per microbatch on one rank; 0: unset, the rank's whole share
  /// of the global batch (no gradient accumulation).
  int64_t local_batch_size = 0;
  int64_t seq_len = 2048;
  int64_t steps = 1000;
  int64_t seed = 0;
  int64_t eval_interval = 100;
  int64_t eval_steps = 10;
  std::string data = "fortunes";
};

struct OptimizerConfig {
  double lr = 8e-4;
  std::array<double, 2> betas = {0.9, 0.95};
  double eps = 1e-8;
  double weight_decay = 0.1;
  double max_norm = 1.0;
};

struct LRSchedulerConfig {
  int64_t warmup_steps = 200;
  std::string decay = "cosine";
  double min_lr = 0.0;
};

struct CheckpointConfig {
  int64_t interval = 500;
  std::string folder = "checkpoints";
  std::string initial_load_path; // empty: none
  bool initial_load_model_only = true;
};

struct ParallelismConfig {
  int64_t data_parallel_shard_degree = -1;
  bool reshard_after_forward = true;
  // Tensor parallel (issue #17, docs/tp.md): validated with the mesh
  // (Mesh.h), then refused above 1 until the partition pass exists.
  int64_t tensor_parallel_degree = 1;
  bool enable_async_tensor_parallel = false;
  bool disable_loss_parallel = false;
  // Pipeline parallel (issue #18, docs/pp.md).
  int64_t pipeline_parallel_degree = 1;
  std::string pipeline_parallel_schedule = "1F1B";
  int64_t pipeline_parallel_microbatch_size = 1;
  int64_t pipeline_parallel_layers_per_stage = 0;
  /// Where stages begin, as TorchTitan names them ("layers.16"); empty: by
  /// pipeline_parallel_layers_per_stage or an even split.
  std::vector<std::string> pipeline_parallel_split_points;
};

struct MixedPrecisionConfig {
  std::string param = "bfloat16";
  std::string reduce = "float32";
};

struct ActivationCheckpointConfig {
  std::string mode = "none";
  /// selective's policy: "gemm", "op" or a number of blocks (TorchTitan's
  /// `selective_ac_option`; KilnDialect::isSelectiveAcPolicy).
  std::string selective_ac_option = "gemm";
};

/// TorchTitan's [comm] section.
struct CommConfig {
  int64_t train_timeout_seconds = 100;
};

struct MetricsConfig {
  bool enable_tensorboard = false;
  std::string save_tb_folder = "tb";
  double peak_tflops = 0.0; // 0: unset (the device's, when known)
};

struct Float8Config {
  bool enable = false;
  std::string recipe = "tensorwise";
  std::vector<std::string> filter_fqns;
  bool auto_filter_small_kn = true;
  bool force_output_projection = false;
  bool enable_fsdp_float8_all_gather = false;
  int64_t amax_history_len = 16;
  std::string amax_compute_algo = "max";
};

/// The device mesh of a run, `[pp, dp_shard, tp]` with tp innermost: rank
/// `r` sits at `(r / (dp_shard x tp), (r / tp) % dp_shard, r % tp)`, so a
/// tp group is consecutive ranks (one node's GPUs). Decided by resolveMesh
/// (Mesh.h) alone.
struct MeshShape {
  int64_t dpShard = 1;
  int64_t tp = 1;
  int64_t pp = 1;

  int64_t ranks() const { return pp * dpShard * tp; }
  int64_t dpShardIndex(int64_t rank) const { return rank / tp % dpShard; }
  int64_t tpIndex(int64_t rank) const { return rank % tp; }
  int64_t ppIndex(int64_t rank) const { return rank / (dpShard * tp); }
};

/// Where a key's value was written: for diagnostics and IR locations.
struct SourcePos {
  unsigned line = 0, column = 0;
};

struct Config {
  ModelConfig model;
  TrainingConfig training;
  OptimizerConfig optimizer;
  LRSchedulerConfig lr_scheduler;
  CheckpointConfig checkpoint;
  ParallelismConfig parallelism;
  MixedPrecisionConfig mixed_precision;
  ActivationCheckpointConfig activation_checkpoint;
  Float8Config float8;
  CommConfig comm;
  MetricsConfig metrics;

  /// The file (or preset name) the description came from.
  std::string sourceName;
  /// Where each key that was set (canonical "section.key") was written, and
  /// where each section header is.
  std::map<std::string, SourcePos> positions;
  /// The run's mesh, when parseConfig was given the run's world size; a
  /// config parsed without one (`kiln config`, `kiln sample`) is imported
  /// for one rank. Not a key: renderConfigToml never shows it.
  std::optional<MeshShape> mesh;
  /// The position on the mesh's tp axis that this compile is for (the one
  /// rank-dependent input of the compiler: kiln-tp-partition's slices):
  /// `world rank % tp` in `kiln train`, 0 in `kiln compile`. Not a key.
  int64_t tpPosition = 0;
  /// The position on the mesh's pp axis this compile is for: which stages
  /// the rank holds (`world rank / (dp_shard x tp)` in `kiln train`, 0 in
  /// `kiln compile`). Not a key.
  int64_t ppPosition = 0;

  MeshShape runMesh() const { return mesh.value_or(MeshShape{}); }
  /// Sequences each dp_shard rank takes of a global batch.
  int64_t rankBatch() const {
    return training.global_batch_size / runMesh().dpShard;
  }
  /// Sequences of one microbatch: under pipeline parallel
  /// parallelism.pipeline_parallel_microbatch_size, else
  /// training.local_batch_size, or the rank's whole share.
  int64_t microbatchRows() const {
    if (runMesh().pp > 1)
      return parallelism.pipeline_parallel_microbatch_size;
    return training.local_batch_size ? training.local_batch_size : rankBatch();
  }
  /// Pipeline stages in all (pp x the stages each pp rank holds).
  int64_t pipelineStages() const;
  /// The transformer layers [first, second) stage `s` holds. Valid once
  /// resolveMesh has checked the split.
  std::pair<int64_t, int64_t> stageLayers(int64_t s) const;
  /// Microbatches per step (gradient accumulation; 1: none).
  int64_t microbatches() const { return rankBatch() / microbatchRows(); }
};

} // namespace kiln

#endif // KILN_FRONTEND_CONFIG_H
