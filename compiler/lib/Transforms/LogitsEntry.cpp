//===- LogitsEntry.cpp - @forward_logits, the forward without the loss ----===//

#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#define DEBUG_TYPE "kiln-logits-entry"

namespace kiln {
#define GEN_PASS_DEF_KILNLOGITSENTRY
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {
/// The cross-entropy's result under a returned loss: the loss itself, or,
/// under tensor parallel, the wait of its mean over tp (kiln-tp-partition).
Value lossOp(Value returned) {
  if (auto wait = returned.getDefiningOp<WaitOp>())
    if (auto mean = wait.getPending().getDefiningOp<AllReduceStartOp>())
      return mean.getInput();
  return returned;
}

struct LogitsEntryPass : kiln::impl::KilnLogitsEntryBase<LogitsEntryPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto forward = module.lookupSymbol<func::FuncOp>(kForwardLossFunc);
    if (!forward || module.lookupSymbol(kForwardLogitsFunc))
      return;
    // Pipeline parallel (docs/pp.md): the logits are on the last stage
    // only; sampling compiles at pp 1.
    if (MeshAttr mesh = getModuleMesh(module); mesh && mesh.getPp() > 1)
      return;
    auto ret = cast<func::ReturnOp>(forward.getBody().front().getTerminator());
    // Loss parallel (docs/tp.md): each tp rank has only its vocabulary
    // slice of the logits, so there is nothing to sample from; the plan has
    // no logits entry (sampling compiles at tp 1).
    if (ret.getNumOperands() == 1 &&
        ret.getOperand(0).getDefiningOp<VocabParallelLossOp>())
      return;
    auto loss = ret.getNumOperands() == 1
                    ? lossOp(ret.getOperand(0)).getDefiningOp<CrossEntropyOp>()
                    : CrossEntropyOp();
    if (!loss) {
      forward.emitOpError("must return one kiln.cross_entropy to derive @")
          << kForwardLogitsFunc;
      return signalPassFailure();
    }

    OpBuilder b(module.getContext());
    b.setInsertionPointAfter(forward);
    auto logits = cast<func::FuncOp>(b.clone(*forward));
    logits.setSymName(kForwardLogitsFunc);
    auto newRet = cast<func::ReturnOp>(logits.getBody().front().getTerminator());
    Value returned = newRet.getOperand(0);
    auto ce = lossOp(returned).getDefiningOp<CrossEntropyOp>();
    Value out = ce.getLogits();
    auto targets = dyn_cast<BlockArgument>(ce.getTargets());
    newRet->setOperands(out);
    if (returned != ce.getResult()) {
      Operation *start =
          returned.getDefiningOp<WaitOp>().getPending().getDefiningOp();
      returned.getDefiningOp()->erase();
      start->erase();
    }
    ce->erase();
    logits.setFunctionType(FunctionType::get(
        module.getContext(), logits.getArgumentTypes(), {out.getType()}));
    logits.setResultAttr(0, KilnDialect::kOutputAttrName,
                         b.getStringAttr("logits"));
    // The targets fed only the loss.
    if (targets && targets.use_empty() &&
        failed(logits.eraseArgument(targets.getArgNumber())))
      return signalPassFailure();
  }
};
} // namespace
