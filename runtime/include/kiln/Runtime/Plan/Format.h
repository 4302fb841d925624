//===- Format.h - The plan format: its version and its ops, once -*- C++ -*-===//
//
// The plan (docs/plan.md) is the only contract between the compiler and the
// runtime. This header is that contract's table, header-only so that the
// compiler's emitter includes it without linking the runtime:
//
//   - the one format version;
//   - every op a step can name: its category, how many operands and results
//     it takes, and the attributes it carries (type, whether required, and
//     the range or the names allowed).
//
// The emitter checks what it writes against it, the loader
// (runtime/lib/Plan.cpp) parses each step's op into `plan::Op` once, and the
// verifier (runtime/lib/PlanVerifier.cpp) checks every step's arity and
// attributes from it; its per-op shape and dtype rules are one switch over
// `plan::Op` (PlanOpRules.cpp), so a new op does not compile without one.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_PLAN_FORMAT_H
#define KILN_RUNTIME_PLAN_FORMAT_H

#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>

namespace kiln::plan {

/// The plan format's version: the emitter writes it, the loader reads only
/// it. Changes are listed in docs/plan.md's changelog.
inline constexpr int kVersion = 8;

/// The largest element count of one value, and of a fused group's
/// iteration space: 2^48, far past any device and small enough that
/// elements x 8 bytes cannot overflow int64.
inline constexpr int64_t kMaxElements = int64_t(1) << 48;
/// The most ranks a plan can be compiled for.
inline constexpr int64_t kMaxRanks = int64_t(1) << 20;
/// The largest tag of a pipeline transfer: MPI guarantees tags up to 32767.
inline constexpr int64_t kMaxTag = 32767;
/// The largest byte count or offset: 2^62, so that a sum of two cannot
/// overflow int64.
inline constexpr int64_t kMaxBytes = int64_t(1) << 62;

/// The training section's ranges: steps and intervals up to 10^9, and
/// validation over at most 10^5 batches, so that every run the plan
/// describes ends.
inline constexpr int64_t kMaxTrainingSteps = 1000000000;
inline constexpr int64_t kMaxEvalSteps = 100000;
/// The collective deadline in seconds (0 waits forever), as the config
/// key comm.train_timeout_seconds allows.
inline constexpr int64_t kMaxTimeoutSeconds = 1000000;

/// The device mesh's axes (docs/tp.md, "The mesh"; docs/pp.md), as a
/// collective's `axis` names them: `pp` outermost, `dp_shard`, `tp`
/// innermost, rank r at (r / (dp_shard tp), (r / tp) % dp_shard, r % tp).
/// A collective over an axis runs among the ranks that share the other
/// axes' coordinates.
enum class Axis : uint8_t { DpShard, Tp, Pp };
#define KILN_PLAN_AXES "dp_shard|tp|pp"
inline constexpr const char *kAxisNames[] = {"dp_shard", "tp", "pp"};

inline constexpr const char *axisName(Axis axis) {
  return kAxisNames[static_cast<int>(axis)];
}
/// The axis called `name`, or nothing if there is none of that name.
inline std::optional<Axis> parseAxis(std::string_view name) {
  for (int i = 0; i < 3; ++i)
    if (name == kAxisNames[i])
      return static_cast<Axis>(i);
  return std::nullopt;
}

/// What kind of step an op is, which decides who runs it.
enum class Category : uint8_t {
  Init,       // sets a state from the seed
  Library,    // a kernel of the backend (GEMMs, attention, the loss, AdamW...)
  ShardCast,  // the FP8 all-gather's casts: they depend on the rank
  Collective, // starts a collective over ranks
  Wait,       // completes a collective
  Fused,      // a fused group: the typed op list of docs/plan.md
  GroupOnly,  // an elementwise or row-wise op: only ever inside a group
};

/// Every op. X(Enum, "name", Category, min operands, max operands, results);
/// a max of -1 takes any number.
#define KILN_PLAN_OPS(X)                                                       \
  X(Init, "init", Init, 1, 1, 1)                                               \
  X(Embedding, "embedding", Library, 2, 2, 1)                                  \
  X(EmbeddingGrad, "embedding_grad", Library, 2, 2, 1)                         \
  X(Linear, "linear", Library, 2, 2, 1)                                        \
  X(LinearGradInput, "linear_grad_input", Library, 2, 2, 1)                    \
  X(LinearGradWeight, "linear_grad_weight", Library, 2, 2, 1)                  \
  X(ScaledMatmul, "scaled_matmul", Library, 4, 4, 1)                           \
  X(Rope, "rope", Library, 1, 1, 1)                                            \
  X(RopeGrad, "rope_grad", Library, 1, 1, 1)                                   \
  X(Attention, "attention", Library, 3, 3, 2)                                  \
  X(AttentionGrad, "attention_grad", Library, 6, 6, 3)                         \
  X(CrossEntropy, "cross_entropy", Library, 2, 2, 1)                           \
  X(CrossEntropyGrad, "cross_entropy_grad", Library, 3, 3, 1)                  \
  X(IndexToFloat, "index_to_float", Library, 1, 1, 1)                          \
  X(VocabParallelMax, "vocab_parallel_max", Library, 1, 1, 1)                  \
  X(VocabParallelStats, "vocab_parallel_stats", Library, 3, 3, 1)              \
  X(VocabParallelStatsGrad, "vocab_parallel_stats_grad", Library, 4, 4, 1)     \
  X(VocabParallelLoss, "vocab_parallel_loss", Library, 2, 2, 1)                \
  X(VocabParallelLossGrad, "vocab_parallel_loss_grad", Library, 2, 2, 1)       \
  X(Reshape, "reshape", Library, 1, 1, 1)                                      \
  X(Transpose, "transpose", Library, 1, 1, 1)                                  \
  X(Flatten, "flatten", Library, 1, -1, 1)                                     \
  X(Unflatten, "unflatten", Library, 1, 1, 1)                                  \
  X(DelayedAmax, "delayed_amax", Library, 1, 2, 1)                             \
  X(AmaxHistoryUpdate, "amax_history_update", Library, 2, 2, 1)                \
  X(GradNorm, "grad_norm", Library, 1, -1, 1)                                  \
  X(LrSchedule, "lr_schedule", Library, 1, 1, 1)                               \
  X(AdamW, "adamw", Library, 7, 7, 3)                                          \
  X(ShardAmax, "shard_amax", ShardCast, 1, 1, 1)                               \
  X(ShardQuantize, "shard_quantize", ShardCast, 2, 2, 2)                       \
  X(AllGatherStart, "all_gather_start", Collective, 1, 1, 1)                   \
  X(ReduceScatterStart, "reduce_scatter_start", Collective, 1, 1, 1)           \
  X(AllReduceStart, "all_reduce_start", Collective, 1, 1, 1)                   \
  X(SendRecvStart, "send_recv_start", Collective, 1, 1, 1)                     \
  X(PipeSendStart, "pipe_send_start", Collective, 1, 1, 1)                     \
  X(PipeRecvStart, "pipe_recv_start", Collective, 0, 0, 1)                     \
  X(Wait, "wait", Wait, 1, 1, 1)                                               \
  X(Fused, "fused", Fused, 0, -1, 1)                                           \
  X(Add, "add", GroupOnly, 2, 2, 1)                                            \
  X(Mul, "mul", GroupOnly, 2, 2, 1)                                            \
  X(Silu, "silu", GroupOnly, 1, 1, 1)                                          \
  X(SiluGrad, "silu_grad", GroupOnly, 2, 2, 1)                                 \
  X(Sqrt, "sqrt", GroupOnly, 1, 1, 1)                                          \
  X(Cast, "cast", GroupOnly, 1, 1, 1)                                          \
  X(RmsNorm, "rms_norm", GroupOnly, 2, 2, 1)                                   \
  X(RmsNormGrad, "rms_norm_grad", GroupOnly, 3, 3, 2)                          \
  X(Amax, "amax", GroupOnly, 1, 1, 1)                                          \
  X(Quantize, "quantize", GroupOnly, 1, 2, 2)

enum class Op : uint8_t {
#define KILN_PLAN_OP_ENUM(e, name, category, minOps, maxOps, results) e,
  KILN_PLAN_OPS(KILN_PLAN_OP_ENUM)
#undef KILN_PLAN_OP_ENUM
};

struct OpInfo {
  Op op;
  const char *name;
  Category category;
  int minOperands, maxOperands; // maxOperands -1: any number
  int results;                  // a fused group: at least 1, any number
};

inline constexpr OpInfo kOps[] = {
#define KILN_PLAN_OP_INFO(e, name, category, minOps, maxOps, results)          \
  {Op::e, name, Category::category, minOps, maxOps, results},
    KILN_PLAN_OPS(KILN_PLAN_OP_INFO)
#undef KILN_PLAN_OP_INFO
};

inline constexpr const OpInfo &info(Op op) {
  return kOps[static_cast<size_t>(op)];
}
inline constexpr const char *name(Op op) { return info(op).name; }
inline constexpr Category category(Op op) { return info(op).category; }

/// The op called `text`, or nullptr.
inline const OpInfo *findOp(std::string_view text) {
  for (const OpInfo &op : kOps)
    if (text == op.name)
      return &op;
  return nullptr;
}

enum class AttrType : uint8_t { Bool, Int, Float, String, IntList };

inline constexpr const char *attrTypeName(AttrType type) {
  switch (type) {
  case AttrType::Bool:
    return "a boolean";
  case AttrType::Int:
    return "an integer";
  case AttrType::Float:
    return "a number";
  case AttrType::String:
    return "a string";
  case AttrType::IntList:
    return "a list of integers";
  }
  return "?";
}

/// One attribute of one op. Numbers (Int, Float, and each element of an
/// IntList) lie in [min, max] and are never NaN; a String is one of
/// `oneOf` ("a|b|c") unless that is null. A unit attribute of the IR (a flag
/// present or absent) is an optional Bool, a BoolAttr a required one.
struct AttrSpec {
  Op op;
  const char *name;
  AttrType type;
  bool required;
  double min, max;
  const char *oneOf;
};

inline constexpr double kHuge = std::numeric_limits<double>::max();
inline constexpr double kTiny = std::numeric_limits<double>::min();
inline constexpr double kMaxOffset = static_cast<double>(kMaxElements);

/// Roles of a linear (the dialect's LinearRole).
#define KILN_PLAN_ROLES "wq|wk|wv|wo|w1|w2|w3|output"

inline constexpr AttrSpec kAttrs[] = {
    {Op::Embedding, "param", AttrType::String, true, 0, 0, nullptr},
    {Op::Embedding, "vocab_start", AttrType::Int, false, 0, kMaxOffset,
     nullptr},
    {Op::Embedding, "vocab_size", AttrType::Int, false, 1, kMaxOffset, nullptr},
    {Op::EmbeddingGrad, "param", AttrType::String, true, 0, 0, nullptr},
    {Op::EmbeddingGrad, "vocab_start", AttrType::Int, false, 0, kMaxOffset,
     nullptr},
    {Op::EmbeddingGrad, "vocab_size", AttrType::Int, false, 1, kMaxOffset,
     nullptr},
    {Op::Linear, "role", AttrType::String, true, 0, 0, KILN_PLAN_ROLES},
    {Op::Linear, "param", AttrType::String, true, 0, 0, nullptr},
    {Op::LinearGradInput, "role", AttrType::String, true, 0, 0,
     KILN_PLAN_ROLES},
    {Op::LinearGradInput, "param", AttrType::String, true, 0, 0, nullptr},
    {Op::LinearGradWeight, "role", AttrType::String, true, 0, 0,
     KILN_PLAN_ROLES},
    {Op::LinearGradWeight, "param", AttrType::String, true, 0, 0, nullptr},
    {Op::ScaledMatmul, "gemm", AttrType::String, true, 0, 0,
     "output|grad_input|grad_weight"},
    {Op::ScaledMatmul, "role", AttrType::String, true, 0, 0, KILN_PLAN_ROLES},
    {Op::ScaledMatmul, "param", AttrType::String, true, 0, 0, nullptr},
    // Whether the GEMM may accumulate with FP8 fast accumulation (the
    // compiler's choice, kiln-fp8-linear: the forward GEMM only).
    {Op::ScaledMatmul, "fast_accumulation", AttrType::Bool, true, 0, 0,
     nullptr},
    // RoPE's base: positive and finite.
    {Op::Rope, "theta", AttrType::Float, true, kTiny, kHuge, nullptr},
    {Op::RopeGrad, "theta", AttrType::Float, true, kTiny, kHuge, nullptr},
    // The softmax scale: positive and finite (the dialect's verifier
    // bounds what the compiler writes more tightly).
    {Op::Attention, "causal", AttrType::Bool, false, 0, 0, nullptr},
    {Op::Attention, "scale", AttrType::Float, true, kTiny, kHuge, nullptr},
    {Op::AttentionGrad, "causal", AttrType::Bool, false, 0, 0, nullptr},
    {Op::AttentionGrad, "scale", AttrType::Float, true, kTiny, kHuge, nullptr},
    {Op::VocabParallelMax, "vocab_start", AttrType::Int, true, 0, kMaxOffset,
     nullptr},
    {Op::VocabParallelMax, "vocab_size", AttrType::Int, true, 1, kMaxOffset,
     nullptr},
    {Op::VocabParallelStats, "vocab_start", AttrType::Int, true, 0, kMaxOffset,
     nullptr},
    {Op::VocabParallelStats, "vocab_size", AttrType::Int, true, 1, kMaxOffset,
     nullptr},
    {Op::VocabParallelStatsGrad, "vocab_start", AttrType::Int, true, 0,
     kMaxOffset, nullptr},
    {Op::VocabParallelStatsGrad, "vocab_size", AttrType::Int, true, 1,
     kMaxOffset, nullptr},
    {Op::Transpose, "permutation", AttrType::IntList, true, 0, 63, nullptr},
    {Op::Flatten, "offsets", AttrType::IntList, true, 0, kMaxOffset, nullptr},
    {Op::Unflatten, "offset", AttrType::Int, true, 0, kMaxOffset, nullptr},
    {Op::DelayedAmax, "algo", AttrType::String, true, 0, 0, "max|most_recent"},
    {Op::GradNorm, "squared", AttrType::Bool, false, 0, 0, nullptr},
    {Op::LrSchedule, "peak", AttrType::Float, true, 0, kHuge, nullptr},
    {Op::LrSchedule, "min_lr", AttrType::Float, true, 0, kHuge, nullptr},
    {Op::LrSchedule, "warmup_steps", AttrType::Int, true, 0, 1e15, nullptr},
    {Op::LrSchedule, "total_steps", AttrType::Int, true, 0, 1e15, nullptr},
    {Op::LrSchedule, "decay", AttrType::String, true, 0, 0, "cosine|constant"},
    // AdamW's betas in [0, 1] (1 makes the bias correction divide by zero,
    // which the numerics check reports), the rest non-negative.
    {Op::AdamW, "beta1", AttrType::Float, true, 0, 1, nullptr},
    {Op::AdamW, "beta2", AttrType::Float, true, 0, 1, nullptr},
    {Op::AdamW, "eps", AttrType::Float, true, 0, kHuge, nullptr},
    {Op::AdamW, "weight_decay", AttrType::Float, true, 0, kHuge, nullptr},
    {Op::AdamW, "max_norm", AttrType::Float, true, 0, kHuge, nullptr},
    {Op::ShardAmax, "offsets", AttrType::IntList, true, 0, kMaxOffset, nullptr},
    {Op::ShardAmax, "sizes", AttrType::IntList, true, 0, kMaxOffset, nullptr},
    {Op::ShardAmax, "ranks", AttrType::Int, true, 1, kMaxRanks, nullptr},
    {Op::ShardQuantize, "offsets", AttrType::IntList, true, 0, kMaxOffset,
     nullptr},
    {Op::ShardQuantize, "sizes", AttrType::IntList, true, 0, kMaxOffset,
     nullptr},
    {Op::ShardQuantize, "ranks", AttrType::Int, true, 1, kMaxRanks, nullptr},
    // Every collective runs over one mesh axis, `ranks` being its size.
    {Op::AllGatherStart, "axis", AttrType::String, true, 0, 0, KILN_PLAN_AXES},
    {Op::AllGatherStart, "ranks", AttrType::Int, true, 1, kMaxRanks, nullptr},
    {Op::AllGatherStart, "group", AttrType::String, true, 0, 0, nullptr},
    {Op::ReduceScatterStart, "axis", AttrType::String, true, 0, 0,
     KILN_PLAN_AXES},
    {Op::ReduceScatterStart, "ranks", AttrType::Int, true, 1, kMaxRanks,
     nullptr},
    {Op::ReduceScatterStart, "reduction", AttrType::String, true, 0, 0,
     "sum|mean"},
    {Op::ReduceScatterStart, "group", AttrType::String, true, 0, 0, nullptr},
    {Op::AllReduceStart, "axis", AttrType::String, true, 0, 0, KILN_PLAN_AXES},
    {Op::AllReduceStart, "ranks", AttrType::Int, true, 1, kMaxRanks, nullptr},
    {Op::AllReduceStart, "reduction", AttrType::String, true, 0, 0,
     "sum|mean|max"},
    // One ring step: the buffer goes `shift` places along the axis.
    {Op::SendRecvStart, "axis", AttrType::String, true, 0, 0, KILN_PLAN_AXES},
    {Op::SendRecvStart, "ranks", AttrType::Int, true, 2, kMaxRanks, nullptr},
    {Op::SendRecvStart, "shift", AttrType::Int, true, 1, kMaxRanks - 1,
     nullptr},
    // Point to point over pp (docs/pp.md): to or from the rank at
    // position `peer`, matched by `tag` (at most MPI's least MPI_TAG_UB).
    {Op::PipeSendStart, "ranks", AttrType::Int, true, 2, kMaxRanks, nullptr},
    {Op::PipeSendStart, "peer", AttrType::Int, true, 0, kMaxRanks - 1, nullptr},
    {Op::PipeSendStart, "tag", AttrType::Int, true, 0, kMaxTag, nullptr},
    {Op::PipeRecvStart, "ranks", AttrType::Int, true, 2, kMaxRanks, nullptr},
    {Op::PipeRecvStart, "peer", AttrType::Int, true, 0, kMaxRanks - 1, nullptr},
    {Op::PipeRecvStart, "tag", AttrType::Int, true, 0, kMaxTag, nullptr},
    {Op::Fused, "ops", AttrType::String, true, 0, 0, nullptr},
};

#undef KILN_PLAN_ROLES
#undef KILN_PLAN_AXES

/// Attributes named `kiln.<name>` are annotations for people (which ops
/// activation checkpointing recomputes): booleans or strings, with no
/// meaning to a backend.
inline constexpr std::string_view kAnnotationPrefix = "kiln.";

/// The spec of attribute `attr` of `op`, or nullptr if the op takes none
/// of that name.
inline const AttrSpec *findAttr(Op op, std::string_view attr) {
  for (const AttrSpec &spec : kAttrs)
    if (spec.op == op && attr == spec.name)
      return &spec;
  return nullptr;
}

/// Whether `value` is one of the names `spec.oneOf` allows.
inline bool allowedString(const AttrSpec &spec, std::string_view value) {
  if (!spec.oneOf)
    return true;
  std::string_view names = spec.oneOf;
  while (!names.empty()) {
    size_t bar = names.find('|');
    if (names.substr(0, bar) == value)
      return true;
    if (bar == std::string_view::npos)
      break;
    names.remove_prefix(bar + 1);
  }
  return false;
}

/// Entries a plan may have, and the outputs each must give.
struct EntryInfo {
  const char *name;
  bool required;
  const char *outputs; // "loss|grad_norm|lr": names every plan gives
};
inline constexpr EntryInfo kEntries[] = {
    {"init", true, ""},
    {"train_step", true, "loss|grad_norm|lr"},
    {"eval_loss", true, "loss"},
    {"loss_and_grads", false, "loss"},
    {"logits", false, "logits"},
    {"fp8_calibration", false, ""},
};

/// Inputs a plan may declare: tokens and targets ([batch, seq] i32, one
/// shape), the 1-based step and the seed (i64 scalars).
inline constexpr const char *kInputs[] = {"tokens", "targets", "step", "seed"};

} // namespace kiln::plan

#endif // KILN_RUNTIME_PLAN_FORMAT_H
