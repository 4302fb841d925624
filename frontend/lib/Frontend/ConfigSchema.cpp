//===- ConfigSchema.cpp - Every key of a model description ----------------===//
//
// The table below is the single source of truth for the model file format:
// the parser validates against it and docs/config.md is rendered from it
// (`kiln config --markdown`; a test keeps the committed file in sync).
//
//===----------------------------------------------------------------------===//

#include "kiln/Frontend/ConfigSchema.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>

using namespace kiln;

#define FIELD(path) +[](Config &c) -> decltype(auto) { return (c.path); }

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr const char *kImport = "import (#2)";
constexpr const char *kTrain = "training step and runtime (#3)";
constexpr const char *kOptim = "train phase: kiln-optimizer (#3)";
constexpr const char *kTrainCmd = "kiln train (#3)";
constexpr const char *kPrecision = "precision phase: kiln-mixed-precision (#3)";
constexpr const char *kFsdp = "FSDP passes (#4)";
constexpr const char *kTp = "tensor-parallel passes (#17, docs/tp.md)";
constexpr const char *kPp = "pipeline-parallel passes (#18, docs/pp.md)";
constexpr const char *kFp8 = "FP8 passes (#5)";

// Shorthands for the common shapes of a table row.
KeySpec intKey(const char *s, const char *k, ConfigField f, double lo,
               double hi, const char *doc, const char *cap, bool impl,
               bool required = false, const char *unset = nullptr) {
  return {s,       k,   f,   lo,   hi,       false, false, "",
          unset,   doc, cap, impl, required};
}
KeySpec floatKey(const char *s, const char *k, ConfigField f, double lo,
                 bool loOpen, double hi, bool hiOpen, const char *doc,
                 const char *cap, bool impl, const char *unset = nullptr) {
  return {s, k, f, lo, hi, loOpen, hiOpen, "", unset, doc, cap, impl, false};
}
KeySpec otherKey(const char *s, const char *k, ConfigField f,
                 const char *choices, const char *doc, const char *cap,
                 bool impl) {
  return {s, k, f, 0, 0, false, false, choices, nullptr, doc, cap, impl, false};
}
} // namespace

const std::vector<KeySpec> &kiln::configSchema() {
  static const std::vector<KeySpec> schema = {
      // [model]
      intKey("model", "dim", FIELD(model.dim), 1, 65536,
             "Width of the residual stream.", kImport, true, true),
      intKey("model", "n_layers", FIELD(model.n_layers), 1, 1024,
             "Number of transformer blocks.", kImport, true, true),
      intKey("model", "n_heads", FIELD(model.n_heads), 1, 1024,
             "Query heads; must divide `dim`, and `dim / n_heads` (the head "
             "dim) must be even for RoPE.",
             kImport, true, true),
      intKey("model", "n_kv_heads", FIELD(model.n_kv_heads), 1, 1024,
             "Key/value heads (grouped-query attention); must divide "
             "`n_heads`.",
             kImport, true, false, "unset: equal to `n_heads`"),
      intKey("model", "vocab_size", FIELD(model.vocab_size), 1, 1 << 22,
             "Rows of the embedding and of the output projection.", kImport,
             true, true),
      intKey("model", "multiple_of", FIELD(model.multiple_of), 1, 65536,
             "The feed-forward hidden size is rounded up to a multiple of "
             "this.",
             kImport, true),
      floatKey("model", "ffn_dim_multiplier", FIELD(model.ffn_dim_multiplier),
               0, true, 64, false,
               "Scales the feed-forward hidden size (2/3 of 4*dim) before "
               "rounding.",
               kImport, true, "unset: no scaling"),
      floatKey("model", "norm_eps", FIELD(model.norm_eps), 0, true, 1, true,
               "Epsilon of every RMSNorm.", kImport, true),
      floatKey("model", "rope_theta", FIELD(model.rope_theta), 1, true, 1e12,
               false, "Base of the rotary position embedding frequencies.",
               kImport, true),
      intKey("model", "max_seq_len", FIELD(model.max_seq_len), 1, 1 << 24,
             "Longest sequence the model supports; `training.seq_len` may not "
             "exceed it.",
             kImport, true),
      otherKey("model", "tie_embeddings", FIELD(model.tie_embeddings), "",
               "The output projection reuses the embedding table (one "
               "parameter, `model.embed_tokens.weight`).",
               kImport, true),
      // [training]
      intKey("training", "global_batch_size", FIELD(training.global_batch_size),
             1, 1 << 20,
             "Sequences per step over all ranks; split evenly over the "
             "data-parallel ranks.",
             kImport, true),
      intKey("training", "local_batch_size", FIELD(training.local_batch_size),
             1, 1 << 20,
             "Sequences per microbatch on one rank. Below the rank's share "
             "of `global_batch_size` it must divide that share, and each "
             "step accumulates the gradients of share / local_batch_size "
             "microbatches (docs/pp.md, \"Gradient accumulation\").",
             kImport, true, false, "unset: the rank's whole share"),
      intKey("training", "seq_len", FIELD(training.seq_len), 1, 1 << 20,
             "Tokens per sequence.", kImport, true),
      intKey("training", "steps", FIELD(training.steps), 1, 1e9,
             "Optimizer steps to train.", kOptim, true),
      intKey("training", "seed", FIELD(training.seed), 0, 9007199254740992.0,
             "Seed of parameter init and data order.", kTrainCmd, true),
      intKey("training", "eval_interval", FIELD(training.eval_interval), 0, 1e9,
             "Steps between validation-loss evaluations (0: never).", kTrainCmd,
             true),
      intKey("training", "eval_steps", FIELD(training.eval_steps), 1, 1e5,
             "Batches per validation-loss evaluation.", kTrainCmd, true),
      otherKey("training", "data", FIELD(training.data), "",
               "Training data: `fortunes` (Debian's fortunes text), a text "
               "file read as bytes, an llm.c token file, or a folder or glob "
               "of token shards (`kiln tokenize`; names starting with `val` "
               "or holding `_val` are the validation set).",
               kTrainCmd, true),
      // [optimizer]
      floatKey("optimizer", "lr", FIELD(optimizer.lr), 0, true, 10, false,
               "Peak learning rate of AdamW.", kOptim, true),
      floatKey("optimizer", "betas", FIELD(optimizer.betas), 0, false, 1, true,
               "AdamW's (beta1, beta2), a two-element array.", kOptim, true),
      floatKey("optimizer", "eps", FIELD(optimizer.eps), 0, true, 1, false,
               "AdamW's epsilon.", kOptim, true),
      floatKey("optimizer", "weight_decay", FIELD(optimizer.weight_decay), 0,
               false, 10, false, "Decoupled weight decay.", kOptim, true),
      floatKey("optimizer", "max_norm", FIELD(optimizer.max_norm), 0, false,
               1e9, false, "Global gradient-norm clipping (0: no clipping).",
               kOptim, true),
      // [lr_scheduler]
      intKey("lr_scheduler", "warmup_steps", FIELD(lr_scheduler.warmup_steps),
             0, 1e9, "Steps of linear warm-up from 0 to `optimizer.lr`.",
             kOptim, true),
      otherKey("lr_scheduler", "decay", FIELD(lr_scheduler.decay),
               "cosine|constant",
               "Schedule after warm-up: cosine decay to `min_lr` at the last "
               "step, or constant.",
               kOptim, true),
      floatKey("lr_scheduler", "min_lr", FIELD(lr_scheduler.min_lr), 0, false,
               10, false, "Learning rate at the end of the decay.", kOptim,
               true),
      // [checkpoint]
      intKey("checkpoint", "interval", FIELD(checkpoint.interval), 0, 1e9,
             "Steps between checkpoints (0: only at the end).", kTrainCmd,
             true),
      otherKey("checkpoint", "folder", FIELD(checkpoint.folder), "",
               "Folder, under the run's output folder, for checkpoints.",
               kTrainCmd, true),
      otherKey("checkpoint", "initial_load_path",
               FIELD(checkpoint.initial_load_path), "",
               "Weights to start from at step 0 when not resuming: a Hugging "
               "Face model folder (model.safetensors, or the shards "
               "model.safetensors.index.json lists; F32, BF16 or F16) or one "
               ".safetensors file (`kiln config --from-hf` writes it); empty: "
               "the model's own initialization.",
               kTrainCmd, true),
      otherKey("checkpoint", "initial_load_model_only",
               FIELD(checkpoint.initial_load_model_only), "",
               "Load only the weights from `initial_load_path` (the optimizer "
               "starts fresh at step 0); false: it is a Kiln checkpoint, "
               "loaded whole with its step and optimizer state.",
               kTrainCmd, true),
      // [parallelism]
      intKey("parallelism", "data_parallel_shard_degree",
             FIELD(parallelism.data_parallel_shard_degree), -1, 65536,
             "FSDP ranks, the mesh's outer axis (-1: the run's ranks, "
             "`mpirun -np N`, divided by `tensor_parallel_degree`); any "
             "other value times `tensor_parallel_degree` must equal the "
             "run's rank count. 0 is not allowed.",
             kFsdp, true),
      otherKey("parallelism", "reshard_after_forward",
               FIELD(parallelism.reshard_after_forward), "",
               "Free gathered parameters after a block's forward and gather "
               "them again for its backward.",
               kFsdp, true),
      intKey("parallelism", "tensor_parallel_degree",
             FIELD(parallelism.tensor_parallel_degree), 1, 64,
             "Tensor-parallel ranks, the mesh's inner axis (ranks of one "
             "node); heads, kv heads, the FFN's hidden size and `seq_len` "
             "must divide by it; a vocabulary it does not divide is padded. "
             "Each rank compiles its own position (`kiln train` under "
             "`mpirun`); trains on the CPU backend (docs/tp.md).",
             kTp, true),
      otherKey("parallelism", "enable_async_tensor_parallel",
               FIELD(parallelism.enable_async_tensor_parallel), "",
               "Overlap tensor parallelism's all-gathers and reduce-scatters "
               "with chunked GEMMs around the tp ring (no effect at "
               "`tensor_parallel_degree` 1).",
               kTp, true),
      otherKey("parallelism", "disable_loss_parallel",
               FIELD(parallelism.disable_loss_parallel), "",
               "Gather the logits for the loss instead of a vocab-sharded "
               "cross-entropy (loss parallel: each tp rank's vocabulary "
               "slice, no logits gathered; docs/tp.md).",
               kTp, true),
      intKey("parallelism", "pipeline_parallel_degree",
             FIELD(parallelism.pipeline_parallel_degree), 1, 64,
             "Pipeline stages' ranks, the mesh's outermost axis: each "
             "holds consecutive layers (the first also the embedding, the "
             "last the output projection and loss) and passes activations "
             "and their gradients to its neighbours (docs/pp.md).",
             kPp, true),
      otherKey("parallelism", "pipeline_parallel_schedule",
               FIELD(parallelism.pipeline_parallel_schedule),
               "1F1B|Interleaved1F1B|GPipe",
               "The order of each rank's microbatch forwards and backwards "
               "(`kiln explain --schedule` draws it).",
               kPp, true),
      intKey("parallelism", "pipeline_parallel_microbatch_size",
             FIELD(parallelism.pipeline_parallel_microbatch_size), 1, 65536,
             "Sequences per pipeline microbatch; it must divide each "
             "dp_shard rank's share of the global batch.",
             kPp, true),
      intKey("parallelism", "pipeline_parallel_layers_per_stage",
             FIELD(parallelism.pipeline_parallel_layers_per_stage), 0, 65536,
             "Transformer layers per stage (0: an even split into one stage "
             "per rank, two with Interleaved1F1B); `n_layers` must divide "
             "by it, into a multiple of `pipeline_parallel_degree` stages.",
             kPp, true),
      otherKey("parallelism", "pipeline_parallel_split_points",
               FIELD(parallelism.pipeline_parallel_split_points), "",
               "Where each stage after the first begins, as TorchTitan names "
               "it (`[\"layers.16\", \"layers.32\"]`): an uneven split, "
               "instead of `pipeline_parallel_layers_per_stage`.",
               kPp, true),
      // [mixed_precision]
      otherKey("mixed_precision", "param", FIELD(mixed_precision.param),
               "bfloat16|float32",
               "Dtype parameters are cast to for compute and all-gather.",
               kPrecision, true),
      otherKey("mixed_precision", "reduce", FIELD(mixed_precision.reduce),
               "float32|bfloat16",
               "Dtype gradients are reduced and accumulated in.", kPrecision,
               true),
      // [activation_checkpoint]
      otherKey("activation_checkpoint", "mode",
               FIELD(activation_checkpoint.mode), "none|selective|full",
               "Recompute in backward: nothing, the cheap ops (GEMM outputs "
               "saved), or each whole block.",
               kFsdp, true),
      otherKey("activation_checkpoint", "selective_ac_option",
               FIELD(activation_checkpoint.selective_ac_option), "",
               "What `selective` keeps: `gemm` (Kiln's default) every GEMM "
               "and attention output; `op` (TorchTitan's op policy) attention "
               "and every other GEMM of a block (wq, wv, w1, w2; wk, wo, w3 "
               "are recomputed); a positive number N (TorchTitan's layer "
               "policy, its default \"2\") every N-th block recomputed "
               "whole and the others not at all. Ignored by `none` and "
               "`full`.",
               kFsdp, true),
      // [float8]
      otherKey("float8", "enable", FIELD(float8.enable), "",
               "Rewrite eligible linears into FP8 scaled GEMMs.", kFp8, true),
      otherKey("float8", "recipe", FIELD(float8.recipe),
               "tensorwise|rowwise|delayed",
               "Scaling recipe: dynamic per-tensor, per-row, or from an amax "
               "history.",
               kFp8, true),
      otherKey("float8", "filter_fqns", FIELD(float8.filter_fqns), "",
               "Parameter-name patterns (regular expressions, matched anywhere "
               "in the name) whose linears stay in BF16.",
               kFp8, true),
      otherKey("float8", "auto_filter_small_kn",
               FIELD(float8.auto_filter_small_kn), "",
               "Keep GEMMs too small to gain from FP8 in BF16.", kFp8, true),
      otherKey("float8", "force_output_projection",
               FIELD(float8.force_output_projection), "",
               "Also rewrite the output projection (with a warning).", kFp8,
               true),
      otherKey("float8", "enable_fsdp_float8_all_gather",
               FIELD(float8.enable_fsdp_float8_all_gather), "",
               "Cast weight shards to e4m3 before the FSDP all-gather "
               "(tensorwise only).",
               kFp8, true),
      intKey("float8", "amax_history_len", FIELD(float8.amax_history_len), 1,
             1024, "Length of the amax history of the delayed recipe.", kFp8,
             true),
      otherKey("float8", "amax_compute_algo", FIELD(float8.amax_compute_algo),
               "max|most_recent",
               "How the delayed recipe reads its amax history.", kFp8, true),
      // [comm]
      intKey("comm", "train_timeout_seconds", FIELD(comm.train_timeout_seconds),
             0, 1e6,
             "Deadline of every collective of a multi-rank run: one not "
             "complete this many seconds after a rank began it ends the run "
             "with a line naming it, the step and the ranks that did not "
             "arrive (0: wait forever). Keep it above a step's duration and "
             "the time rank 0 takes to write a checkpoint.",
             kTrainCmd, true),
      // [metrics]
      otherKey("metrics", "enable_tensorboard",
               FIELD(metrics.enable_tensorboard), "",
               "Also write each step's metrics (loss, lr, grad norm, tokens/s, "
               "TFLOP/s, MFU, peak memory) as TensorBoard event files "
               "(docs/training.md, \"Metrics\").",
               kTrainCmd, true),
      otherKey("metrics", "save_tb_folder", FIELD(metrics.save_tb_folder), "",
               "The folder of the TensorBoard event files, inside the run's "
               "output folder.",
               kTrainCmd, true),
      floatKey("metrics", "peak_tflops", FIELD(metrics.peak_tflops), 0, true,
               1e9, false,
               "Peak TFLOP/s of one device, the denominator of MFU.", kTrainCmd,
               true,
               "unset: the dense BF16 peak of the GPU's hardware file "
               "(perf/hardware) on the CUDA backend; no MFU on the CPU"),
  };
  return schema;
}

const std::vector<KeyAlias> &kiln::configAliases() {
  static const std::vector<KeyAlias> aliases = {
      {"training", "dataset_path", "training", "data"},
      {"training", "max_norm", "optimizer", "max_norm"},
      {"training", "mixed_precision_param", "mixed_precision", "param"},
      {"training", "mixed_precision_reduce", "mixed_precision", "reduce"},
      {"lr_scheduler", "decay_type", "lr_scheduler", "decay"},
      {"float8", "recipe_name", "float8", "recipe"},
  };
  return aliases;
}

std::vector<std::string> kiln::configSections() {
  std::vector<std::string> sections;
  for (const KeySpec &spec : configSchema())
    if (sections.empty() || sections.back() != spec.section)
      sections.push_back(spec.section);
  return sections;
}

const KeySpec *kiln::lookupKey(const std::string &section,
                               const std::string &key) {
  std::string s = section, k = key;
  for (const KeyAlias &alias : configAliases())
    if (s == alias.section && k == alias.key) {
      s = alias.toSection;
      k = alias.toKey;
      break;
    }
  for (const KeySpec &spec : configSchema())
    if (s == spec.section && k == spec.key)
      return &spec;
  return nullptr;
}

std::string kiln::formatFloat(double v) {
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.1f", v);
    return buf;
  }
  // The shortest form that reads back exactly.
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v)
      break;
  }
  std::string s = buf;
  if (s.find_first_of(".eEin") == std::string::npos)
    s += ".0";
  return s;
}

namespace {
std::string formatBound(double v) {
  if (std::isinf(v))
    return v < 0 ? "-inf" : "inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
    return buf;
  }
  return formatFloat(v);
}

std::string quote(const std::string &s) { return "\"" + s + "\""; }

template <class... Fs> struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <class... Fs> Overloaded(Fs...) -> Overloaded<Fs...>;
} // namespace

std::string kiln::formatValue(const KeySpec &spec, const Config &config) {
  Config &c = const_cast<Config &>(config);
  return std::visit(
      Overloaded{
          [&](int64_t &(*f)(Config &)) { return std::to_string(f(c)); },
          [&](double &(*f)(Config &)) { return formatFloat(f(c)); },
          [&](bool &(*f)(Config &)) {
            return std::string(f(c) ? "true" : "false");
          },
          [&](std::string &(*f)(Config &)) { return quote(f(c)); },
          [&](std::array<double, 2> &(*f)(Config &)) {
            return "[" + formatFloat(f(c)[0]) + ", " + formatFloat(f(c)[1]) +
                   "]";
          },
          [&](std::vector<std::string> &(*f)(Config &)) {
            std::string out = "[";
            for (size_t i = 0; i < f(c).size(); ++i)
              out += (i ? ", " : "") + quote(f(c)[i]);
            return out + "]";
          },
      },
      spec.field);
}

std::string kiln::describeType(const KeySpec &spec) {
  switch (spec.field.index()) {
  case 0:
    return "integer";
  case 1:
    return "float";
  case 2:
    return "bool";
  case 3:
    return "string";
  case 4:
    return "array of 2 floats";
  default:
    return "array of strings";
  }
}

bool kiln::mustMatchOnResume(const KeySpec &spec) {
  std::string section = spec.section, key = spec.key;
  return section == "model" || (section == "training" && key == "seed");
}

std::string kiln::describeRange(const KeySpec &spec) {
  switch (spec.field.index()) {
  case 0:
    return "[" + formatBound(spec.min) + ", " + formatBound(spec.max) + "]";
  case 1:
  case 4:
    return std::string(spec.minOpen ? "(" : "[") + formatBound(spec.min) +
           ", " + formatBound(spec.max) + (spec.maxOpen ? ")" : "]");
  case 3:
    if (*spec.choices) {
      std::string out = "one of ";
      for (const char *p = spec.choices; *p; ++p)
        out += *p == '|' ? std::string(", ") : std::string(1, *p);
      return out;
    }
    return "any";
  default:
    return "-";
  }
}

std::string kiln::renderConfigMarkdown() {
  std::ostringstream md;
  Config defaults;
  md << "# Model description keys\n\n"
     << "<!-- Generated by `kiln config --markdown` from "
        "frontend/lib/Frontend/ConfigSchema.cpp; a test keeps it in sync. "
        "-->\n\n"
     << "A model file is TOML. Every key below may be written; unknown keys "
        "and sections are errors (with the nearest valid spelling "
        "suggested). Keys whose capability is not built yet are parsed and "
        "validated, and may be written with their default value only: any "
        "other value gives `error: <key> is not implemented yet`.\n\n"
     << "Integers are accepted where floats are expected. `kiln compile "
        "--set section.key=value` overrides a key on the command line; "
        "`kiln config MODEL` prints every key's effective value.\n\n";
  for (const std::string &section : configSections()) {
    md << "## [" << section << "]\n\n"
       << "| key | type | default | allowed | effect | takes effect in | "
          "status |\n"
       << "|---|---|---|---|---|---|---|\n";
    for (const KeySpec &spec : configSchema()) {
      if (section != spec.section)
        continue;
      std::string def = spec.required       ? "required"
                        : spec.unsetMeaning ? spec.unsetMeaning
                                            : "`" + formatValue(spec, defaults) +
                                                  "`";
      md << "| `" << spec.key << "` | " << describeType(spec) << " | " << def
         << " | " << describeRange(spec) << " | " << spec.doc << " | "
         << spec.capability << " | "
         << (spec.implemented ? "in effect" : "not implemented yet") << " |\n";
    }
    md << "\n";
  }
  md << "## Aliases\n\n"
     << "TorchTitan's spellings are accepted where they differ from "
        "Kiln's:\n\n"
     << "| written | means |\n|---|---|\n";
  for (const KeyAlias &alias : configAliases())
    md << "| `" << alias.section << "." << alias.key << "` | `"
       << alias.toSection << "." << alias.toKey << "` |\n";
  return md.str();
}
