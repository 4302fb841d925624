//===- Checkpoint.h - Training checkpoints on disk --------------*- C++ -*-===//
//
// A checkpoint is a directory of two safetensors files:
//   model.safetensors      the fp32 master weights under their Hugging Face
//                          parameter names (so resuming is bit-exact and the
//                          file loads into transformers as it is);
//   optimizer.safetensors  the optimizer state (exp_avg.<param>, ...).
// Both carry the metadata {"format": "pt", "kiln_step": "<steps done>"} and
// the caller's metadata, so a pair left half-replaced by a crash is caught
// when loading by the two steps disagreeing.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_TRAIN_CHECKPOINT_H
#define KILN_RUNTIME_TRAIN_CHECKPOINT_H

#include "kiln/Runtime/Safetensors.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kiln::runtime {

inline constexpr const char *kModelCheckpointFile = "model.safetensors";
inline constexpr const char *kOptimizerCheckpointFile = "optimizer.safetensors";
/// A Hugging Face model folder's list of its weight shards.
inline constexpr const char *kShardIndexFile = "model.safetensors.index.json";
/// The metadata keys the checkpoint writes itself; callers may not set them.
inline constexpr const char *kCheckpointFormatKey = "format";
inline constexpr const char *kCheckpointStepKey = "kiln_step";

using CheckpointTensor = FloatTensor;

struct Checkpoint {
  int64_t step = 0; // optimizer steps done
  /// E.g. seed, model, format version; the reserved keys above excluded.
  std::map<std::string, std::string> metadata;
  /// HF parameter names, e.g. model.layers.0.self_attn.q_proj.weight.
  std::vector<CheckpointTensor> model;
  /// E.g. exp_avg.<param>, exp_avg_sq.<param>.
  std::vector<CheckpointTensor> optimizer;
  /// Other files of the folder, name -> contents (config.toml, the model
  /// to sample from): written before the weights.
  std::map<std::string, std::string> files;
};

/// The tensors a checkpoint must hold: name -> shape.
using TensorShapes = std::map<std::string, std::vector<int64_t>>;

/// Writes DIR/model.safetensors and DIR/optimizer.safetensors (F32, in name
/// order), creating DIR if needed. Everything is checked and both files are
/// fully written and synced beside their targets before either replaces its
/// old version, so a failed save (bad tensor, disk full, permissions) leaves
/// any previous checkpoint in DIR as it was. Fails with an error line.
Error saveCheckpoint(const std::string &dir, const Checkpoint &checkpoint);

/// Reads both files of DIR and checks them against the expected tensors: a
/// missing or extra tensor, a shape that differs, or the files disagreeing
/// on the step fails with one line naming the tensor or file.
Expected<Checkpoint> loadCheckpoint(const std::string &dir,
                                    const TensorShapes &expectedModel,
                                    const TensorShapes &expectedOptimizer);

/// Reads only DIR/model.safetensors (for sampling), with no expected set;
/// `optimizer` stays empty. A file without kiln_step (e.g. one from Hugging
/// Face, possibly BF16) loads with step 0.
Expected<Checkpoint> loadModelWeights(const std::string &dir);

/// Pretrained weights to start from (`[checkpoint] initial_load_path`):
/// `path` is a Hugging Face model folder (model.safetensors, or the shards
/// model.safetensors.index.json lists) or one .safetensors file, of F32,
/// BF16 or F16 tensors under HF Llama names, RoPE in HF's rotate-half
/// layout (Kiln's own). Every expected tensor must be there with its shape
/// and finite, and nothing else; one line naming the tensor and the file
/// otherwise.
Expected<std::vector<FloatTensor>>
loadPretrainedWeights(const std::string &path, const TensorShapes &expected);

/// One line naming the first NaN or infinity of `tensors` (which `where`
/// held), or success.
Error checkFinite(const std::string &where,
                  const std::vector<FloatTensor> &tensors);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_TRAIN_CHECKPOINT_H
