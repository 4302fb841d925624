//===- Fp8Tp.cpp - Tensorwise FP8 scales over the tp axis -----------------===//

#include "kiln/Transforms/Fp8Tp.h"

#include "kiln/Dialect/Kiln/IR/KilnDialect.h"

using namespace mlir;
using namespace kiln;

bool kiln::isTpReplicated(Value v) {
  while (Operation *def = v.getDefiningOp()) {
    if (isa<ReshapeOp, TransposeOp, CastOp>(def)) {
      v = def->getOperand(0);
      continue;
    }
    auto wait = dyn_cast<WaitOp>(def);
    auto gather =
        wait ? wait.getPending().getDefiningOp<AllGatherStartOp>() : nullptr;
    return gather && gather.getAxis() == MeshAxis::tp;
  }
  return false;
}

Value kiln::buildTpAmax(OpBuilder &b, Location loc, Value amax, int64_t tp) {
  auto start = AllReduceStartOp::create(
      b, loc, amax, MeshAxisAttr::get(b.getContext(), MeshAxis::tp),
      b.getI64IntegerAttr(tp), b.getStringAttr("max"));
  return WaitOp::create(b, loc, start.getResult());
}

AmaxOp kiln::amaxBehind(Value amax, bool *reduced) {
  if (reduced)
    *reduced = false;
  if (auto op = amax.getDefiningOp<AmaxOp>())
    return op;
  auto wait = amax.getDefiningOp<WaitOp>();
  auto start =
      wait ? wait.getPending().getDefiningOp<AllReduceStartOp>() : nullptr;
  if (!start || start.getAxis() != MeshAxis::tp ||
      start.getReduction() != "max" || !start->hasOneUse())
    return nullptr;
  auto op = start.getInput().getDefiningOp<AmaxOp>();
  if (op && reduced)
    *reduced = true;
  return op;
}
