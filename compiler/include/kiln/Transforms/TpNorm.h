//===- TpNorm.h - The gradient norm's squares over the tp axis --*- C++ -*-===//
//
// The one place that says how a step's gradient norm counts tp ranks. With
// tp > 1 a tp-sharded parameter's gradient (`#kiln.tp_shard`) is the rank's
// slice, so its squares are summed over tp; a tp-replicated parameter's is,
// after kiln-tp-grad-sync's all-reduce, the same on every tp rank, so its
// squares count once. kiln-tp-grad-sync writes the norm with
// buildTpSquares; kiln-fsdp takes it apart with matchTpNorm, to learn which
// gradients were counted which way, and sums the same squares of its flat
// shards over dp_shard too (docs/tp.md, "FSDP on top").
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TRANSFORMS_TPNORM_H
#define KILN_TRANSFORMS_TPNORM_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/Value.h"

#include <cstdint>

namespace kiln {

/// The squares of `sharded` summed over the tp axis (`tp` ranks) plus those
/// of `replicated`, built at `b`'s insertion point:
///
///   %s = kiln.grad_norm <sharded> {squared}
///   %a = kiln.all_reduce_start %s over tp {ranks = tp, reduction = "sum"}
///   %w = kiln.wait %a
///   %r = kiln.grad_norm <replicated> {squared}
///   %t = kiln.add %w, %r
///
/// Either list may be empty (its half is then left out), not both: a null
/// value then.
mlir::Value buildTpSquares(mlir::OpBuilder &b, mlir::Location loc,
                           mlir::ValueRange sharded,
                           mlir::ValueRange replicated, int64_t tp);

/// A norm `kiln.sqrt` of buildTpSquares's sum, taken apart.
struct TpNorm {
  /// The gradients whose squares are summed over tp, and those counted once.
  llvm::SmallVector<mlir::Value> sharded, replicated;
  /// The ops that compute the norm, the sqrt first and each op before the
  /// ones it reads: erasable in this order once the sqrt has no use. Every
  /// op but the sqrt has its one use in the next.
  llvm::SmallVector<mlir::Operation *> ops;
};

/// `norm` taken apart, or failure when it is not `kiln.sqrt` of what
/// buildTpSquares builds for `tp` ranks (in either order of the add's
/// operands).
mlir::FailureOr<TpNorm> matchTpNorm(mlir::Value norm, int64_t tp);

} // namespace kiln

#endif // KILN_TRANSFORMS_TPNORM_H
