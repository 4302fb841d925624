//===- Autodiff.cpp - Reverse-mode differentiation of @forward_loss -------===//
//
// A generic reverse sweep: the pass knows no op, only the
// DifferentiableOpInterface. Backward ops are appended in reverse order of
// the forward ops, so the forward values they use stay in the same function
// as ordinary SSA values (the saved residuals).
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "kiln-autodiff"

namespace kiln {
#define GEN_PASS_DEF_KILNAUTODIFF
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {
class Autodiff {
public:
  explicit Autodiff(func::FuncOp func) : func(func) {}

  /// Appends the backward and returns the loss plus one gradient per
  /// parameter argument.
  LogicalResult run();

private:
  /// Adds `grad` to the gradient collected for `value`.
  void accumulate(OpBuilder &b, Value value, Value grad) {
    Value &slot = grads[value];
    slot = slot ? AddOp::create(b, value.getLoc(), slot, grad).getResult()
                : grad;
  }

  func::FuncOp func;
  DenseMap<Value, Value> grads;
};
} // namespace

LogicalResult Autodiff::run() {
  Block &body = func.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  if (ret.getNumOperands() != 1 ||
      cast<RankedTensorType>(ret.getOperand(0).getType()).getRank() != 0)
    return func.emitOpError("must return exactly the scalar loss");
  Value loss = ret.getOperand(0);

  OpBuilder b(ret);
  auto scalar = RankedTensorType::get({}, b.getF32Type());
  grads[loss] = arith::ConstantOp::create(
      b, loss.getLoc(), DenseElementsAttr::get(scalar, 1.0f));

  // Snapshot the forward ops: the sweep inserts before the terminator.
  SmallVector<Operation *> forward;
  for (Operation &op : body.without_terminator())
    forward.push_back(&op);
  for (Operation *op : llvm::reverse(forward)) {
    SmallVector<Value> resultGrads;
    // A pipeline stage's output (pipe_send) is a sink: its gradient comes
    // from the next stage, whatever reaches the loss here.
    bool reachesLoss = isa<PipeSendOp>(op);
    for (Value result : op->getResults()) {
      resultGrads.push_back(grads.lookup(result));
      reachesLoss |= static_cast<bool>(resultGrads.back());
    }
    if (!reachesLoss) {
      LLVM_DEBUG(llvm::dbgs() << DEBUG_TYPE ": no gradient reaches "
                              << op->getName() << " at " << op->getLoc()
                              << "\n");
      continue;
    }
    // A constant (the loss of a pipeline rank without the last stage)
    // passes its gradient to nothing.
    if (isa<arith::ConstantOp>(op))
      continue;
    auto differentiable = dyn_cast<DifferentiableOpInterface>(op);
    if (!differentiable)
      return op->emitOpError("has no derivative rule, yet it reaches the loss");
    SmallVector<Value> operandGrads =
        differentiable.buildGradients(b, resultGrads);
    for (auto [operand, grad] : llvm::zip(op->getOperands(), operandGrads))
      if (grad)
        accumulate(b, operand, grad);
  }

  SmallVector<Value> results = {loss};
  SmallVector<Type> resultTypes = {loss.getType()};
  SmallVector<DictionaryAttr> resultAttrs = {DictionaryAttr::get(b.getContext())};
  for (BlockArgument arg : body.getArguments()) {
    auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                  KilnDialect::kParamAttrName);
    if (!name)
      continue;
    Value grad = grads.lookup(arg);
    if (!grad)
      return func.emitOpError("parameter '")
             << name.getValue() << "' does not reach the loss";
    results.push_back(grad);
    resultTypes.push_back(grad.getType());
    resultAttrs.push_back(
        b.getDictionaryAttr(b.getNamedAttr(KilnDialect::kGradAttrName, name)));
  }
  ret->setOperands(results);
  func.setFunctionType(
      b.getFunctionType(func.getArgumentTypes(), resultTypes));
  func.setAllResultAttrs(resultAttrs);

  // Backward ops whose gradient nobody needs (the gradient of the first
  // embedding's input, say) are dropped; the ops are pure, but for the
  // gradients sent to the previous pipeline stage.
  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(body)))
    if (!isa<func::ReturnOp, PipeSendOp>(op) && op.use_empty() &&
        !llvm::is_contained(forward, &op))
      op.erase();
  return success();
}

namespace {
struct AutodiffPass : kiln::impl::KilnAutodiffBase<AutodiffPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto forward = module.lookupSymbol<func::FuncOp>(kForwardLossFunc);
    if (!forward) {
      module.emitError("kiln-autodiff needs a func.func @forward_loss");
      return signalPassFailure();
    }
    if (module.lookupSymbol(kLossAndGradsFunc)) {
      module.emitError("@loss_and_grads exists already");
      return signalPassFailure();
    }
    func::FuncOp clone = forward.clone();
    clone.setSymName(kLossAndGradsFunc);
    module.getBody()->getOperations().insertAfter(Block::iterator(forward),
                                                  clone);
    if (failed(Autodiff(clone).run()))
      return signalPassFailure();
  }
};
} // namespace
