//===- KilnFusionOps.cpp - Fused groups and what may join them ------------===//

#include "kiln/Dialect/Kiln/IR/KilnOps.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace kiln;

namespace {
/// [d0, ..., dn] as (d0 * ... * dn-1, dn); a scalar is one point.
std::pair<int64_t, int64_t> rowsAndCols(Type type) {
  auto t = cast<RankedTensorType>(type);
  if (t.getRank() == 0)
    return {1, 1};
  int64_t cols = t.getShape().back();
  return {cols == 0 ? 0 : t.getNumElements() / cols, cols};
}
} // namespace

std::optional<std::pair<int64_t, int64_t>> kiln::fusionSpace(Operation *op) {
  if (isa<AddOp, MulOp, SiluOp, SiluGradOp, CastOp, SqrtOp, DivideOp,
          MaximumOp>(op))
    return rowsAndCols(op->getResult(0).getType());
  if (auto norm = dyn_cast<RMSNormOp>(op))
    return rowsAndCols(norm.getInput().getType());
  if (auto grad = dyn_cast<RMSNormGradOp>(op))
    return rowsAndCols(grad.getInput().getType());
  if (isa<AmaxOp, QuantizeOp>(op))
    return rowsAndCols(op->getOperand(0).getType());
  // Reshaping [..., c] to [..., c] keeps every element's row and column.
  if (auto r = dyn_cast<ReshapeOp>(op)) {
    auto from = cast<RankedTensorType>(r.getInput().getType());
    auto to = cast<RankedTensorType>(r.getResult().getType());
    // Token ids (i32) are moved by the layout op, never in a group.
    if (from.getRank() > 0 && to.getRank() > 0 &&
        from.getShape().back() == to.getShape().back() &&
        isa<FloatType>(from.getElementType()))
      return rowsAndCols(from);
  }
  if (auto t = dyn_cast<TransposeOp>(op)) {
    ArrayRef<int64_t> perm = t.getPermutation();
    if (perm.size() == 2 && perm[0] == 1 && perm[1] == 0)
      return rowsAndCols(t.getInput().getType());
  }
  return std::nullopt;
}

bool kiln::readableInGroup(OpResult result) {
  Operation *op = result.getOwner();
  if (isa<TransposeOp, AmaxOp>(op))
    return false;
  if (auto grad = dyn_cast<RMSNormGradOp>(op))
    return result == grad.getInputGrad();
  return true;
}

std::pair<int64_t, int64_t> FusedGroupOp::getIterationSpace() {
  for (Operation &op : getBody().front().without_terminator())
    if (auto space = fusionSpace(&op))
      return *space;
  return {0, 0};
}

LogicalResult FusedGroupOp::verify() {
  Block &body = getBody().front();
  if (body.getArgumentTypes() != getInputs().getTypes())
    return emitOpError("block arguments must have the types of the inputs");
  auto yield = dyn_cast<YieldOp>(body.getTerminator());
  if (!yield)
    return emitOpError("body must end with kiln.yield");
  if (yield.getValues().getTypes() != getResultTypes())
    return emitOpError("kiln.yield must have the types of the results");
  std::pair<int64_t, int64_t> space = getIterationSpace();
  for (Operation &op : body.without_terminator()) {
    std::optional<std::pair<int64_t, int64_t>> s = fusionSpace(&op);
    if (!s)
      return emitOpError("cannot fuse '") << op.getName() << "'";
    if (*s != space)
      return op.emitOpError("iterates over ")
             << s->first << "x" << s->second << " points, the group over "
             << space.first << "x" << space.second;
    for (Value operand : op.getOperands())
      if (auto r = dyn_cast<OpResult>(operand); r && !readableInGroup(r))
        return op.emitOpError("reads a value of its own group that exists "
                              "only after the group has run");
  }
  return success();
}
