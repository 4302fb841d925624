//===- MixedPrecision.cpp - Param, reduce and master dtypes as casts ------===//
//
// One rule for every compute op, so the pass needs no list of ops: float
// operands of rank >= 1 are fed in the param dtype, float results of rank
// >= 1 are produced in it, except attention's logsumexp. The optimizer ops
// and scalars keep f32.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#define DEBUG_TYPE "kiln-mixed-precision"

namespace kiln {
#define GEN_PASS_DEF_KILNMIXEDPRECISION
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {
bool isOptimizerOp(Operation *op) {
  return isa<AdamWOp, GradNormOp, LRScheduleOp>(op);
}

/// A float tensor of rank >= 1: what the policy moves to the param dtype.
/// (Scalars such as the loss stay f32.)
bool isActivation(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && tensor.getRank() > 0 &&
         isa<FloatType>(tensor.getElementType());
}

/// Attention's logsumexp is f32 wherever it goes.
bool isLogsumexp(Value v) {
  auto result = dyn_cast<OpResult>(v);
  return result && isa<AttentionOp>(result.getOwner()) &&
         result.getResultNumber() == 1;
}

Type withElement(Type type, Type element) {
  return cast<RankedTensorType>(type).clone(element);
}

Value castTo(OpBuilder &b, Value v, Type element) {
  if (cast<RankedTensorType>(v.getType()).getElementType() == element)
    return v;
  return CastOp::create(b, v.getLoc(), withElement(v.getType(), element), v);
}

FailureOr<Type> parseDtype(Operation *at, DictionaryAttr dict, StringRef key) {
  auto name = dict.getAs<StringAttr>(key);
  Builder b(at->getContext());
  if (name && name.getValue() == "bfloat16")
    return Type(b.getBF16Type());
  if (name && name.getValue() == "float32")
    return Type(b.getF32Type());
  return at->emitError("kiln.precision '")
         << key << "' must be \"bfloat16\" or \"float32\"";
}

void applyPolicy(func::FuncOp func, Type param, Type reduce) {
  Block &body = func.getBody().front();
  OpBuilder b(func.getContext());
  Type f32 = b.getF32Type();
  for (Operation &op : llvm::make_early_inc_range(body)) {
    if (isOptimizerOp(&op) || isa<CastOp, func::ReturnOp>(op) ||
        op.getDialect() != func->getContext()->getLoadedDialect<KilnDialect>())
      continue;
    b.setInsertionPoint(&op);
    for (OpOperand &operand : op.getOpOperands())
      if (isActivation(operand.get().getType()) && !isLogsumexp(operand.get()))
        operand.set(castTo(b, operand.get(), param));
    for (OpResult result : op.getResults())
      if (isActivation(result.getType()) && !isLogsumexp(result))
        result.setType(withElement(result.getType(), param));
  }
  // Whatever leaves the compute region goes back to f32: gradients through
  // the reduce dtype (into the optimizer, or returned as kiln.grad), other
  // values directly.
  auto toF32 = [&](OpOperand &operand, bool isGrad) {
    Value v = operand.get();
    if (!isActivation(v.getType()))
      return;
    if (isGrad)
      v = castTo(b, v, reduce);
    operand.set(castTo(b, v, f32));
  };
  for (Operation &op : llvm::make_early_inc_range(body)) {
    b.setInsertionPoint(&op);
    if (auto adamw = dyn_cast<AdamWOp>(op)) {
      for (OpOperand &operand : op.getOpOperands())
        toF32(operand, operand.get() == adamw.getGrad());
    } else if (isa<GradNormOp>(op)) {
      for (OpOperand &operand : op.getOpOperands())
        toF32(operand, /*isGrad=*/true);
    } else if (isa<func::ReturnOp>(op)) {
      for (OpOperand &operand : op.getOpOperands())
        toF32(operand, static_cast<bool>(func.getResultAttr(
                           operand.getOperandNumber(),
                           KilnDialect::kGradAttrName)));
    }
  }
}

struct MixedPrecisionPass
    : kiln::impl::KilnMixedPrecisionBase<MixedPrecisionPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto dict = module->getAttrOfType<DictionaryAttr>(kPrecisionAttr);
    if (!dict) {
      module.emitError("kiln-mixed-precision needs the module attribute '")
          << kPrecisionAttr << "'";
      return signalPassFailure();
    }
    FailureOr<Type> param = parseDtype(module, dict, "param");
    FailureOr<Type> reduce = parseDtype(module, dict, "reduce");
    if (failed(param) || failed(reduce))
      return signalPassFailure();
    if (param->isF32() && reduce->isF32())
      return;
    for (auto func : module.getOps<func::FuncOp>()) {
      bool hasParams = llvm::any_of(func.getArguments(), [&](BlockArgument a) {
        return func.getArgAttr(a.getArgNumber(), KilnDialect::kParamAttrName);
      });
      if (hasParams)
        applyPolicy(func, *param, *reduce);
    }
  }
};
} // namespace
