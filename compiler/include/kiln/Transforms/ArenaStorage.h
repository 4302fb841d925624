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

/// The value whose arena buffer holds `v`: itself, or through views and
/// waits the buffer's owner; null where `v` is not in the arena (a block
/// argument, a constant, a state written in place). One walk down the
/// reshapes and waits: a reshape is a view when what it reads is in the
/// arena, and otherwise (the one nearest that root) a copy that owns.
inline mlir::Value arenaStorage(mlir::Value v) {
  mlir::Value copy; // the reshape nearest the root, seen so far
  while (mlir::Operation *def = v.getDefiningOp()) {
    if (auto wait = llvm::dyn_cast<WaitOp>(def)) {
      v = wait.getPending(); // a wait's result is its start's buffer
      continue;
    }
    if (llvm::isa<ReshapeOp>(def)) {
      copy = v;
      v = def->getOperand(0);
      continue;
    }
    // AdamW's results are the states it reads, and amax_history_update's
    // the history it reads (the plan emitter checks that they may be
    // written in place); ops of other dialects are constants.
    if (def->getDialect() &&
        def->getDialect()->getNamespace() ==
            KilnDialect::getDialectNamespace() &&
        !llvm::isa<AdamWOp, AmaxHistoryUpdateOp>(def))
      return v;
    break;
  }
  return copy;
}

/// A view: a reshape of a value in the arena. Tensors are row-major and
/// contiguous, so the reshaped tensor is the same bytes: its result is its
/// operand's buffer, and no step copies it. (A reshape of a state or an
/// input stays a copy.)
inline bool isArenaView(mlir::Operation *op) {
  return llvm::isa<ReshapeOp>(op) && arenaStorage(op->getOperand(0));
}

/// Whether `op`'s results are buffers of their own: not a wait (its start's
/// buffer), a view (its operand's), a state written in place or a constant.
inline bool ownsBuffer(mlir::Operation *op) {
  return op->getNumResults() > 0 && arenaStorage(op->getResult(0)) ==
                                        op->getResult(0);
}

} // namespace kiln

#endif // KILN_TRANSFORMS_ARENASTORAGE_H
