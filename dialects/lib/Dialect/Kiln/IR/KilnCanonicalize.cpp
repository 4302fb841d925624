//===- KilnCanonicalize.cpp - Folders and canonical forms -----------------===//
//
// Layout ops fold away when they do nothing and compose when stacked, so the
// frontend can reshape freely and later passes see one layout op at most.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kiln/IR/KilnOps.h"

#include "mlir/IR/PatternMatch.h"

using namespace mlir;
using namespace kiln;

OpFoldResult ReshapeOp::fold(FoldAdaptor) {
  if (getInput().getType() == getType())
    return getInput();
  return {};
}

namespace {
/// reshape(reshape(x)) -> reshape(x).
struct ComposeReshapes : OpRewritePattern<ReshapeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ReshapeOp op,
                                PatternRewriter &rewriter) const override {
    auto inner = op.getInput().getDefiningOp<ReshapeOp>();
    if (!inner)
      return rewriter.notifyMatchFailure(op, "input is not a reshape");
    rewriter.replaceOpWithNewOp<ReshapeOp>(op, op.getType(), inner.getInput());
    return success();
  }
};

/// transpose(transpose(x, p1), p2) -> transpose(x, p1 o p2).
struct ComposeTransposes : OpRewritePattern<TransposeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(TransposeOp op,
                                PatternRewriter &rewriter) const override {
    auto inner = op.getInput().getDefiningOp<TransposeOp>();
    if (!inner)
      return rewriter.notifyMatchFailure(op, "input is not a transpose");
    ArrayRef<int64_t> outer = op.getPermutation();
    ArrayRef<int64_t> first = inner.getPermutation();
    SmallVector<int64_t> composed;
    for (int64_t p : outer)
      composed.push_back(first[p]);
    rewriter.replaceOpWithNewOp<TransposeOp>(op, op.getType(), inner.getInput(),
                                             composed);
    return success();
  }
};
} // namespace

void ReshapeOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                            MLIRContext *context) {
  results.add<ComposeReshapes>(context);
}

OpFoldResult TransposeOp::fold(FoldAdaptor) {
  if (llvm::equal(getPermutation(),
                  llvm::seq<int64_t>(0, getPermutation().size())))
    return getInput();
  return {};
}

void TransposeOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                              MLIRContext *context) {
  results.add<ComposeTransposes>(context);
}

OpFoldResult CastOp::fold(FoldAdaptor) {
  if (getInput().getType() == getType())
    return getInput();
  return {};
}
