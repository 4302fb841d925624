//===- KilnGradOps.cpp - Verifiers of the backward ops --------------------===//

#include "KilnVerifiers.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"

using namespace mlir;
using namespace kiln;
using kiln::detail::shapeOf;
using kiln::detail::shapeStr;
using kiln::detail::tensorOf;

LogicalResult EmbeddingGradOp::verify() {
  SmallVector<int64_t> expected(tensorOf(getTokens()).getShape());
  RankedTensorType grad = tensorOf(getGrad());
  RankedTensorType result = tensorOf(getResult());
  expected.push_back(grad.getShape().back());
  if (grad.getShape() != ArrayRef<int64_t>(expected))
    return emitOpError("grad shape must be tokens' shape plus [dim], got ")
           << shapeOf(getGrad()) << " for tokens " << shapeOf(getTokens());
  Type element = grad.getElementType();
  bool widened =
      result.getElementType().isF32() && element.getIntOrFloatBitWidth() < 32;
  if (result.getRank() != 2 || result.getDimSize(1) != expected.back() ||
      (result.getElementType() != element && !widened)) {
    InFlightDiagnostic diag = emitOpError("result must be [vocab, ")
                              << expected.back() << "] of " << element;
    if (element.getIntOrFloatBitWidth() < 32)
      diag << " or f32";
    return diag << ", got " << result;
  }
  return detail::verifyVocabSlice(*this, getVocabStart(), getVocabSize());
}

LogicalResult RMSNormGradOp::verify() {
  return detail::verifyRMSNorm(*this, getInput(), getWeight(),
                               getEps().convertToDouble());
}

LogicalResult LinearGradInputOp::verify() {
  RankedTensorType grad = tensorOf(getGrad());
  RankedTensorType weight = tensorOf(getWeight());
  if (grad.getRank() < 2 || weight.getRank() != 2 ||
      grad.getShape().back() != weight.getDimSize(0))
    return emitOpError("grad ")
           << shapeOf(getGrad()) << " must end in dim 0 of weight "
           << shapeOf(getWeight());
  SmallVector<int64_t> expected(grad.getShape().drop_back());
  expected.push_back(weight.getDimSize(1));
  RankedTensorType result = tensorOf(getResult());
  if (result.getShape() != ArrayRef<int64_t>(expected) ||
      result.getElementType() != grad.getElementType() ||
      weight.getElementType() != grad.getElementType())
    return emitOpError("result must be ")
           << shapeStr(expected) << " with grad, weight and result of one "
           << "element type";
  return success();
}

LogicalResult LinearGradWeightOp::verify() {
  RankedTensorType grad = tensorOf(getGrad());
  RankedTensorType input = tensorOf(getInput());
  if (grad.getRank() < 2 || input.getRank() != grad.getRank() ||
      grad.getShape().drop_back() != input.getShape().drop_back())
    return emitOpError("grad ")
           << shapeOf(getGrad()) << " and input " << shapeOf(getInput())
           << " must agree in their leading dims";
  SmallVector<int64_t> expected = {grad.getShape().back(),
                                   input.getShape().back()};
  RankedTensorType result = tensorOf(getResult());
  if (result.getShape() != ArrayRef<int64_t>(expected) ||
      result.getElementType() != grad.getElementType() ||
      input.getElementType() != grad.getElementType())
    return emitOpError("result must be ")
           << shapeStr(expected) << " with grad, input and result of one "
           << "element type";
  return success();
}

LogicalResult RopeGradOp::verify() {
  return detail::verifyRope(*this, getGrad(), getTheta().convertToDouble());
}

LogicalResult AttentionGradOp::verify() {
  return detail::verifyAttention(*this, getQuery(), getKey(), getValue(),
                                 getCausal(), getLogsumexp(),
                                 getScale().convertToDouble());
}

LogicalResult CrossEntropyGradOp::verify() {
  return detail::verifyCrossEntropy(*this, getLogits(), getTargets());
}
