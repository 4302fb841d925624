//===- Passes.h - Kiln's passes ---------------------------------*- C++ -*-===//

#ifndef KILN_TRANSFORMS_PASSES_H
#define KILN_TRANSFORMS_PASSES_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace kiln {

#define GEN_PASS_DECL
#include "kiln/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "kiln/Transforms/Passes.h.inc"

/// Names the compiler and runtime agree on.
inline constexpr llvm::StringLiteral kForwardLossFunc = "forward_loss";
inline constexpr llvm::StringLiteral kLossAndGradsFunc = "loss_and_grads";
/// On a linear kiln-async-tp made for one sequence chunk: the chunk's index
/// (i64), read and removed by kiln-async-tp-grads.
inline constexpr llvm::StringLiteral kAsyncChunkAttr = "kiln.async_chunk";
inline constexpr llvm::StringLiteral kTrainStepFunc = "train_step";
inline constexpr llvm::StringLiteral kForwardLogitsFunc = "forward_logits";
/// The delayed FP8 recipe's first measurement of its amaxes (kiln-fp8-linear).
inline constexpr llvm::StringLiteral kFp8CalibrationFunc = "fp8_calibration";
inline constexpr llvm::StringLiteral kOptimizerAttr = "kiln.optimizer";
inline constexpr llvm::StringLiteral kPrecisionAttr = "kiln.precision";
/// Marks the forward ops kiln-activation-checkpoint cloned into a backward.
inline constexpr llvm::StringLiteral kRecomputedAttr = "kiln.recomputed";
/// Written by kiln-assign-buffers, read by the plan emitter. On an op: the
/// arena offset and the size in bytes of each result (an op whose results
/// are not buffers of their own, a wait, AdamW, amax_history_update, has
/// neither).
inline constexpr llvm::StringLiteral kArenaOffsetsAttr = "kiln.arena_offsets";
inline constexpr llvm::StringLiteral kArenaSizesAttr = "kiln.arena_sizes";
/// On a function: the bytes its arena needs, and what is live where the
/// most bytes are ({peak_step, parameter_copies, gradients, activations}).
inline constexpr llvm::StringLiteral kArenaBytesAttr = "kiln.arena_bytes";
inline constexpr llvm::StringLiteral kLiveAtPeakAttr = "kiln.live_at_peak";
/// On a function with a loss gradient: the bytes live at its step, where
/// every activation the forward saved still is (not in the plan; `kiln
/// plan` extrapolates it with the layers, see PlanFootprint).
inline constexpr llvm::StringLiteral kLiveAtLossAttr = "kiln.live_at_loss";
/// On a function with a loss gradient: the most bytes live at one step from
/// the loss gradient's to the step before the embedding's gradient (or the
/// function's end): the layers' backward, whose fullest step holds every
/// saved activation but one layer's (not in the plan; see PlanFootprint).
inline constexpr llvm::StringLiteral kLiveInBackwardAttr =
    "kiln.live_in_backward";

} // namespace kiln

#endif // KILN_TRANSFORMS_PASSES_H
