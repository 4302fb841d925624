//===- Fp8Tp.h - Tensorwise FP8 scales over the tp axis ---------*- C++ -*-===//
//
// The one place that says which FP8 casts need their amax all-reduced over
// tp. A tensorwise scale is one per tensor, so under tensor parallel a
// tensor that each tp rank holds a part of (a weight slice; a row-parallel
// linear's input, the rank's heads or FFN columns; a column-parallel
// linear's output gradient, the rank's columns) scales with the max of
// every rank's amax: the scale, and so every code, is the unsharded
// model's. A tensor that every tp rank holds whole and alike (the gathered
// activation before a column-parallel linear; the gradient of a
// row-parallel linear's output, which the backward gathers over tp) needs
// none. kiln-fp8-linear writes the all-reduce with buildTpAmax where
// isTpReplicated says no; kiln-fp8-all-gather sees through it with
// amaxBehind; kiln-fp8-tp-all-gather builds it for the sequence shards it
// gathers as codes (docs/tp.md, "FP8 under TP").
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TRANSFORMS_FP8TP_H
#define KILN_TRANSFORMS_FP8TP_H

#include "kiln/Dialect/Kiln/IR/KilnOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Value.h"

#include <cstdint>

namespace kiln {

/// True when `v` is the same on every tp rank: the result of an
/// all-gather over tp, seen through the layout ops between the gather and
/// the operand (reshape, transpose, cast). Anything else counts as a part
/// of a tensor split over tp; saying so of a value that is in fact
/// replicated costs one scalar all-reduce and changes no number.
bool isTpReplicated(mlir::Value v);

/// `amax` (f32: one amax, or kiln-fp8-all-gather's vector of them)
/// all-reduced `max` over the tp axis (`tp` ranks), built at `b`'s
/// insertion point:
///
///   %r = kiln.all_reduce_start %amax over tp {ranks = tp, reduction = "max"}
///   %m = kiln.wait %r
mlir::Value buildTpAmax(mlir::OpBuilder &b, mlir::Location loc,
                        mlir::Value amax, int64_t tp);

/// The kiln.amax a quantize's `amax` operand is: that op itself, or the one
/// buildTpAmax reduced over tp (then `reduced` is set). Null otherwise.
AmaxOp amaxBehind(mlir::Value amax, bool *reduced = nullptr);

} // namespace kiln

#endif // KILN_TRANSFORMS_FP8TP_H
