//===- KilnFp8Ops.cpp - Verifiers of the FP8 ops --------------------------===//

#include "kiln/Dialect/Kiln/IR/KilnOps.h"
#include "KilnVerifiers.h"

using namespace mlir;
using namespace kiln;
using kiln::detail::shapeOf;
using kiln::detail::tensorOf;

namespace {
/// `scale` is rank-0, or holds one value per row of the rank-2 `operand`.
bool scalesRows(Value scale, Value operand) {
  RankedTensorType s = tensorOf(scale);
  return s.getRank() == 0 ||
         (s.getRank() == 1 && s.getDimSize(0) == tensorOf(operand).getDimSize(0));
}

/// shard_amax_c2: the weights lie inside the flat buffer of `ranks` shards
/// of `shard`, without overlapping; one weight per element of `perWeight`.
LogicalResult checkWeights(Operation *op, Value shard, Value perWeight,
                           ArrayRef<int64_t> offsets, ArrayRef<int64_t> sizes,
                           int64_t ranks) {
  RankedTensorType s = tensorOf(shard), w = tensorOf(perWeight);
  if (s.getRank() != 1 || w.getRank() != 1)
    return op->emitOpError("needs a rank-1 shard and one value per weight");
  if (offsets.size() != sizes.size() ||
      static_cast<int64_t>(offsets.size()) != w.getDimSize(0))
    return op->emitOpError("needs one offset and one size per weight, got ")
           << offsets.size() << " offsets and " << sizes.size()
           << " sizes for " << w.getDimSize(0) << " weights";
  if (ranks < 1)
    return op->emitOpError("needs at least one rank, got ") << ranks;
  int64_t end = 0, total = ranks * s.getDimSize(0);
  for (auto [offset, size] : llvm::zip(offsets, sizes)) {
    if (offset < end || size < 1 || offset + size > total)
      return op->emitOpError("weight at [")
             << offset << ", " << offset + size
             << ") overlaps another or lies outside the flat buffer of "
             << total;
    end = offset + size;
  }
  return success();
}
} // namespace

LogicalResult ShardAmaxOp::verify() {
  return checkWeights(*this, getShard(), getResult(), getOffsets(),
                      getSizes(), getRanks());
}

LogicalResult ShardQuantizeOp::verify() {
  if (tensorOf(getCodes()).getShape() != tensorOf(getShard()).getShape() ||
      !isa<Float8E4M3FNType>(tensorOf(getCodes()).getElementType()))
    return emitOpError("codes must be e4m3 in the shard's shape");
  if (tensorOf(getAmax()).getShape() != tensorOf(getScales()).getShape())
    return emitOpError("needs one scale per amax");
  return checkWeights(*this, getShard(), getAmax(), getOffsets(), getSizes(),
                      getRanks());
}

LogicalResult QuantizeOp::verify() {
  RankedTensorType in = tensorOf(getInput());
  if (in.getShape() != tensorOf(getResult()).getShape())
    return emitOpError("result must have the shape of the input ")
           << shapeOf(getInput()) << ", got " << shapeOf(getResult());
  RankedTensorType scale = tensorOf(getScale());
  if (!isRowwise()) {
    if (scale.getRank() != 0)
      return emitOpError("a tensorwise scale (with an amax operand) must be "
                         "rank-0, got ")
             << shapeOf(getScale());
    return success();
  }
  if (in.getRank() < 1 || scale.getShape() != in.getShape().drop_back())
    return emitOpError("a rowwise scale must have the input's shape without "
                       "its last dimension, got ")
           << shapeOf(getScale()) << " for an input of " << shapeOf(getInput());
  return success();
}

LogicalResult ScaledMatmulOp::verify() {
  RankedTensorType a = tensorOf(getA()), b = tensorOf(getB()),
                   r = tensorOf(getResult());
  if (a.getRank() != 2 || b.getRank() != 2 || r.getRank() != 2 ||
      a.getDimSize(1) != b.getDimSize(1) ||
      r.getDimSize(0) != a.getDimSize(0) || r.getDimSize(1) != b.getDimSize(0))
    return emitOpError("needs a [M, K], b [N, K] and a result [M, N]; got ")
           << shapeOf(getA()) << ", " << shapeOf(getB()) << " and "
           << shapeOf(getResult());
  if (!scalesRows(getAScale(), getA()) || !scalesRows(getBScale(), getB()))
    return emitOpError("each scale must be rank-0 or have one value per row "
                       "of its operand");
  if (isa<Float8E5M2Type>(a.getElementType()) &&
      isa<Float8E5M2Type>(b.getElementType()))
    return emitOpError("cannot multiply two f8E5M2 operands");
  StringRef gemm = getGemm();
  if (gemm != "output" && gemm != "grad_input" && gemm != "grad_weight")
    return emitOpError("gemm must be output, grad_input or grad_weight, got '")
           << gemm << "'";
  return success();
}

namespace {
LogicalResult checkHistory(Operation *op, Value history) {
  RankedTensorType h = tensorOf(history);
  if (h.getRank() != 1 || h.getDimSize(0) < 1)
    return op->emitOpError("needs a rank-1, non-empty history, got ")
           << shapeOf(history);
  return success();
}
} // namespace

LogicalResult DelayedAmaxOp::verify() {
  if (getAlgo() != "max" && getAlgo() != "most_recent")
    return emitOpError("algo must be 'max' or 'most_recent', got '")
           << getAlgo() << "'";
  return checkHistory(*this, getHistory());
}

LogicalResult AmaxHistoryUpdateOp::verify() {
  return checkHistory(*this, getHistory());
}
