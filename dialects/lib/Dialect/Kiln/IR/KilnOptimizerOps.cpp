//===- KilnOptimizerOps.cpp - Verifiers of the optimizer ops --------------===//

#include "KilnVerifiers.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"

using namespace mlir;
using namespace kiln;

LogicalResult GradNormOp::verify() {
  if (getGrads().empty())
    return emitOpError("needs at least one gradient");
  return success();
}

LogicalResult LRScheduleOp::verify() {
  if (getDecay() != "cosine" && getDecay() != "constant")
    return emitOpError("decay must be cosine or constant, got '")
           << getDecay() << "'";
  return success();
}

LogicalResult AdamWOp::verify() {
  double beta1 = getBeta1().convertToDouble();
  double beta2 = getBeta2().convertToDouble();
  if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1))
    return emitOpError("betas must be in [0, 1), got ")
           << beta1 << ", " << beta2;
  if (!(getEps().convertToDouble() > 0))
    return emitOpError("eps must be positive");
  if (!(getWeightDecay().convertToDouble() >= 0) ||
      !(getMaxNorm().convertToDouble() >= 0))
    return emitOpError("weight_decay and max_norm must not be negative");
  return success();
}
