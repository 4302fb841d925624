//===- Plan.h - The compiled plan, as the runtime reads it ------*- C++ -*-===//
//
// The plan is the only contract between compiler and runtime (docs/plan.md):
// a table of values (persistent state, per-step inputs, constants, arena
// buffers) and, per entry point, a list of steps over value ids.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_PLAN_H
#define KILN_RUNTIME_PLAN_H

#include "kiln/Runtime/DType.h"
#include "kiln/Runtime/FusedGroup.h"
#include "kiln/Runtime/Plan/Format.h"
#include "kiln/Runtime/Support/Error.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace kiln::runtime {

/// How a parameter starts: TorchTitan's initialisers (docs/plan.md).
struct InitSpec {
  enum Kind { Zeros, Ones, Normal, TruncNormal } kind = Zeros;
  double std = 0, a = 0, b = 0;
};

/// A tensor-parallel rank's slice of a whole tensor (docs/plan.md,
/// `tp_shard`): slice `index` of the mesh's `tp` equal slices along `dim`.
/// The whole tensor's shape is the slice's with `dim` times `tp`, less
/// `pad`: the padded tensor's last `pad` entries along `dim` (in the last
/// slices) are padding, zero at init and in no checkpoint.
struct TpSlice {
  int64_t dim = 0, index = 0, pad = 0;
};

/// One parameter (or moment) in the flat buffer a sharded state is a piece
/// of: its elements are flat[offset, offset + numel(shape)). With `tp`, the
/// part is that slice of the whole tensor `name` (and `shape` the slice's).
struct ShardPart {
  std::string name;
  int64_t offset = 0;
  std::vector<int64_t> shape;
  InitSpec init;
  std::optional<TpSlice> tp;
  int64_t numElements() const;
};

struct PlanValue {
  enum Kind { State, Input, Const, Arena } kind = Arena;
  int64_t id = 0;
  std::string name; // State and Input
  std::vector<int64_t> shape;
  DType dtype = DType::F32;
  int64_t offset = 0;      // Arena: byte offset
  /// Arena: a view of that earlier arena value (its bytes under this
  /// value's shape; no step writes it), or -1.
  int64_t viewOf = -1;
  double constValue = 0;   // Const
  InitSpec init;           // State
  /// A state that is rank r's shard of a flat buffer of ranks x numel
  /// elements: elements [r * numel, (r + 1) * numel) of it (docs/plan.md).
  std::vector<ShardPart> shardOf;
  /// A state or input that is a tensor-parallel slice of a whole tensor
  /// (a flat shard's parts say it each).
  std::optional<TpSlice> tp;

  int64_t numElements() const;
  /// The value whose buffer this is: `viewOf`, or the value itself.
  int64_t storage() const { return viewOf >= 0 ? viewOf : id; }
  int64_t bytes() const { return numElements() * dtypeBytes(dtype); }
};

using AttrValue =
    std::variant<bool, int64_t, double, std::string, std::vector<int64_t>>;

struct PlanStep {
  std::string op;     // as written, for messages
  plan::Op kind = plan::Op::Init; // the op, parsed once (plan/Format.h)
  std::vector<int64_t> operands, results;
  std::map<std::string, AttrValue> attrs;
  std::string loc; // the model component and its line in the model file
  /// The typed op list of a `fused` step (shared: steps are copied).
  std::shared_ptr<const FusedGroup> group;

  /// Typed attribute access; a missing or mistyped attribute is a plan error
  /// caught at load time by verifyPlan, so these never fail later.
  double f64(const std::string &name) const;
  int64_t i64(const std::string &name) const;
  /// An optional integer attribute, or `absent` where the step has none.
  int64_t i64Or(const std::string &name, int64_t absent) const;
  bool flag(const std::string &name) const;
  const std::string &str(const std::string &name) const;
};

/// What the arena of an entry holds at its fullest step, by kind (bytes,
/// 64-byte aligned), as the compiler recorded it.
struct LiveAtPeak {
  int64_t step = 0, parameterCopies = 0, gradients = 0, activations = 0;
};

struct PlanEntry {
  std::vector<PlanStep> steps;
  std::map<std::string, int64_t> outputs;
  int64_t arenaBytes = 0;
  LiveAtPeak liveAtPeak; // zeros when the plan does not say
};

/// How the model file asked to be trained: the defaults `kiln-run PLAN`
/// and `kiln train` start from.
struct TrainingSpec {
  int64_t steps = 0, seed = 0;
  int64_t evalInterval = 0, evalSteps = 1;
  int64_t checkpointInterval = 0;
  std::string data, checkpointFolder;
  int64_t commTimeoutSeconds = 100; // a collective's deadline; 0: none
};

/// The device mesh a plan runs on (docs/tp.md, "The mesh"; docs/pp.md):
/// `pp` outermost, `dp_shard`, `tp` innermost; rank r sits at
/// (r / (dp_shard tp), (r / tp) % dp_shard, r % tp).
struct PlanMesh {
  int64_t dpShard = 1, tp = 1, pp = 1;

  int64_t axisSize(plan::Axis axis) const {
    return axis == plan::Axis::Tp ? tp : axis == plan::Axis::Pp ? pp : dpShard;
  }
  /// This rank's position along `axis`.
  int64_t axisIndex(plan::Axis axis, int64_t rank) const {
    return axis == plan::Axis::Tp   ? rank % tp
           : axis == plan::Axis::Pp ? rank / (tp * dpShard)
                                    : rank / tp % dpShard;
  }
};

struct Plan {
  int version = 0;
  TrainingSpec training;
  int64_t vocabSize = 0;
  int64_t ranks = 1; // the ranks the plan runs on: pp x dp_shard x tp
  PlanMesh mesh;
  /// The position on the tp axis the plan was compiled for: the `index` of
  /// every `tp_shard` in it (one per plan, checked), 0 when it has none.
  /// A plan with tp > 1 runs on the ranks r with r % tp == tpIndex.
  int64_t tpIndex = 0;
  /// The position on the pp axis the plan was compiled for (which stages
  /// it holds; docs/pp.md): it runs on the ranks r with
  /// r / (dp_shard tp) == ppIndex. 0 without pipeline parallel.
  int64_t ppIndex = 0;
  int64_t arenaBytes = 0, stateBytes = 0;
  std::vector<PlanValue> values;
  std::map<std::string, PlanEntry> entries;

  const PlanEntry *entry(const std::string &name) const;
  /// The value of the input or state called `name`, or nullptr.
  const PlanValue *named(PlanValue::Kind kind, const std::string &name) const;
};

/// Whether a state (or checkpoint tensor) name is training state besides
/// the weights, kept in the optimizer checkpoint: an AdamW moment
/// (`exp_avg.<param>`, `exp_avg_sq.<param>`, or their sharded groups) or a
/// delayed FP8 recipe's amax history (`fp8_amax_history.<operand>.<param>`).
bool isOptimizerState(const std::string &name);

/// The shape of every state in the unsharded layout (what a checkpoint
/// holds): parameters into `model`, AdamW moments into `optimizer`.
void unshardedShapes(const Plan &plan,
                     std::map<std::string, std::vector<int64_t>> &model,
                     std::map<std::string, std::vector<int64_t>> &optimizer);

/// The shape of the whole tensor whose slice `tp` (if any) has `shape`.
std::vector<int64_t> wholeShape(const Plan &plan,
                                const std::vector<int64_t> &shape,
                                const std::optional<TpSlice> &tp);

/// For messages: the op, the first persistent tensor it reads, and its
/// location (the model component and the model file's line): "linear of
/// model.layers.0.mlp.down_proj.weight at model.layers.0.mlp.down_proj at
/// llama3-debug:8:1", "fused group (cast) of model.norm.weight at
/// llama3-debug:2:2".
std::string describeStep(const Plan &plan, const PlanStep &step);

/// Whether two values are one buffer: the same value, or arena values at
/// one offset with one size (a result written in place of an operand).
bool sameStorage(const PlanValue &a, const PlanValue &b);

/// Checks everything a backend relies on (PlanVerifier.cpp): every value's
/// shape, dtype and place in the arena; every step's op, arity, attributes
/// (plan/Format.h) and operand and result shapes; that every arena value is
/// written before it is read and that no two values live at the same time
/// share arena bytes; the entries, their outputs and the training section.
/// Success, or one line naming the entry, the step and the field.
Error verifyPlan(const Plan &plan);

/// The per-op part of verifyPlan: the dtypes and shapes of one step's
/// operands and results, and attributes that depend on them (PlanOpRules.cpp).
/// Ids are in range. Success, or what is wrong.
Error checkStepShapes(const Plan &plan, const PlanStep &step);

/// Reads and checks a plan file (a regular file of bounded size), parses it
/// and verifies it (verifyPlan). On failure, the error is one line saying
/// what is wrong and where.
Expected<Plan> loadPlan(const std::string &path);
/// The same, from text (for tests).
Expected<Plan> parsePlan(const std::string &text);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_PLAN_H
