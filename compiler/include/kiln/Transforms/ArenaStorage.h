//===- ArenaStorage.h - Which values own an arena buffer --------*- C++ -*-===//
//
// The one place that says which SSA values of a function get an arena
// buffer, and which share another's: kiln-assign-buffers places the
// buffers and the plan emitter writes them, both from these rules.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TRANSFORMS_ARENASTORAGE_H
#define KILN_TRANSFORMS_ARENASTORAGE_H

#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"

namespace kiln {

bool isArenaView(mlir::Operation *op);

/// Whether `op`'s results are buffers of their own. A wait's result is its
/// start's buffer, a view (below) its operand's; AdamW's results are the
/// states it reads, and amax_history_update's the history it reads (the
/// plan emitter checks that they may be written in place).
inline bool ownsBuffer(mlir::Operation *op) {
  return op->getDialect() &&
         op->getDialect()->getNamespace() ==
             KilnDialect::getDialectNamespace() &&
         !llvm::isa<WaitOp, AdamWOp, AmaxHistoryUpdateOp>(op) &&
         !isArenaView(op);
}

/// The value whose arena buffer holds `v`: itself, or through views and
/// waits the buffer's owner; null where `v` is not in the arena (a block
/// argument, a constant, a state written in place).
inline mlir::Value arenaStorage(mlir::Value v) {
  while (mlir::Operation *def = v.getDefiningOp()) {
    if (auto wait = llvm::dyn_cast<WaitOp>(def)) {
      v = wait.getPending();
      continue;
    }
    if (isArenaView(def)) {
      v = def->getOperand(0);
      continue;
    }
    return ownsBuffer(def) ? v : mlir::Value();
  }
  return {};
}

/// A view: a reshape of a value in the arena. Tensors are row-major and
/// contiguous, so the reshaped tensor is the same bytes: its result is its
/// operand's buffer, and no step copies it. (A reshape of a state or an
/// input stays a copy.)
inline bool isArenaView(mlir::Operation *op) {
  return llvm::isa<ReshapeOp>(op) && arenaStorage(op->getOperand(0));
}

} // namespace kiln

#endif // KILN_TRANSFORMS_ARENASTORAGE_H
