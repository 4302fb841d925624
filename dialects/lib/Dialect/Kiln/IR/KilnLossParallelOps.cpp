//===- KilnLossParallelOps.cpp - Verifiers and rules of loss parallel -----===//
//
// The ops of KilnLossParallelOps.td: their shape rules and the reverse-mode
// rules of the two that the loss differentiates through.
//
//===----------------------------------------------------------------------===//

#include "KilnVerifiers.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace kiln;
using kiln::detail::shapeOf;

namespace {
/// vocab_parallel_c1 and c2: the slice's attributes, and `rows` (max,
/// targets) shaped like the logits without their last dim.
LogicalResult verifySlice(Operation *op, Value logits, ValueRange rows,
                          int64_t start, int64_t size) {
  RankedTensorType type = tensorOf(logits);
  if (type.getRank() < 1)
    return op->emitOpError("logits must have a vocabulary dim");
  if (start < 0 || start >= size)
    return op->emitOpError("vocab_start ")
           << start << " must lie in [0, vocab_size = " << size << ")";
  for (Value v : rows)
    if (tensorOf(v).getShape() != type.getShape().drop_back())
      return op->emitOpError("operand ")
             << shapeOf(v) << " must be the logits' shape " << shapeOf(logits)
             << " without the vocabulary dim";
  return success();
}

/// `stats` is [..., 2] and `rows` its shape without the last dim.
LogicalResult verifyStats(Operation *op, Value stats, Value rows) {
  ArrayRef<int64_t> shape = tensorOf(stats).getShape();
  if (shape.empty() || shape.back() != 2 ||
      shape.drop_back() != tensorOf(rows).getShape())
    return op->emitOpError("statistics ")
           << shapeOf(stats) << " must be " << shapeOf(rows) << " plus [2]";
  return success();
}
} // namespace

LogicalResult IndexToFloatOp::verify() {
  if (tensorOf(getInput()).getShape() != tensorOf(getResult()).getShape())
    return emitOpError("shape changes from ")
           << shapeOf(getInput()) << " to " << shapeOf(getResult());
  return success();
}

LogicalResult VocabParallelMaxOp::verify() {
  return verifySlice(*this, getLogits(), getResult(), getVocabStart(),
                     getVocabSize());
}

LogicalResult VocabParallelStatsOp::verify() {
  if (failed(verifySlice(*this, getLogits(), {getMax(), getTargets()},
                         getVocabStart(), getVocabSize())))
    return failure();
  return verifyStats(*this, getResult(), getMax());
}

LogicalResult VocabParallelStatsGradOp::verify() {
  if (failed(verifySlice(*this, getLogits(), {getMax(), getTargets()},
                         getVocabStart(), getVocabSize())))
    return failure();
  return verifyStats(*this, getGrad(), getMax());
}

LogicalResult VocabParallelLossOp::verify() {
  return verifyStats(*this, getStats(), getMax());
}

SmallVector<Value> VocabParallelStatsOp::buildGradients(OpBuilder &b,
                                                        ArrayRef<Value> grads) {
  // The max is the shift of the exponentials: the loss does not depend on
  // it (log(sum) + max), so it gets no gradient; nor do the targets.
  Value logits = VocabParallelStatsGradOp::create(
      b, getLoc(), grads[0], getLogits(), getMax(), getTargets(),
      getVocabStartAttr(), getVocabSizeAttr());
  return {logits, Value(), Value()};
}

SmallVector<Value> VocabParallelLossOp::buildGradients(OpBuilder &b,
                                                       ArrayRef<Value> grads) {
  return {VocabParallelLossGradOp::create(b, getLoc(), grads[0], getStats()),
          Value()};
}
