//===- KilnOps.cpp - Verifiers of the kiln ops ----------------------------===//
//
// Every rule checked here is labelled in KilnOps.td; messages say what was
// expected and what was found, with shapes written as [d0, d1, ...].
//
//===----------------------------------------------------------------------===//

#include "KilnVerifiers.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace kiln;

using kiln::detail::shapeOf;
using kiln::detail::shapeStr;
using kiln::detail::tensorOf;

LogicalResult EmbeddingOp::verify() {
  RankedTensorType table = tensorOf(getTable());
  if (table.getRank() != 2)
    return emitOpError("table must have rank 2 [vocab, dim], got ")
           << shapeOf(getTable());
  SmallVector<int64_t> expected(tensorOf(getTokens()).getShape());
  expected.push_back(table.getDimSize(1));
  if (tensorOf(getResult()).getShape() != ArrayRef<int64_t>(expected))
    return emitOpError("result shape must be ")
           << shapeStr(expected) << " (tokens shape ++ [dim]), got "
           << shapeOf(getResult());
  if (tensorOf(getResult()).getElementType() != table.getElementType())
    return emitOpError("result element type must be the table's (")
           << table.getElementType() << "), got "
           << tensorOf(getResult()).getElementType();
  return detail::verifyVocabSlice(*this, getVocabStart(), getVocabSize());
}

LogicalResult kiln::detail::verifyVocabSlice(Operation *op,
                                             std::optional<int64_t> start,
                                             std::optional<int64_t> size) {
  if (start.has_value() != size.has_value())
    return op->emitOpError("vocab_start and vocab_size go together");
  if (start && (*start < 0 || *start >= *size))
    return op->emitOpError("vocab_start ")
           << *start << " must lie in [0, vocab_size = " << *size << ")";
  return success();
}

LogicalResult kiln::detail::verifyRMSNorm(Operation *op, Value inputV,
                                          Value weightV, double eps) {
  RankedTensorType input = tensorOf(inputV);
  RankedTensorType weight = tensorOf(weightV);
  if (input.getRank() < 1 || weight.getRank() != 1 ||
      weight.getDimSize(0) != input.getShape().back())
    return op->emitOpError("weight must have shape [")
           << (input.getRank() ? input.getShape().back() : 0)
           << "] (the last dim of the input), got " << shapeOf(weightV);
  if (weight.getElementType() != input.getElementType())
    return op->emitOpError("weight element type ")
           << weight.getElementType() << " differs from the input's "
           << input.getElementType();
  if (!(eps > 0.0))
    return op->emitOpError("eps must be positive, got ") << eps;
  return success();
}

LogicalResult RMSNormOp::verify() {
  return detail::verifyRMSNorm(*this, getInput(), getWeight(),
                               getEps().convertToDouble());
}

LogicalResult LinearOp::verify() {
  RankedTensorType input = tensorOf(getInput());
  RankedTensorType weight = tensorOf(getWeight());
  if (input.getRank() < 2)
    return emitOpError("input must have rank >= 2, got ")
           << shapeOf(getInput());
  if (weight.getRank() != 2)
    return emitOpError("weight must have rank 2 [out, in], got ")
           << shapeOf(getWeight());
  int64_t k = input.getShape().back();
  if (weight.getDimSize(1) != k)
    return emitOpError("contraction dims differ: input ")
           << shapeOf(getInput()) << " has " << k << ", weight "
           << shapeOf(getWeight()) << " has " << weight.getDimSize(1);
  SmallVector<int64_t> expected(input.getShape().drop_back());
  expected.push_back(weight.getDimSize(0));
  if (tensorOf(getResult()).getShape() != ArrayRef<int64_t>(expected))
    return emitOpError("result shape must be ")
           << shapeStr(expected) << ", got " << shapeOf(getResult());
  Type elem = input.getElementType();
  if (weight.getElementType() != elem ||
      tensorOf(getResult()).getElementType() != elem)
    return emitOpError("input, weight and result must share one element "
                       "type, got ")
           << elem << ", " << weight.getElementType() << ", "
           << tensorOf(getResult()).getElementType();
  return success();
}

LogicalResult kiln::detail::verifyRope(Operation *op, Value inputV,
                                       double theta) {
  RankedTensorType input = tensorOf(inputV);
  if (input.getRank() != 4)
    return op->emitOpError("input must have rank 4 [batch, seq, heads, "
                           "head_dim], got ")
           << shapeOf(inputV);
  if (input.getDimSize(3) % 2 != 0)
    return op->emitOpError("head dim must be even, got ")
           << input.getDimSize(3);
  if (!(theta > 1.0))
    return op->emitOpError("theta must be greater than 1, got ") << theta;
  return success();
}

LogicalResult RopeOp::verify() {
  return detail::verifyRope(*this, getInput(), getTheta().convertToDouble());
}

LogicalResult kiln::detail::verifyAttention(Operation *op, Value query,
                                            Value key, Value value,
                                            bool causal, Value logsumexp,
                                            double scale) {
  auto emitOpError = [&](const Twine &msg) { return op->emitOpError(msg); };
  // attention_scale_c1: the softmax scale multiplies q·k in f32; NaN,
  // zero, a negative or a scale past 1e4 (1/sqrt(head_dim) is at most 1)
  // is a corrupted module, not a model.
  if (!(scale > 0.0 && scale <= 1e4))
    return op->emitOpError("scale must be in (0, 1e4], got ") << scale;
  RankedTensorType q = tensorOf(query);
  RankedTensorType k = tensorOf(key);
  if (q.getRank() != 4 || k.getRank() != 4 || tensorOf(value).getRank() != 4)
    return emitOpError("query, key and value must have rank 4 [batch, seq, "
                       "heads, head_dim]");
  if (k != tensorOf(value))
    return emitOpError("key ") << shapeOf(key) << " and value "
                               << shapeOf(value) << " must have one type";
  if (q.getElementType() != k.getElementType())
    return emitOpError("query and key element types differ: ")
           << q.getElementType() << " vs " << k.getElementType();
  if (q.getDimSize(0) != k.getDimSize(0) || q.getDimSize(3) != k.getDimSize(3))
    return emitOpError("query ") << shapeOf(query) << " and key "
                                 << shapeOf(key)
                                 << " must agree in batch and head dim";
  int64_t hq = q.getDimSize(2), hkv = k.getDimSize(2);
  if (hkv == 0 || hq % hkv != 0)
    return emitOpError("key/value heads (")
           << hkv << ") must divide query heads (" << hq << ")";
  if (causal && q.getDimSize(1) != k.getDimSize(1))
    return emitOpError("causal attention needs equal query and key "
                       "sequence lengths, got ")
           << q.getDimSize(1) << " and " << k.getDimSize(1);
  SmallVector<int64_t> lse = {q.getDimSize(0), hq, q.getDimSize(1)};
  RankedTensorType lseType = tensorOf(logsumexp);
  if (lseType.getShape() != ArrayRef<int64_t>(lse) ||
      !lseType.getElementType().isF32())
    return emitOpError("logsumexp must be tensor of shape ")
           << shapeStr(lse) << " [batch, heads, seq] and f32, got "
           << lseType;
  return success();
}

LogicalResult AttentionOp::verify() {
  return detail::verifyAttention(*this, getQuery(), getKey(), getValue(),
                                 getCausal(), getLogsumexp(),
                                 getScale().convertToDouble());
}

LogicalResult ReshapeOp::verify() {
  RankedTensorType in = tensorOf(getInput());
  RankedTensorType out = tensorOf(getResult());
  if (in.getElementType() != out.getElementType())
    return emitOpError("element type changes from ")
           << in.getElementType() << " to " << out.getElementType();
  if (in.getNumElements() != out.getNumElements())
    return emitOpError("element count changes: ")
           << shapeOf(getInput()) << " has " << in.getNumElements() << ", "
           << shapeOf(getResult()) << " has " << out.getNumElements();
  return success();
}

LogicalResult TransposeOp::verify() {
  RankedTensorType in = tensorOf(getInput());
  ArrayRef<int64_t> perm = getPermutation();
  SmallVector<bool> seen(in.getRank(), false);
  bool valid = static_cast<int64_t>(perm.size()) == in.getRank();
  for (int64_t p : perm) {
    if (!valid || p < 0 || p >= in.getRank() || seen[p]) {
      valid = false;
      break;
    }
    seen[p] = true;
  }
  if (!valid)
    return emitOpError("permutation must be a permutation of [0, ")
           << in.getRank() << ")";
  SmallVector<int64_t> expected;
  for (int64_t p : perm)
    expected.push_back(in.getDimSize(p));
  RankedTensorType out = tensorOf(getResult());
  if (out.getShape() != ArrayRef<int64_t>(expected) ||
      out.getElementType() != in.getElementType())
    return emitOpError("result must be ")
           << RankedTensorType::get(expected, in.getElementType()) << ", got "
           << out;
  return success();
}

LogicalResult kiln::detail::verifyCrossEntropy(Operation *op, Value logitsV,
                                               Value targetsV) {
  RankedTensorType logits = tensorOf(logitsV);
  RankedTensorType targets = tensorOf(targetsV);
  if (logits.getRank() != targets.getRank() + 1 ||
      logits.getShape().drop_back() != targets.getShape())
    return op->emitOpError("logits ")
           << shapeOf(logitsV) << " must be targets' shape "
           << shapeOf(targetsV) << " plus a vocab dim";
  return success();
}

LogicalResult CrossEntropyOp::verify() {
  if (failed(detail::verifyCrossEntropy(*this, getLogits(), getTargets())))
    return failure();
  RankedTensorType result = tensorOf(getResult());
  if (result.getRank() != 0 || !result.getElementType().isF32())
    return emitOpError("result must be tensor<f32>, got ") << result;
  return success();
}

LogicalResult CastOp::verify() {
  if (tensorOf(getInput()).getShape() != tensorOf(getResult()).getShape())
    return emitOpError("shape changes from ")
           << shapeOf(getInput()) << " to " << shapeOf(getResult());
  return success();
}

#define GET_OP_CLASSES
#include "kiln/Dialect/Kiln/IR/KilnOps.cpp.inc"
