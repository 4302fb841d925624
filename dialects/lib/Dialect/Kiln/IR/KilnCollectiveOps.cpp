//===- KilnCollectiveOps.cpp - Verifiers of the FSDP ops ------------------===//

#include "kiln/Dialect/Kiln/IR/KilnOps.h"

using namespace mlir;
using namespace kiln;

namespace {
/// A rank-1 `small` whose element type `big` shares, `ranks` times shorter.
LogicalResult checkShards(Operation *op, Value small, Value big,
                          int64_t ranks) {
  RankedTensorType s = tensorOf(small), b = tensorOf(big);
  if (ranks < 1)
    return op->emitOpError("needs at least one rank, got ") << ranks;
  if (s.getRank() != 1 || b.getRank() != 1 ||
      s.getElementType() != b.getElementType() ||
      b.getDimSize(0) != ranks * s.getDimSize(0))
    return op->emitOpError("shard and buffer must be rank-1 tensors of one "
                           "element type, the buffer ")
           << ranks << " times as long; got " << s << " and " << b;
  return success();
}

/// collective_axis: `ranks` is the size of `axis` in the module's mesh.
LogicalResult checkAxis(Operation *op, MeshAxis axis, int64_t ranks) {
  MeshAttr mesh = getModuleMesh(op);
  if (!mesh || mesh.getAxisSize(axis) == ranks)
    return success();
  return op->emitOpError("runs over ")
         << ranks << " ranks, but the mesh's " << stringifyMeshAxis(axis)
         << " axis has " << mesh.getAxisSize(axis) << " (" << mesh << ")";
}

LogicalResult checkWaited(Operation *op) {
  if (!op->getResult(0).hasOneUse() ||
      !isa<WaitOp>(*op->getResult(0).getUsers().begin()))
    return op->emitOpError("result must have one user, a kiln.wait");
  return success();
}
} // namespace

LogicalResult AllGatherStartOp::verify() {
  if (failed(checkShards(*this, getShard(), getResult(), getRanks())) ||
      failed(checkAxis(*this, getAxis(), getRanks())))
    return failure();
  return checkWaited(*this);
}

LogicalResult ReduceScatterStartOp::verify() {
  if (failed(checkShards(*this, getResult(), getInput(), getRanks())) ||
      failed(checkAxis(*this, getAxis(), getRanks())))
    return failure();
  if (getReduction() != "sum" && getReduction() != "mean")
    return emitOpError("reduction must be 'sum' or 'mean', got '")
           << getReduction() << "'";
  return checkWaited(*this);
}

LogicalResult AllReduceStartOp::verify() {
  if (getRanks() < 1)
    return emitOpError("needs at least one rank, got ") << getRanks();
  if (failed(checkAxis(*this, getAxis(), getRanks())))
    return failure();
  if (getReduction() != "sum" && getReduction() != "mean" &&
      getReduction() != "max")
    return emitOpError("reduction must be 'sum', 'mean' or 'max', got '")
           << getReduction() << "'";
  return checkWaited(*this);
}

LogicalResult SendRecvStartOp::verify() {
  if (tensorOf(getInput()).getRank() != 1)
    return emitOpError("buffer must be rank 1, got ") << getInput().getType();
  if (getRanks() < 2 || getShift() < 1 || getShift() >= getRanks())
    return emitOpError("shift must be in [1, ranks) with ranks >= 2, got "
                       "shift ")
           << getShift() << " of " << getRanks();
  if (failed(checkAxis(*this, getAxis(), getRanks())))
    return failure();
  return checkWaited(*this);
}

LogicalResult UnflattenOp::verify() {
  RankedTensorType flat = tensorOf(getFlat()), out = tensorOf(getResult());
  if (flat.getRank() != 1 || flat.getElementType() != out.getElementType())
    return emitOpError("flat buffer must be rank 1 with the result's element "
                       "type");
  int64_t offset = getOffset();
  if (offset < 0 || offset + out.getNumElements() > flat.getDimSize(0))
    return emitOpError("slice [")
           << offset << ", " << offset + out.getNumElements()
           << ") lies outside the buffer of " << flat.getDimSize(0);
  return success();
}

LogicalResult FlattenOp::verify() {
  RankedTensorType out = tensorOf(getResult());
  ArrayRef<int64_t> offsets = getOffsets();
  if (offsets.size() != getParts().size())
    return emitOpError("needs one offset per part");
  SmallVector<std::pair<int64_t, int64_t>> ranges;
  for (auto [part, offset] : llvm::zip(getParts(), offsets)) {
    RankedTensorType t = tensorOf(part);
    if (t.getElementType() != out.getElementType())
      return emitOpError("parts must have the result's element type");
    if (offset < 0 || offset + t.getNumElements() > out.getDimSize(0))
      return emitOpError("a part lies outside the buffer");
    ranges.push_back({offset, offset + t.getNumElements()});
  }
  llvm::sort(ranges);
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second)
      return emitOpError("parts overlap");
  return success();
}

LogicalResult DivideOp::verify() {
  if (getBy() < 1)
    return emitOpError("divides by a whole number of at least 1, got ")
           << getBy();
  return success();
}

//===----------------------------------------------------------------------===//
// Pipeline transfers (KilnPipelineOps.td)
//===----------------------------------------------------------------------===//

namespace {
/// pipe_c1: the stage exists, and so does the neighbour it sends to (or
/// receives from).
LogicalResult checkStage(Operation *op, bool sends, PipeDirection direction,
                         int64_t stage, int64_t stages) {
  if (stages < 2 || stage < 0 || stage >= stages)
    return op->emitOpError("stage ")
           << stage << " must lie in [0, stages) with stages >= 2, got "
           << stages << " stages";
  // An activation moves to the next stage, a gradient to the one before.
  bool towardsLast = (direction == PipeDirection::activation) == sends;
  if (towardsLast ? stage == stages - 1 : stage == 0)
    return op->emitOpError("stage ")
           << stage << " has no stage to " << (sends ? "send" : "receive")
           << " an " << stringifyPipeDirection(direction)
           << (sends ? " to" : " from");
  return success();
}

/// pipe_start_c1 and collective_axis.
LogicalResult checkPeer(Operation *op, int64_t ranks, int64_t peer,
                        int64_t tag) {
  if (ranks < 2 || peer < 0 || peer >= ranks)
    return op->emitOpError("peer ")
           << peer << " must lie in [0, ranks) with ranks >= 2, got " << ranks
           << " ranks";
  if (tag < 0)
    return op->emitOpError("tag must be at least 0, got ") << tag;
  return checkAxis(op, MeshAxis::pp, ranks);
}
} // namespace

LogicalResult PipeSendOp::verify() {
  return checkStage(*this, true, getDirection(), getStage(), getStages());
}

LogicalResult PipeRecvOp::verify() {
  return checkStage(*this, false, getDirection(), getStage(), getStages());
}

LogicalResult PipeSendStartOp::verify() {
  if (tensorOf(getToken()).getRank() != 0)
    return emitOpError("token must be a scalar, got ") << getToken().getType();
  if (failed(checkPeer(*this, getRanks(), getPeer(), getTag())))
    return failure();
  return checkWaited(*this);
}

LogicalResult PipeRecvStartOp::verify() {
  if (failed(checkPeer(*this, getRanks(), getPeer(), getTag())))
    return failure();
  return checkWaited(*this);
}
