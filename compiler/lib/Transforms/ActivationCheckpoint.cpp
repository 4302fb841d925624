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
// saved. The backward begins at the loss's gradient or, on a pipeline stage
// without the loss, at the receive of the next stage's gradient. Tensor
// parallel's all-gathers (and, under `full`, reduce-scatters) inside a block
// are recomputed like pure ops: a sequence-parallel all-gather's result is tp
// times the saved input.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/Support/Debug.h"

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

class Recompute {
public:
  Recompute(func::FuncOp f, bool selective)
      : f(f), block(f.getBody().front()), selective(selective) {}
  void run();

private:
  /// Whether `op` is a forward op of a block whose results may be
  /// recomputed rather than kept.
  bool recomputable(Operation *op) const {
    if (!op || op->getBlock() != &block || !forward.contains(op) ||
        blockOf(op) < 0 || op->getNumRegions() != 0)
      return false;
    if (!isPure(op) && !recomputableCollective(op))
      return false;
    if (selective && isa<LinearOp, AttentionOp>(op))
      return false;
    return true;
  }
  /// Tensor parallel's collectives inside a block: every rank of a tp
  /// group runs the same program, so a clone is one more collective they
  /// all issue in the same order, and a sequence-parallel all-gather's
  /// result (tp times the block's sharded input) need not be kept. A
  /// reduce-scatter is recomputed by `full` only: `selective` keeps the
  /// GEMM result it reads, so recomputing it would save nothing and cost a
  /// collective (TorchTitan's selective policy keeps it too). A wait is
  /// recomputed with its start; async TP's rings (send_recv_start) are
  /// kept.
  bool recomputableCollective(Operation *op) const {
    if (auto wait = dyn_cast<WaitOp>(op))
      return recomputable(wait.getPending().getDefiningOp());
    if (auto gather = dyn_cast<AllGatherStartOp>(op))
      return gather.getAxis() == MeshAxis::tp;
    if (auto scatter = dyn_cast<ReduceScatterStartOp>(op))
      return !selective && scatter.getAxis() == MeshAxis::tp;
    return false;
  }
  func::FuncOp f;
  Block &block;
  bool selective;
  DenseSet<Operation *> forward;
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

  // (2) The clones, in program order.
  IRMapping clones;
  OpBuilder b(f.getContext());
  for (Operation *op : order) {
    Operation *at = neededAt.lookup(op);
    if (!at)
      continue;
    b.setInsertionPoint(at);
    Operation *clone = b.clone(*op, clones);
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
    std::string m = mode;
    if (m.empty())
      if (auto attr =
              module->getAttrOfType<StringAttr>("kiln.activation_checkpoint"))
        m = attr.getValue().str();
    if (m.empty() || m == "none")
      return;
    if (m != "selective" && m != "full") {
      module.emitError("kiln-activation-checkpoint: mode must be none, "
                       "selective or full, got '")
          << m << "'";
      return signalPassFailure();
    }
    for (auto f : module.getOps<func::FuncOp>()) {
      if (f.isExternal())
        continue;
      Recompute(f, m == "selective").run();
      LLVM_DEBUG({
        unsigned clones = 0;
        f.walk([&](Operation *op) { clones += op->hasAttr(kRecomputedAttr); });
        llvm::dbgs() << DEBUG_TYPE ": @" << f.getSymName() << ": " << clones
                     << " ops recomputed (" << m << ")\n";
      });
    }
  }
};
} // namespace
