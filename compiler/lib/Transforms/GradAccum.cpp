//===- GradAccum.cpp - The step's forward and backward once per microbatch ===//
//
// Gradient accumulation (docs/pp.md, "Gradient accumulation"). The frontend
// builds @forward_loss for one microbatch of `b` sequences and puts the
// count `M` in the module's `kiln.microbatches`. Here, after the shard and
// fp8 phases, each entry that reads `tokens` and `targets` takes `M * b`
// rows instead, and what it computes from them runs once per microbatch:
//
// - The microbatch part of an entry is every op its per-microbatch results
//   depend on: in @train_step the gradients AdamW reads and the loss, in
//   @forward_loss (the plan's eval_loss) and @loss_and_grads every result,
//   in @forward_logits the logits. It is cloned M
//   times in order, microbatch m reading rows [m * b, (m + 1) * b) of the
//   inputs (a reshape and an unflatten), so microbatch m's activations are
//   dead before m + 1's forward starts.
// - Each microbatch's loss is the mean over its tokens, and every
//   microbatch has as many: the whole batch's loss is the mean of theirs,
//   and its gradient the sum of theirs with the loss gradient's seed
//   divided by M (`kiln.divide` on the seed of each loss backward, as
//   TorchTitan rescales each microbatch's loss). So gradients are summed as
//   the microbatches go (one microbatch's gradients live at a time besides
//   the sum), each at the whole batch's scale (which FP8's gradient amaxes
//   see), and losses summed, then divided by M. Logits are put back in row
//   order (`flatten`). The delayed FP8 recipe's amaxes are combined with
//   `kiln.maximum`: the step's amax is the whole batch's, and its history
//   is updated once.
// - Everything else (the gradient norm, the learning rate, AdamW) runs once,
//   on the sums, after the last microbatch.
//
// What those results depend on but the batch does not runs once per step,
// before the first microbatch, and its values are held across them (as a
// compiler hoists what a loop does not change): the weights' casts, their
// FP8 amaxes and quantization, and with `reshard_after_forward = false`
// FSDP's parameter all-gathers. With resharding (the default) FSDP gathers
// the parameters again for the backward; holding both gathers across the
// microbatches would hold every parameter twice, so the gathers and what
// is computed from the gathered parameters run per microbatch, keeping the
// memory of one microbatch's step (FSDP2's behaviour under accumulation).
// The gradients' reduce-scatters are per microbatch either way.
//
// An op outside the part that reads a value of one microbatch other than
// those results is an error, never a silently wrong step.
//
// Under pipeline parallel (docs/pp.md) the same holds per stage, and the
// pass runs even for one microbatch: a `pipe_recv` brings one microbatch's
// activation or gradient as the batch brings its rows, a `pipe_send` is a
// result (what the neighbour stage reads), each clone is marked with its
// microbatch (`kiln.microbatch`) for kiln-pipeline-schedule, and a
// group's FSDP gradient buffer is summed over the microbatches so that it
// is reduce-scattered once per step.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Analysis/TopologicalSortUtils.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "kiln-grad-accum"

namespace kiln {
#define GEN_PASS_DEF_KILNGRADACCUM
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

/// How a per-microbatch result becomes the step's.
enum class Combine { Mean, Sum, Rows, Max };

/// The values of `func` that may be per microbatch, and how each combines:
/// in @train_step the loss and the gradients AdamW reads (means), in
/// @forward_loss (the plan's eval_loss) and @loss_and_grads every result
/// (means), in @forward_logits the logits (rows); in @train_step and
/// @fp8_calibration the amaxes the delayed recipe's histories take (the
/// largest). Failure for another entry.
FailureOr<SmallVector<std::pair<Value, Combine>>>
microbatchResults(func::FuncOp func, bool pipelined) {
  SmallVector<std::pair<Value, Combine>> results;
  auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
  StringRef name = func.getSymName();
  if (name == kForwardLogitsFunc || name == kForwardLossFunc ||
      name == kLossAndGradsFunc) {
    for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
      bool grad = func.getResultAttr(i, KilnDialect::kGradAttrName) != nullptr;
      results.push_back({v, name == kForwardLogitsFunc ? Combine::Rows
                            : grad                     ? Combine::Sum
                                                       : Combine::Mean});
    }
    return results;
  }
  if (name != kTrainStepFunc && name != kFp8CalibrationFunc)
    return func.emitOpError("reads the batch, and kiln-grad-accum does not "
                            "know how to combine its microbatches' results");
  // The step's amax is the whole batch's: the largest microbatch amax.
  func.walk([&](AmaxHistoryUpdateOp update) {
    results.push_back({update.getAmax(), Combine::Max});
  });
  if (name == kFp8CalibrationFunc)
    return results;
  for (unsigned i = 0; i < func.getNumResults(); ++i) {
    auto output =
        func.getResultAttrOfType<StringAttr>(i, KilnDialect::kOutputAttrName);
    if (output && output.getValue() == "loss")
      results.push_back({ret.getOperand(i), Combine::Mean});
  }
  func.walk([&](AdamWOp adamw) {
    // Under pipeline parallel a group's FSDP gradient buffer is summed
    // over the microbatches and reduce-scattered once per step.
    Value grad = adamw.getGrad();
    if (auto wait = grad.getDefiningOp<WaitOp>(); wait && pipelined)
      if (auto scatter =
              wait.getPending().getDefiningOp<ReduceScatterStartOp>();
          scatter && scatter.getAxis() == MeshAxis::dp_shard &&
          scatter.getInput().getDefiningOp<FlattenOp>())
        grad = scatter.getInput();
    results.push_back({grad, Combine::Sum});
  });
  return results;
}

class Accumulate {
public:
  Accumulate(func::FuncOp func, int64_t microbatches, bool reshard,
             bool pipelined)
      : func(func), m(microbatches), reshard(reshard), pipelined(pipelined),
        b(func.getContext()) {}

  LogicalResult run();

private:
  /// The ops `roots` depend on that run per microbatch, in block order:
  /// those that depend on `inputs` and, when FSDP reshards, on a parameter
  /// all-gather. The others `roots` depend on are moved before the first
  /// of them, to run once.
  SmallVector<Operation *> partOf(ArrayRef<Value> roots,
                                  ArrayRef<BlockArgument> inputs);
  /// Divides the loss gradient's seed by M in each of `part`'s loss
  /// backward ops, so that each microbatch's gradients are its share of
  /// the whole batch's mean and add up to it (TorchTitan rescales each
  /// microbatch's loss alike). A new op joins `part` where it reads it.
  void scaleLossGradients(SmallVector<Operation *> &part);
  /// Microbatch k's rows, of type `one`, of a widened input as `flat`.
  Value rowsOf(Location loc, Value flat, RankedTensorType one, int64_t k);

  func::FuncOp func;
  int64_t m;
  bool reshard;
  /// Pipeline parallel: each clone is marked with its microbatch, for
  /// kiln-pipeline-schedule.
  bool pipelined;
  OpBuilder b;
};

SmallVector<Operation *>
Accumulate::partOf(ArrayRef<Value> roots, ArrayRef<BlockArgument> inputs) {
  llvm::DenseSet<Operation *> needed;
  SmallVector<Value> work(roots.begin(), roots.end());
  // A pipeline stage's sends are results too: what the next stage reads.
  func.walk([&](PipeSendOp send) {
    needed.insert(send);
    work.push_back(send.getInput());
  });
  while (!work.empty()) {
    Operation *op = work.pop_back_val().getDefiningOp();
    if (!op || !needed.insert(op).second)
      continue;
    // Before the fuse phase no op has a region.
    for (Value operand : op->getOperands())
      work.push_back(operand);
  }
  // Per microbatch: what reads the batch, or (resharding) a gathered
  // parameter, directly or through another such op; in block order.
  llvm::DenseSet<Value> varying(inputs.begin(), inputs.end());
  SmallVector<Operation *> part, once;
  for (Operation &op : func.getBody().front().without_terminator()) {
    // A pipeline stage's receives bring one microbatch's activations or
    // gradients, as the batch brings its rows.
    bool perMicrobatch =
        isa<PipeRecvOp>(op) ||
        llvm::any_of(op.getOperands(),
                     [&](Value v) { return varying.contains(v); }) ||
        (reshard && isa<AllGatherStartOp>(op) &&
         cast<AllGatherStartOp>(op).getAxis() == MeshAxis::dp_shard);
    if (perMicrobatch)
      varying.insert(op.result_begin(), op.result_end());
    if (needed.contains(&op))
      (perMicrobatch ? part : once).push_back(&op);
  }
  // What runs once goes before the first microbatch, in its order (its
  // operands are arguments or other such ops).
  if (!part.empty())
    for (Operation *op : once)
      if (part.front()->isBeforeInBlock(op))
        op->moveBefore(part.front());
  return part;
}

void Accumulate::scaleLossGradients(SmallVector<Operation *> &part) {
  llvm::DenseSet<Operation *> inPart(part.begin(), part.end());
  SmallVector<Operation *> scaled;
  for (Operation *op : part) {
    if (!isa<CrossEntropyGradOp, VocabParallelLossGradOp>(op))
      continue;
    Value seed = op->getOperand(0);
    Operation *def = seed.getDefiningOp();
    bool perMicrobatch = def && inPart.contains(def);
    // The seed is the same for every microbatch unless it reads the batch.
    b.setInsertionPoint(perMicrobatch ? op : part.front());
    auto divide =
        DivideOp::create(b, seed.getLoc(), seed, b.getI64IntegerAttr(m));
    op->setOperand(0, divide);
    if (perMicrobatch)
      scaled.push_back(divide);
  }
  if (scaled.empty())
    return;
  llvm::append_range(part, scaled);
  llvm::sort(part,
             [](Operation *x, Operation *y) { return x->isBeforeInBlock(y); });
}

Value Accumulate::rowsOf(Location loc, Value flat, RankedTensorType one,
                         int64_t k) {
  int64_t n = one.getNumElements();
  Value part = UnflattenOp::create(b, loc, one.clone({n}), flat,
                                   b.getI64IntegerAttr(k * n));
  return ReshapeOp::create(b, loc, one, part);
}

LogicalResult Accumulate::run() {
  Block &body = func.getBody().front();
  SmallVector<BlockArgument> inputs;
  for (BlockArgument arg : body.getArguments())
    if (func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                          KilnDialect::kInputAttrName) &&
        cast<RankedTensorType>(arg.getType()).getRank() >= 1)
      inputs.push_back(arg);
  if (inputs.empty())
    return success();
  FailureOr<SmallVector<std::pair<Value, Combine>>> found =
      microbatchResults(func, pipelined);
  if (failed(found))
    return failure();
  SmallVector<std::pair<Value, Combine>> results = std::move(*found);
  if (results.empty())
    return func.emitOpError("reads the batch but has no loss, gradient or "
                            "logits to accumulate over microbatches");
  SmallVector<Value> roots;
  for (auto &[v, how] : results)
    roots.push_back(v);
  SmallVector<Operation *> part = partOf(roots, inputs);
  llvm::DenseSet<Operation *> inPart(part.begin(), part.end());
  // A result the batch does not change (a weight's amax) runs once and
  // needs no combining; a value listed twice is combined once.
  llvm::DenseSet<Value> combined;
  llvm::erase_if(results, [&](const std::pair<Value, Combine> &r) {
    Operation *def = r.first.getDefiningOp();
    return !def || !inPart.contains(def) || !combined.insert(r.first).second;
  });

  // Outside the part only the combined results may be read.
  for (Operation &op : body)
    if (!inPart.contains(&op))
      for (Value operand : op.getOperands())
        if (Operation *def = operand.getDefiningOp();
            def && inPart.contains(def) && !combined.contains(operand))
          return op.emitOpError("reads a value of one microbatch (")
                 << def->getName() << "), which kiln-grad-accum cannot combine";
  // The batch is read only inside the part.
  for (BlockArgument arg : inputs)
    for (Operation *user : arg.getUsers())
      if (!inPart.contains(user))
        return user->emitOpError("reads the batch outside what is computed "
                                 "per microbatch");

  // Widen the inputs: M times the rows.
  SmallVector<RankedTensorType> one;
  for (BlockArgument arg : inputs) {
    auto t = cast<RankedTensorType>(arg.getType());
    one.push_back(t);
    SmallVector<int64_t> shape(t.getShape());
    shape[0] *= m;
    arg.setType(t.clone(shape));
  }

  scaleLossGradients(part);
  b.setInsertionPoint(part.front());
  SmallVector<Value> flats;
  for (BlockArgument arg : inputs) {
    auto whole = cast<RankedTensorType>(arg.getType());
    flats.push_back(ReshapeOp::create(
        b, arg.getLoc(), whole.clone({whole.getNumElements()}), arg));
  }
  SmallVector<Value> sums(results.size());
  SmallVector<SmallVector<Value>> rows(results.size());
  for (int64_t k = 0; k < m; ++k) {
    IRMapping map;
    Block::iterator first = b.getInsertionPoint();
    bool atStart = first == body.begin();
    if (!atStart)
      --first;
    for (auto [arg, flat, t] : llvm::zip(inputs, flats, one))
      map.map(arg, rowsOf(arg.getLoc(), flat, t, k));
    for (Operation *op : part)
      b.clone(*op, map);
    if (pipelined)
      for (Operation &op :
           llvm::make_range(atStart ? body.begin() : std::next(first),
                            b.getInsertionPoint()))
        op.setAttr(KilnDialect::kMicrobatchAttrName, b.getI64IntegerAttr(k));
    for (auto [i, result] : llvm::enumerate(results)) {
      Value mine = map.lookup(result.first);
      if (result.second == Combine::Rows)
        rows[i].push_back(mine);
      else if (k == 0)
        sums[i] = mine;
      else if (result.second == Combine::Max)
        sums[i] = MaximumOp::create(b, mine.getLoc(), sums[i], mine);
      else
        sums[i] = AddOp::create(b, mine.getLoc(), sums[i], mine);
    }
  }
  for (auto [i, result] : llvm::enumerate(results)) {
    auto [v, how] = result;
    Location loc = v.getLoc();
    Value step;
    if (how == Combine::Max || how == Combine::Sum) {
      step = sums[i];
    } else if (how == Combine::Mean) {
      step = DivideOp::create(b, loc, sums[i], b.getI64IntegerAttr(m));
    } else {
      auto t = cast<RankedTensorType>(v.getType());
      int64_t n = t.getNumElements();
      SmallVector<Value> flat;
      SmallVector<int64_t> offsets;
      for (auto [k, r] : llvm::enumerate(rows[i])) {
        flat.push_back(ReshapeOp::create(b, loc, t.clone({n}), r));
        offsets.push_back(static_cast<int64_t>(k) * n);
      }
      Value all = FlattenOp::create(b, loc, t.clone({n * m}), flat,
                                    b.getDenseI64ArrayAttr(offsets));
      SmallVector<int64_t> shape(t.getShape());
      shape[0] *= m;
      step = ReshapeOp::create(b, loc, t.clone(shape), all);
    }
    v.replaceUsesWithIf(
        step, [&](OpOperand &use) { return !inPart.contains(use.getOwner()); });
  }
  for (Operation *op : llvm::reverse(part)) {
    op->dropAllUses();
    op->erase();
  }
  // What reads a sum now comes after it (a reduce-scatter of a gradient
  // buffer summed under pipeline parallel); the sort is stable, so every
  // other op keeps its place.
  sortTopologically(&body);
  // The inputs', and the logits' results, are M times the rows.
  func.setType(FunctionType::get(func.getContext(), body.getArgumentTypes(),
                                 body.getTerminator()->getOperandTypes()));
  return success();
}

struct GradAccumPass : kiln::impl::KilnGradAccumBase<GradAccumPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto count =
        module->getAttrOfType<IntegerAttr>(KilnDialect::kMicrobatchesAttrName);
    int64_t m = count ? count.getInt() : 1;
    // Under pipeline parallel even one microbatch is marked, for the
    // schedule.
    MeshAttr mesh = getModuleMesh(module);
    bool pipelined = mesh && mesh.getPp() > 1;
    if (m == 1 && !pipelined)
      return;
    if (m < 1) {
      module.emitError("kiln.microbatches must be at least 1, got ") << m;
      return signalPassFailure();
    }
    // kiln-fsdp's choice: parameters gathered again for the backward.
    auto fsdp = module->getAttrOfType<DictionaryAttr>("kiln.fsdp");
    auto keep = fsdp ? fsdp.getAs<BoolAttr>("reshard_after_forward")
                     : BoolAttr();
    bool reshard = !keep || keep.getValue();
    for (auto func : llvm::to_vector(module.getOps<func::FuncOp>())) {
      if (failed(Accumulate(func, m, reshard, pipelined).run()))
        return signalPassFailure();
    }
  }
};

} // namespace
