//===- TpGradSync.cpp - Gradients and their norm summed over the tp axis --===//
//
// After kiln-tp-partition and autodiff, a tp-replicated parameter's gradient
// (the norms: no `#kiln.tp_shard`) is the rank's share, from
// its sequence shard; a tp-sharded parameter's is the whole gradient of the
// rank's slice. This pass all-reduces (sum) the former over tp where it is
// complete, and makes the gradient norm count the sharded parameters'
// squares of every tp rank and the replicated ones once (docs/tp.md).
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"
#include "kiln/Transforms/Passes.h"
#include "kiln/Transforms/TpNorm.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "kiln-tp-grad-sync"

namespace kiln {
#define GEN_PASS_DEF_KILNTPGRADSYNC
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {
class GradSync {
public:
  GradSync(func::FuncOp func, int64_t tp)
      : func(func), tp(tp), b(func.getContext()) {}
  LogicalResult run();

private:
  MeshAxisAttr tpAxis() {
    return MeshAxisAttr::get(b.getContext(), MeshAxis::tp);
  }
  /// `value` summed over tp: a start and its wait right after its
  /// definition; every other use reads the wait.
  Value allReduce(Value value);
  LogicalResult syncNorm(GradNormOp norm);

  func::FuncOp func;
  int64_t tp;
  OpBuilder b;
  /// The gradients of the replicated parameters, once summed over tp.
  DenseSet<Value> replicated;
};
} // namespace

Value GradSync::allReduce(Value value) {
  if (Operation *def = value.getDefiningOp())
    b.setInsertionPointAfter(def);
  else
    b.setInsertionPointToStart(&func.getBody().front());
  Location loc = value.getLoc();
  auto start = AllReduceStartOp::create(
      b, loc, value, tpAxis(), b.getI64IntegerAttr(tp), b.getStringAttr("sum"));
  Value total = WaitOp::create(b, loc, start.getResult());
  value.replaceAllUsesExcept(total, start);
  return total;
}

LogicalResult GradSync::run() {
  Block &body = func.getBody().front();
  // Each replicated parameter's gradient: the `kiln.grad` result of
  // @loss_and_grads, or the gradient its AdamW reads in @train_step.
  llvm::StringMap<Value> gradOf;
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  for (unsigned r = 0; r < func.getNumResults(); ++r)
    if (auto name =
            func.getResultAttrOfType<StringAttr>(r, KilnDialect::kGradAttrName))
      gradOf[name.getValue()] = ret.getOperand(r);
  for (AdamWOp adamw : body.getOps<AdamWOp>())
    if (auto arg = dyn_cast<BlockArgument>(adamw.getParam()))
      if (auto name = func.getArgAttrOfType<StringAttr>(
              arg.getArgNumber(), KilnDialect::kParamAttrName))
        gradOf[name.getValue()] = adamw.getGrad();

  for (BlockArgument arg : body.getArguments()) {
    unsigned i = arg.getArgNumber();
    auto name =
        func.getArgAttrOfType<StringAttr>(i, KilnDialect::kParamAttrName);
    if (!name || func.getArgAttr(i, KilnDialect::kTpShardAttrName))
      continue;
    Value grad = gradOf.lookup(name.getValue());
    if (!grad)
      return func.emitOpError("kiln-tp-grad-sync: no gradient for the "
                              "tp-replicated parameter '")
             << name.getValue() << "'";
    if (replicated.contains(grad))
      return func.emitOpError("kiln-tp-grad-sync: parameters share the "
                              "gradient value of '")
             << name.getValue() << "'";
    replicated.insert(allReduce(grad));
  }

  SmallVector<GradNormOp> norms(body.getOps<GradNormOp>());
  for (GradNormOp norm : norms)
    if (failed(syncNorm(norm)))
      return failure();
  return success();
}

/// sqrt(sum over tp of the sharded gradients' squares + the replicated
/// gradients' squares): each replicated gradient is the same on every tp
/// rank after its all-reduce, so it is counted once. The sum is
/// buildTpSquares's (TpNorm.h), which kiln-fsdp recognises.
LogicalResult GradSync::syncNorm(GradNormOp norm) {
  if (norm.getSquared())
    return norm.emitOpError("kiln-tp-grad-sync expects the whole norm (run "
                            "it right after kiln-optimizer)");
  SmallVector<Value> sharded, whole;
  for (Value grad : norm.getGrads())
    (replicated.contains(grad) ? whole : sharded).push_back(grad);
  b.setInsertionPoint(norm);
  Location loc = norm.getLoc();
  Value total = buildTpSquares(b, loc, sharded, whole, tp);
  if (!total)
    return norm.emitOpError("kiln-tp-grad-sync: a norm of no gradients");
  norm.getResult().replaceAllUsesWith(SqrtOp::create(b, loc, total));
  norm.erase();
  return success();
}

namespace {
struct TpGradSyncPass : kiln::impl::KilnTpGradSyncBase<TpGradSyncPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    MeshAttr mesh = getModuleMesh(module);
    if (!mesh || mesh.getTp() == 1)
      return;
    int64_t synced = 0;
    for (StringRef name : {kLossAndGradsFunc, kTrainStepFunc})
      if (auto func = module.lookupSymbol<func::FuncOp>(name)) {
        if (failed(GradSync(func, mesh.getTp()).run()))
          return signalPassFailure();
        ++synced;
      }
    if (synced == 0) {
      module.emitError("kiln-tp-grad-sync needs @loss_and_grads or "
                       "@train_step (run kiln-autodiff first)");
      return signalPassFailure();
    }
    LLVM_DEBUG(llvm::dbgs() << DEBUG_TYPE ": tp " << mesh.getTp() << ", "
                            << synced << " functions\n");
  }
};
} // namespace
