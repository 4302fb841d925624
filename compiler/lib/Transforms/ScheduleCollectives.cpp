//===- ScheduleCollectives.cpp - Collectives placed for overlap -----------===//
//
// Only moves ops, never changes what they compute. Every move keeps each
// operand defined before its user: a gradient buffer goes after the last of
// its parts, a wait before its first reader, and a gather (whose operand is
// a cast of a block argument) anywhere before its wait.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kiln/IR/KilnOps.h"
#include "kiln/Transforms/Passes.h"

#define DEBUG_TYPE "kiln-schedule-collectives"

namespace kiln {
#define GEN_PASS_DEF_KILNSCHEDULECOLLECTIVES
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

/// The last op of `block` that defines one of `values` (null if all are
/// block arguments).
Operation *lastDefinition(Block &block, ValueRange values) {
  Operation *last = nullptr;
  for (Value v : values)
    if (Operation *def = v.getDefiningOp();
        def && def->getBlock() == &block &&
        (!last || last->isBeforeInBlock(def)))
      last = def;
  return last;
}

/// Moves `op` to just after `after`, or to the start of the block.
void placeAfter(Operation *op, Operation *after) {
  if (after)
    op->moveAfter(after);
  else
    op->moveBefore(&op->getBlock()->front());
}

/// A gradient buffer as soon as its parts exist: single-use casts feeding
/// the flatten first, then the flatten and the reduce-scatter.
void reduceScatterEarly(Block &block, ReduceScatterStartOp start) {
  auto flat = start.getInput().getDefiningOp<FlattenOp>();
  if (!flat || !flat->hasOneUse())
    return;
  for (Value part : flat.getParts())
    if (auto cast = part.getDefiningOp<CastOp>(); cast && cast->hasOneUse())
      placeAfter(cast, lastDefinition(block, cast->getOperands()));
  placeAfter(flat, lastDefinition(block, flat->getOperands()));
  start->moveAfter(flat);
}

/// A wait just before the first op that reads its result.
void waitLate(WaitOp wait) {
  Operation *first = nullptr;
  for (Operation *user : wait.getResult().getUsers())
    if (user->getBlock() == wait->getBlock() &&
        (!first || user->isBeforeInBlock(first)))
      first = user;
  if (first)
    wait->moveBefore(first);
}

/// At most two gradient buffers at a time: `previous`'s reduce-scatter is
/// waited for before `next`'s buffer is packed (a buffer lives until its
/// collective's wait), so unsharded gradients do not pile up.
void boundReduceScatters(ReduceScatterStartOp previous,
                         ReduceScatterStartOp next) {
  Operation *wait = *previous.getResult().getUsers().begin();
  Operation *flat = next.getInput().getDefiningOp();
  Operation *packed = flat ? flat : next.getOperation();
  if (packed->isBeforeInBlock(wait))
    wait->moveBefore(packed);
}

/// Gather `next` (and the cast of its shard) right after `previous`'s wait.
void prefetch(AllGatherStartOp previous, AllGatherStartOp next) {
  Operation *wait = *previous.getResult().getUsers().begin();
  Operation *cast = next.getShard().getDefiningOp();
  if (cast && (!isa<CastOp>(cast) || !cast->hasOneUse() ||
               lastDefinition(*cast->getBlock(), cast->getOperands())))
    return; // only a cast of a block argument moves with it
  if (!wait->isBeforeInBlock(next))
    return;
  next->moveAfter(wait);
  if (cast)
    cast->moveBefore(next);
}

struct ScheduleCollectives
    : kiln::impl::KilnScheduleCollectivesBase<ScheduleCollectives> {
  void runOnOperation() override {
    for (Block &block : getOperation().getBody()) {
      for (auto start :
           llvm::to_vector(block.getOps<ReduceScatterStartOp>()))
        reduceScatterEarly(block, start);
      for (auto wait : llvm::to_vector(block.getOps<WaitOp>()))
        waitLate(wait);
      SmallVector<ReduceScatterStartOp> scatters =
          llvm::to_vector(block.getOps<ReduceScatterStartOp>());
      for (size_t i = 1; i < scatters.size(); ++i)
        boundReduceScatters(scatters[i - 1], scatters[i]);
      SmallVector<AllGatherStartOp> gathers =
          llvm::to_vector(block.getOps<AllGatherStartOp>());
      for (size_t i = 1; i < gathers.size(); ++i)
        prefetch(gathers[i - 1], gathers[i]);
    }
  }
};
} // namespace
