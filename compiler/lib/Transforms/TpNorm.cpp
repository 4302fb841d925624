//===- TpNorm.cpp - The gradient norm's squares over the tp axis ----------===//

#include "kiln/Transforms/TpNorm.h"

#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"

using namespace mlir;
using namespace kiln;

Value kiln::buildTpSquares(OpBuilder &b, Location loc, ValueRange sharded,
                           ValueRange replicated, int64_t tp) {
  Value total;
  if (!sharded.empty()) {
    Value squares = GradNormOp::create(b, loc, sharded, true);
    auto start = AllReduceStartOp::create(
        b, loc, squares, MeshAxisAttr::get(b.getContext(), MeshAxis::tp),
        b.getI64IntegerAttr(tp), b.getStringAttr("sum"));
    total = WaitOp::create(b, loc, start.getResult());
  }
  if (!replicated.empty()) {
    Value squares = GradNormOp::create(b, loc, replicated, true);
    total = total ? AddOp::create(b, loc, total, squares).getResult() : squares;
  }
  return total;
}

FailureOr<TpNorm> kiln::matchTpNorm(Value norm, int64_t tp) {
  TpNorm parts;
  auto sqrt = norm.getDefiningOp<SqrtOp>();
  if (!sqrt)
    return failure();
  parts.ops.push_back(sqrt);
  SmallVector<Value, 2> terms = {sqrt.getInput()};
  if (auto add = sqrt.getInput().getDefiningOp<AddOp>()) {
    if (!add->hasOneUse())
      return failure();
    parts.ops.push_back(add);
    terms = {add.getLhs(), add.getRhs()};
  }
  // Each term: the sharded squares' tp sum (a wait of an all-reduce) or the
  // replicated squares.
  for (Value term : terms) {
    if (!term.hasOneUse())
      return failure();
    bool summed = false;
    if (auto wait = term.getDefiningOp<WaitOp>()) {
      auto start = wait.getPending().getDefiningOp<AllReduceStartOp>();
      if (!start || !start->hasOneUse() || start.getAxis() != MeshAxis::tp ||
          static_cast<int64_t>(start.getRanks()) != tp ||
          start.getReduction() != "sum" || !start.getInput().hasOneUse())
        return failure();
      parts.ops.append({wait, start});
      term = start.getInput();
      summed = true;
    }
    auto squares = term.getDefiningOp<GradNormOp>();
    if (!squares || !squares.getSquared())
      return failure();
    parts.ops.push_back(squares);
    llvm::append_range(summed ? parts.sharded : parts.replicated,
                       squares.getGrads());
  }
  return parts;
}
