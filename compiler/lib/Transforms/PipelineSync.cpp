//===- PipelineSync.cpp - The step's global quantities over the pp axis ---===//
//
// Pipeline parallel (docs/pp.md, "Global quantities"). Each pp rank holds
// its stages' parameters and only the last stage computes the loss, so:
//
// - the loss (result 0 of @train_step, @forward_loss and @loss_and_grads)
//   is summed over pp: the last stage's loss plus the other ranks' 0, so
//   every rank reports the step's loss;
// - the gradient norm AdamW clips by is over every stage's gradients: the
//   squares this rank summed (over its stages, and over tp and dp_shard as
//   TpNorm.h and kiln-fsdp count them) are summed over pp before the
//   square root.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace kiln {
#define GEN_PASS_DEF_KILNPIPELINESYNC
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

/// `value` summed over the pp axis, built at `b`'s insertion point.
Value sumOverPp(OpBuilder &b, Location loc, Value value, int64_t pp) {
  auto start = AllReduceStartOp::create(
      b, loc, value, MeshAxisAttr::get(b.getContext(), MeshAxis::pp),
      b.getI64IntegerAttr(pp), b.getStringAttr("sum"));
  return WaitOp::create(b, loc, start.getResult());
}

/// The norm AdamW clips by, from every stage's squares.
LogicalResult syncNorm(func::FuncOp func, int64_t pp) {
  SmallVector<AdamWOp> updates;
  func.walk([&](AdamWOp op) { updates.push_back(op); });
  if (updates.empty())
    return success();
  Value norm = updates.front().getGradNorm();
  for (AdamWOp op : updates)
    if (op.getGradNorm() != norm)
      return op.emitOpError("clips by another gradient norm than the "
                            "step's other updates");
  OpBuilder b(func.getContext());
  if (auto sqrt = norm.getDefiningOp<SqrtOp>()) {
    b.setInsertionPoint(sqrt);
    sqrt->setOperand(0, sumOverPp(b, sqrt.getLoc(), sqrt.getInput(), pp));
    return success();
  }
  auto whole = norm.getDefiningOp<GradNormOp>();
  if (!whole || whole.getSquared())
    return updates.front().emitOpError(
        "clips by a gradient norm that is neither kiln.grad_norm nor "
        "kiln.sqrt of squares; kiln-pipeline-sync cannot sum it over pp");
  b.setInsertionPoint(whole);
  Value squares = GradNormOp::create(b, whole.getLoc(), whole.getGrads(), true);
  Value summed = sumOverPp(b, whole.getLoc(), squares, pp);
  Value root = SqrtOp::create(b, whole.getLoc(), summed);
  whole.getResult().replaceAllUsesWith(root);
  whole->erase();
  return success();
}

struct PipelineSyncPass : kiln::impl::KilnPipelineSyncBase<PipelineSyncPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    MeshAttr mesh = getModuleMesh(module);
    if (!mesh || mesh.getPp() == 1)
      return;
    int64_t pp = mesh.getPp();
    for (auto func : module.getOps<func::FuncOp>()) {
      StringRef name = func.getSymName();
      if (name != kTrainStepFunc && name != kForwardLossFunc &&
          name != kLossAndGradsFunc)
        continue;
      auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
      OpBuilder b(ret);
      ret.setOperand(0, sumOverPp(b, ret.getLoc(), ret.getOperand(0), pp));
      if (failed(syncNorm(func, pp)))
        return signalPassFailure();
    }
  }
};

} // namespace
