//===- KilnGradients.cpp - Reverse-mode rules of the kiln ops -------------===//
//
// DifferentiableOpInterface for every forward op: given the gradients of an
// op's results, build the gradients of its operands. Forward values a rule
// needs (the input of a linear, the logsumexp of attention) are passed to
// the backward op as operands: they are the saved residuals.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kiln/IR/KilnOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace kiln;

SmallVector<Value> EmbeddingOp::buildGradients(OpBuilder &b,
                                               ArrayRef<Value> grads) {
  Value table = EmbeddingGradOp::create(
      b, getLoc(), getTable().getType(), grads[0], getTokens(), getParam(),
      getVocabStartAttr(), getVocabSizeAttr());
  return {table, Value()};
}

SmallVector<Value> RMSNormOp::buildGradients(OpBuilder &b,
                                             ArrayRef<Value> grads) {
  auto op = RMSNormGradOp::create(b, getLoc(), getInput().getType(),
                                  getWeight().getType(), grads[0], getInput(),
                                  getWeight(), getEpsAttr());
  return {op.getInputGrad(), op.getWeightGrad()};
}

SmallVector<Value> LinearOp::buildGradients(OpBuilder &b,
                                            ArrayRef<Value> grads) {
  Value input = LinearGradInputOp::create(b, getLoc(), getInput().getType(),
                                          getRole(), grads[0], getWeight(),
                                          getParam());
  Value weight = LinearGradWeightOp::create(b, getLoc(), getWeight().getType(),
                                            getRole(), grads[0], getInput(),
                                            getParam());
  return {input, weight};
}

SmallVector<Value> RopeOp::buildGradients(OpBuilder &b,
                                          ArrayRef<Value> grads) {
  return {RopeGradOp::create(b, getLoc(), getType(), grads[0], getThetaAttr())};
}

SmallVector<Value> AttentionOp::buildGradients(OpBuilder &b,
                                               ArrayRef<Value> grads) {
  // The logsumexp is a by-product for the backward: nothing differentiates
  // through it.
  auto op = AttentionGradOp::create(
      b, getLoc(), getQuery().getType(), getKey().getType(),
      getValue().getType(), grads[0], getQuery(), getKey(), getValue(),
      getResult(), getLogsumexp(), getCausalAttr(), getScaleAttr());
  return {op.getQueryGrad(), op.getKeyGrad(), op.getValueGrad()};
}

SmallVector<Value> SiluOp::buildGradients(OpBuilder &b,
                                          ArrayRef<Value> grads) {
  return {SiluGradOp::create(b, getLoc(), grads[0], getInput())};
}

SmallVector<Value> MulOp::buildGradients(OpBuilder &b, ArrayRef<Value> grads) {
  return {MulOp::create(b, getLoc(), grads[0], getRhs()),
          MulOp::create(b, getLoc(), grads[0], getLhs())};
}

SmallVector<Value> AddOp::buildGradients(OpBuilder &b, ArrayRef<Value> grads) {
  return {grads[0], grads[0]};
}

SmallVector<Value> ReshapeOp::buildGradients(OpBuilder &b,
                                             ArrayRef<Value> grads) {
  return {ReshapeOp::create(b, getLoc(), getInput().getType(), grads[0])};
}

SmallVector<Value> TransposeOp::buildGradients(OpBuilder &b,
                                               ArrayRef<Value> grads) {
  ArrayRef<int64_t> perm = getPermutation();
  SmallVector<int64_t> inverse(perm.size());
  for (auto [i, p] : llvm::enumerate(perm))
    inverse[p] = i;
  return {TransposeOp::create(b, getLoc(), getInput().getType(), grads[0],
                              inverse)};
}

SmallVector<Value> CrossEntropyOp::buildGradients(OpBuilder &b,
                                                  ArrayRef<Value> grads) {
  return {CrossEntropyGradOp::create(b, getLoc(), getLogits().getType(),
                                     grads[0], getLogits(), getTargets()),
          Value()};
}

SmallVector<Value> CastOp::buildGradients(OpBuilder &b, ArrayRef<Value> grads) {
  return {CastOp::create(b, getLoc(), getInput().getType(), grads[0])};
}

//===----------------------------------------------------------------------===//
// Collectives (tensor parallel in @forward_loss, docs/tp.md)
//
// Megatron's convention: a value produced by an all-gather feeds a
// computation that each rank does on its own part (column-parallel heads,
// the rank's vocabulary slice), so each rank's gradient of it is a partial
// sum and the dual reduce-scatter (`sum`) adds the partials up; a value
// produced by an all-reduce feeds a computation every rank repeats, so each
// rank's gradient of it is already the whole one. A start's gradient is a
// start + wait of the dual collective over the same axis.
//===----------------------------------------------------------------------===//

namespace {
/// `grad / ranks`, for the `mean` reductions.
Value divideByRanks(OpBuilder &b, Location loc, Value grad, int64_t ranks) {
  if (ranks == 1)
    return grad;
  auto type = cast<RankedTensorType>(grad.getType());
  Value scale = arith::ConstantOp::create(
      b, loc,
      DenseElementsAttr::get(
          type, b.getFloatAttr(type.getElementType(), 1.0 / ranks)));
  return MulOp::create(b, loc, grad, scale);
}
} // namespace

SmallVector<Value> WaitOp::buildGradients(OpBuilder &b, ArrayRef<Value> grads) {
  return {grads[0]};
}

SmallVector<Value> AllGatherStartOp::buildGradients(OpBuilder &b,
                                                    ArrayRef<Value> grads) {
  // Token ids have no gradient.
  if (!isa<FloatType>(getShard().getType().getElementType()))
    return {Value()};
  auto start = ReduceScatterStartOp::create(
      b, getLoc(), getShard().getType(), grads[0], getAxisAttr(),
      getRanksAttr(), b.getStringAttr("sum"), getGroupAttr());
  return {WaitOp::create(b, getLoc(), start.getType(), start)};
}

SmallVector<Value> ReduceScatterStartOp::buildGradients(OpBuilder &b,
                                                        ArrayRef<Value> grads) {
  auto start =
      AllGatherStartOp::create(b, getLoc(), getInput().getType(), grads[0],
                               getAxisAttr(), getRanksAttr(), getGroupAttr());
  Value gathered = WaitOp::create(b, getLoc(), start.getType(), start);
  if (getReduction() == "mean")
    return {divideByRanks(b, getLoc(), gathered, getRanks())};
  return {gathered};
}

SmallVector<Value> AllReduceStartOp::buildGradients(OpBuilder &b,
                                                    ArrayRef<Value> grads) {
  // The max is the softmax's shift: a constant of the loss.
  if (getReduction() == "max")
    return {Value()};
  if (getReduction() == "mean")
    return {divideByRanks(b, getLoc(), grads[0], getRanks())};
  return {grads[0]};
}

SmallVector<Value> SendRecvStartOp::buildGradients(OpBuilder &b,
                                                   ArrayRef<Value> grads) {
  // What a rank received came from `shift` places before it: its gradient
  // goes back there, `ranks - shift` places along the ring.
  auto start = SendRecvStartOp::create(
      b, getLoc(), getInput().getType(), grads[0], getAxisAttr(),
      getRanksAttr(), b.getI64IntegerAttr(getRanks() - getShift()));
  return {WaitOp::create(b, getLoc(), start.getType(), start)};
}

// A pipeline stage's output goes to the next stage, whose backward sends
// back its gradient; what a stage received, its gradient goes back to.
SmallVector<Value> PipeSendOp::buildGradients(OpBuilder &b, ArrayRef<Value>) {
  return {PipeRecvOp::create(b, getLoc(), getInput().getType(),
                             PipeDirection::gradient, getStage(), getStages())};
}

SmallVector<Value> PipeRecvOp::buildGradients(OpBuilder &b,
                                              ArrayRef<Value> grads) {
  PipeSendOp::create(b, getLoc(), grads[0], PipeDirection::gradient, getStage(),
                     getStages());
  return {};
}

SmallVector<Value> FlattenOp::buildGradients(OpBuilder &b,
                                             ArrayRef<Value> grads) {
  SmallVector<Value> parts;
  for (auto [part, offset] : llvm::zip(getParts(), getOffsets()))
    parts.push_back(UnflattenOp::create(b, getLoc(), part.getType(), grads[0],
                                        b.getI64IntegerAttr(offset)));
  return parts;
}

SmallVector<Value> UnflattenOp::buildGradients(OpBuilder &b,
                                               ArrayRef<Value> grads) {
  return {FlattenOp::create(b, getLoc(), getFlat().getType(),
                            ValueRange{grads[0]},
                            b.getDenseI64ArrayAttr({getOffset()}))};
}
