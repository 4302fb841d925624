//===- AssignBuffers.cpp - Arena offsets from liveness --------------------===//
//
// Every result of a kiln op that is a buffer of its own (ArenaStorage.h: not
// a constant, not a wait's result, which is its start's buffer, not a view,
// which is its operand's, not a state AdamW or amax_history_update writes
// in place) lives from its op to its last reader, or its views' last
// reader, in one arena per function; BufferPlanner places the buffers.
// A collective's operands stay live until its wait, and its result until
// the wait result's last reader: the runtime may still be reading or
// writing them while later steps run.
//
// With place=false it only counts the bytes live (below): kiln plan's
// probes, most of which do not fit by that count alone.
//
// The pass also sums, at the step where the most bytes are live, what those
// bytes are (parameter copies, gradients, activations): `kiln explain
// --memory` and the plan's `live_at_peak` report it. With a loss gradient,
// it records the bytes live there and the most bytes live in the layers'
// backward after it, which `kiln plan` extrapolates with the layers.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"
#include "kiln/Transforms/ArenaStorage.h"
#include "kiln/Transforms/BufferPlanner.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/Support/Debug.h"

#include <functional>

#define DEBUG_TYPE "kiln-assign-buffers"

namespace kiln {
#define GEN_PASS_DEF_KILNASSIGNBUFFERS
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

/// The arena's alignment: every buffer starts at a multiple of it.
constexpr int64_t kAlignment = 64;

int64_t byteSize(Type type) {
  auto t = cast<RankedTensorType>(type);
  return t.getNumElements() * (t.getElementTypeBitWidth() / 8);
}

/// A flatten of gradients: the buffer a reduce-scatter sends (other
/// flattens pack amax vectors for an all-reduce).
bool packsGradients(FlattenOp flat) {
  return llvm::any_of(flat->getUsers(), [](Operation *user) {
    return isa<ReduceScatterStartOp>(user);
  });
}

/// What a buffer holds, for the memory breakdown.
enum Category { ParameterCopy = 0, Gradient = 1, Activation = 2 };

struct AssignBuffersPass
    : kiln::impl::KilnAssignBuffersBase<AssignBuffersPass> {
  using KilnAssignBuffersBase::KilnAssignBuffersBase;
  void runOnOperation() override;
};
} // namespace

void AssignBuffersPass::runOnOperation() {
  func::FuncOp func = getOperation();
  if (func.isExternal())
    return;
  Block &body = func.getBody().front();
  DenseMap<Operation *, int64_t> index;
  int64_t n = 0;
  for (Operation &op : body)
    index[&op] = n++;

  // A collective owns its operand and result buffers from its start to its
  // wait, and the wait's result is the start's buffer: both stay live
  // until the wait and the wait result's last reader.
  DenseMap<Value, int64_t> liveUntil;
  for (Operation &op : body)
    if (auto wait = dyn_cast<WaitOp>(op)) {
      int64_t last = index.lookup(&op);
      for (Operation *user : wait.getResult().getUsers())
        last = std::max(last, index.lookup(user));
      Operation *start = wait.getPending().getDefiningOp();
      liveUntil[wait.getPending()] =
          std::max(liveUntil.lookup(wait.getPending()), last);
      if (start)
        for (Value operand : start->getOperands()) {
          // An operand that is another collective's result (a ring step
          // passing on what it received), or a view, is that buffer.
          if (Value storage = arenaStorage(operand))
            operand = storage;
          liveUntil[operand] =
              std::max(liveUntil.lookup(operand), index.lookup(&op));
        }
    }
  // A view's readers read its buffer's owner.
  for (Operation &op : body)
    if (isArenaView(&op)) {
      Value storage = arenaStorage(op.getResult(0));
      int64_t &last = liveUntil[storage];
      for (Operation *user : op.getResult(0).getUsers())
        last = std::max(last, index.lookup(user));
    }

  // A compute copy of parameters (a cast of one, or gathered), a gradient
  // (what AdamW or a reduce-scatter reads, through casts), or an activation
  // or temporary.
  DenseSet<Value> gradients;
  std::function<void(Value)> markGradient = [&](Value v) {
    if (!gradients.insert(v).second)
      return;
    if (auto cast = v.getDefiningOp<CastOp>())
      markGradient(cast.getInput());
  };
  for (Operation &op : body) {
    if (auto adamw = dyn_cast<AdamWOp>(op))
      markGradient(adamw.getGrad());
    if (auto flat = dyn_cast<FlattenOp>(op); flat && packsGradients(flat))
      for (Value part : flat.getParts())
        markGradient(part);
  }
  auto categoryOf = [&](Operation &op, Value r) {
    if (isa<AllGatherStartOp, UnflattenOp, ShardAmaxOp, ShardQuantizeOp>(op) ||
        (isa<CastOp>(op) && isa<BlockArgument>(op.getOperand(0))))
      return ParameterCopy;
    auto flat = dyn_cast<FlattenOp>(op);
    if ((flat && packsGradients(flat)) || isa<ReduceScatterStartOp>(op) ||
        gradients.contains(r))
      return Gradient;
    return Activation;
  };

  // One buffer per owning result, live from its op to its last reader (or
  // its collective's wait).
  std::vector<BufferRequest> requests;
  std::vector<Category> categories;
  SmallVector<Operation *> owners;
  for (Operation &op : body.without_terminator()) {
    if (!ownsBuffer(&op))
      continue;
    owners.push_back(&op);
    for (OpResult r : op.getResults()) {
      int64_t last = std::max(index.lookup(&op), liveUntil.lookup(r));
      for (Operation *user : r.getUsers())
        last = std::max(last, index.lookup(user));
      requests.push_back({byteSize(r.getType()), index.lookup(&op), last});
      categories.push_back(categoryOf(op, r));
    }
  }

  // The bytes live at each step: the placement's lower bound, and what the
  // attributes below report.
  std::vector<int64_t> sizes = alignedSizes(requests, kAlignment);
  LiveBytes live(requests, sizes);
  Builder b(func.getContext());
  int64_t peak = 0;
  if (place) {
    std::vector<int64_t> offsets = planBuffers(requests, sizes, live, peak);
    size_t next = 0;
    for (Operation *op : owners) {
      SmallVector<int64_t> opOffsets, opSizes;
      for (unsigned i = 0, e = op->getNumResults(); i < e; ++i, ++next) {
        opOffsets.push_back(offsets[next]);
        opSizes.push_back(requests[next].bytes);
      }
      op->setAttr(kArenaOffsetsAttr, b.getDenseI64ArrayAttr(opOffsets));
      op->setAttr(kArenaSizesAttr, b.getDenseI64ArrayAttr(opSizes));
    }
    func->setAttr(kArenaBytesAttr, b.getI64IntegerAttr(peak));
  } else {
    // Offsets from an earlier run would no longer hold.
    for (Operation *op : owners) {
      op->removeAttr(kArenaOffsetsAttr);
      op->removeAttr(kArenaSizesAttr);
    }
    func->removeAttr(kArenaBytesAttr);
  }

  // The step where the most bytes are live, and what they are.
  auto [peakLive, peakStep] = live.most(0, n);
  int64_t atPeak[3] = {0, 0, 0};
  for (auto [r, size, category] : llvm::zip(requests, sizes, categories))
    if (r.first <= peakStep && peakStep <= r.last)
      atPeak[category] += size;
  func->setAttr(
      kLiveAtPeakAttr,
      b.getDictionaryAttr({
          b.getNamedAttr("peak_step", b.getI64IntegerAttr(peakStep)),
          b.getNamedAttr("parameter_copies",
                         b.getI64IntegerAttr(atPeak[ParameterCopy])),
          b.getNamedAttr("gradients", b.getI64IntegerAttr(atPeak[Gradient])),
          b.getNamedAttr("activations",
                         b.getI64IntegerAttr(atPeak[Activation])),
      }));

  // Where the loss's gradient starts the backward, every activation the
  // forward saved is live; in the layers' backward after it, all but those
  // of the layers already done. Both grow with the layers, where a small
  // compile's fullest step can be the loss's temporaries or the embedding's
  // gradient, which do not.
  int64_t lossStep = -1, embeddingStep = n;
  for (Operation &op : body) {
    if (lossStep < 0 && isa<CrossEntropyGradOp, VocabParallelStatsGradOp>(op))
      lossStep = index.lookup(&op);
    if (lossStep >= 0 && isa<EmbeddingGradOp>(op)) {
      embeddingStep = index.lookup(&op);
      break;
    }
  }
  if (lossStep >= 0) {
    func->setAttr(kLiveAtLossAttr, b.getI64IntegerAttr(live.at(lossStep)));
    func->setAttr(
        kLiveInBackwardAttr,
        b.getI64IntegerAttr(
            live.most(lossStep, std::max(embeddingStep, lossStep + 1)).first));
  }

  LLVM_DEBUG(llvm::dbgs() << DEBUG_TYPE ": @" << func.getSymName() << ": "
                          << requests.size() << " buffers, arena " << peak
                          << " bytes, peak at step " << peakStep << " ("
                          << peakLive << " bytes live)\n");
}
