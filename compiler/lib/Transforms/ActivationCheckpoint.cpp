//===- ActivationCheckpoint.cpp - Recompute instead of save ---------------===//
//
// Three steps per function. (1) Which forward ops to clone: those whose
// result a backward op of the same block reads, then, in reverse program
// order, the same-block producers of what a clone reads. Each op gets the
// earliest backward point where a clone is needed (a reader, or the point
// of a clone that reads it). (2) Clone them in program order, each before
// its point: a producer's point is never after its readers', so clones
// come out in a valid order. (3) Point the backward readers at the clones.
// Values from another block (the block's input) and parameters are read as
// saved. What a block keeps is the policy's: nothing but its input (full),
// every GEMM and attention result (selective `gemm`), attention and every
// other GEMM (`op`, TorchTitan's op policy), or everything in all blocks but
// every N-th (`<N>`, TorchTitan's layer policy). The backward begins at the
// loss's gradient or, on a pipeline stage without the loss, at the receive
// of the next stage's gradient. Tensor parallel's all-gathers (and, where a
// block keeps nothing, reduce-scatters) inside a block are recomputed like
// pure ops: a sequence-parallel all-gather's result is tp times the saved
// input.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Debug.h"

#include <optional>

#define DEBUG_TYPE "kiln-activation-checkpoint"

namespace kiln {
#define GEN_PASS_DEF_KILNACTIVATIONCHECKPOINT
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {


/// The transformer block an op belongs to, from its location's name
/// (`model.layers.<i>.<component>`), or -1.
int64_t blockOf(Operation *op) {
  auto named = dyn_cast<NameLoc>(op->getLoc());
  if (!named)
    return -1;
  StringRef name = named.getName().getValue();
  if (!name.consume_front("model.layers."))
    return -1;
  int64_t block;
  if (name.consumeInteger(10, block) || !name.starts_with("."))
    return -1;
  return block;
}

/// What a block keeps from its forward for its backward; the rest of its
/// pure ops is computed again there.
enum class Keep {
  nothing,        // full: only the block's input
  gemms,          // selective `gemm`: every GEMM and attention result
  everyOtherGemm, // selective `op`: attention, and the 1st, 3rd, ... GEMM
  everything,     // a block selective `<N>` does not checkpoint
};

/// `full`, or one of `selective`'s policies (`kiln.selective_ac`).
struct Policy {
  Keep keep = Keep::nothing;
  /// selective `<N>`: blocks N-1, 2N-1, ... keep nothing, the others
  /// everything (TorchTitan's layer policy counts blocks from 1).
  int64_t every = 0;
  Keep forBlock(int64_t block) const {
    if (every == 0)
      return keep;
    return (block + 1) % every == 0 ? Keep::nothing : Keep::everything;
  }
};

/// The policy of `mode` (selective or full) and `selective`
/// (KilnDialect::isSelectiveAcPolicy's; empty: gemm), or nothing.
std::optional<Policy> parsePolicy(StringRef mode, StringRef selective) {
  if (mode == "full")
    return Policy{Keep::nothing, 0};
  if (selective.empty() || selective == "gemm")
    return Policy{Keep::gemms, 0};
  if (!KilnDialect::isSelectiveAcPolicy(selective))
    return std::nullopt;
  if (selective == "op")
    return Policy{Keep::everyOtherGemm, 0};
  int64_t every = 0;
  (void)selective.getAsInteger(10, every);
  return Policy{Keep::nothing, every};
}

class Recompute {
public:
  Recompute(func::FuncOp f, Policy policy)
      : f(f), block(f.getBody().front()), policy(policy) {}
  void run();

private:
  /// Whether `op` is a forward op of a block whose results may be
  /// recomputed rather than kept.
  bool recomputable(Operation *op) const {
    if (!op || op->getBlock() != &block || !forward.contains(op) ||
        blockOf(op) < 0 || op->getNumRegions() != 0)
      return false;
    Keep keep = policy.forBlock(blockOf(op));
    if (keep == Keep::everything)
      return false;
    if (!isPure(op) && !recomputableCollective(op, keep))
      return false;
    if (isa<AttentionOp>(op))
      return keep == Keep::nothing;
    if (isa<LinearOp>(op))
      return keep == Keep::nothing ||
             (keep == Keep::everyOtherGemm && !keptGemms.contains(op));
    return true;
  }
  /// Tensor parallel's collectives inside a block: every rank of a tp
  /// group runs the same program, so a clone is one more collective they
  /// all issue in the same order, and a sequence-parallel all-gather's
  /// result (tp times the block's sharded input) need not be kept. A
  /// reduce-scatter is recomputed only where the block keeps nothing: the
  /// selective policies keep it (TorchTitan's op policy saves it too), as
  /// recomputing it costs a collective and, where its GEMM is kept, saves
  /// nothing. A wait is recomputed with its start; async TP's rings
  /// (send_recv_start) are kept.
  bool recomputableCollective(Operation *op, Keep keep) const {
    if (auto wait = dyn_cast<WaitOp>(op))
      return recomputable(wait.getPending().getDefiningOp());
    if (auto gather = dyn_cast<AllGatherStartOp>(op))
      return gather.getAxis() == MeshAxis::tp;
    if (auto scatter = dyn_cast<ReduceScatterStartOp>(op))
      return keep == Keep::nothing && scatter.getAxis() == MeshAxis::tp;
    return false;
  }
  /// Under `op`: the forward GEMMs kept, those on a block's 1st, 3rd, ...
  /// weight in forward order (TorchTitan counts its matmuls; async TP's
  /// chunks of one linear share a weight and count once).
  void findKeptGemms() {
    DenseMap<int64_t, llvm::StringMap<unsigned>> ordinals;
    for (Operation *op : forward)
      if (auto linear = dyn_cast<LinearOp>(op); linear && blockOf(op) >= 0) {
        llvm::StringMap<unsigned> &seen = ordinals[blockOf(op)];
        unsigned ordinal =
            seen.try_emplace(linear.getParam(), seen.size() + 1).first->second;
        if (ordinal % 2 == 1)
          keptGemms.insert(op);
      }
  }
  func::FuncOp f;
  Block &block;
  Policy policy;
  SetVector<Operation *> forward;
  DenseSet<Operation *> keptGemms;
  /// Forward op -> the op its clone must come before.
  DenseMap<Operation *, Operation *> neededAt;
};

void Recompute::run() {
  Operation *backwardStart = nullptr;
  // The backward begins at the loss's gradient, or, on a pipeline stage
  // without the loss, where the next stage's gradient is received.
  for (Operation &op : block) {
    auto recv = dyn_cast<PipeRecvOp>(op);
    if (isa<CrossEntropyGradOp, VocabParallelLossGradOp>(op) ||
        (recv && recv.getDirection() == PipeDirection::gradient)) {
      backwardStart = &op;
      break;
    }
    forward.insert(&op);
  }
  if (!backwardStart)
    return;
  findKeptGemms();
  auto earlier = [](Operation *a, Operation *b) {
    return !a ? b : (!b ? a : (a->isBeforeInBlock(b) ? a : b));
  };

  // (1) What backward readers need, then what those clones need.
  SmallVector<Operation *> backward;
  for (Operation *op = backwardStart; op; op = op->getNextNode())
    backward.push_back(op);
  for (Operation *user : backward)
    for (Value v : user->getOperands())
      if (Operation *def = v.getDefiningOp();
          recomputable(def) && blockOf(def) == blockOf(user))
        neededAt[def] = earlier(neededAt.lookup(def), user);
  SmallVector<Operation *> order;
  for (Operation &op : block)
    if (forward.contains(&op))
      order.push_back(&op);
  for (Operation *op : llvm::reverse(order)) {
    Operation *at = neededAt.lookup(op);
    if (!at)
      continue;
    for (Value v : op->getOperands())
      if (Operation *def = v.getDefiningOp();
          recomputable(def) && blockOf(def) == blockOf(op))
        neededAt[def] = earlier(neededAt.lookup(def), at);
  }

  // (2) The clones, in program order. A clone reads the clones of its own
  // block's values and another block's values as saved (that block's clone
  // of one, if any, may come later).
  IRMapping clones;
  OpBuilder b(f.getContext());
  for (Operation *op : order) {
    Operation *at = neededAt.lookup(op);
    if (!at)
      continue;
    IRMapping sameBlock;
    for (Value v : op->getOperands())
      if (Operation *def = v.getDefiningOp();
          def && blockOf(def) == blockOf(op) && clones.contains(v))
        sameBlock.map(v, clones.lookup(v));
    b.setInsertionPoint(at);
    Operation *clone = b.clone(*op, sameBlock);
    clones.map(op->getResults(), clone->getResults());
    clone->setAttr(kRecomputedAttr, b.getUnitAttr());
  }

  // (3) Backward readers of the same block read the clones.
  for (Operation *user : backward)
    for (OpOperand &use : user->getOpOperands())
      if (Operation *def = use.get().getDefiningOp();
          def && neededAt.count(def) && blockOf(def) == blockOf(user) &&
          !user->hasAttr(kRecomputedAttr))
        use.set(clones.lookup(use.get()));
}

struct ActivationCheckpointPass
    : kiln::impl::KilnActivationCheckpointBase<ActivationCheckpointPass> {
  using KilnActivationCheckpointBase::KilnActivationCheckpointBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto option = [&](const std::string &set, StringRef attr) {
      if (!set.empty())
        return set;
      auto a = module->getAttrOfType<StringAttr>(attr);
      return a ? a.getValue().str() : std::string();
    };
    std::string m = option(mode, "kiln.activation_checkpoint");
    std::string sel = option(selective, KilnDialect::kSelectiveAcAttrName);
    if (m.empty() || m == "none")
      return;
    if (m != "selective" && m != "full") {
      module.emitError("kiln-activation-checkpoint: mode must be none, "
                       "selective or full, got '")
          << m << "'";
      return signalPassFailure();
    }
    std::optional<Policy> policy = parsePolicy(m, sel);
    if (!policy) {
      module.emitError("kiln-activation-checkpoint: the selective policy "
                       "must be gemm, op or a positive number of blocks, "
                       "got '")
          << sel << "'";
      return signalPassFailure();
    }
    for (auto f : module.getOps<func::FuncOp>()) {
      if (f.isExternal())
        continue;
      Recompute(f, *policy).run();
      LLVM_DEBUG({
        unsigned clones = 0;
        f.walk([&](Operation *op) { clones += op->hasAttr(kRecomputedAttr); });
        llvm::dbgs() << DEBUG_TYPE ": @" << f.getSymName() << ": " << clones
                     << " ops recomputed (" << m << " " << sel << ")\n";
      });
    }
  }
};
} // namespace
