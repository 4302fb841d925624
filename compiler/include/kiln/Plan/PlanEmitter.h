//===- PlanEmitter.h - The module as the runtime's plan ---------*- C++ -*-===//
//
// The plan is the whole contract between compiler and runtime: JSON data,
// versioned, with no MLIR in it (docs/plan.md is its specification).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_PLAN_PLANEMITTER_H
#define KILN_PLAN_PLANEMITTER_H

#include "kiln/Runtime/Plan/Format.h"

#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace kiln {

/// Lowers @train_step and @forward_loss to the plan and writes its JSON to
/// `os`, compact or indented by `indent` spaces a level, as it goes: the
/// plan is never held whole in memory. Emits a diagnostic and fails on IR
/// the runtime cannot run (an op it does not know, a state that cannot be
/// updated in place); `os` then holds part of a plan, so it should be a
/// file that is not kept or a string.
mlir::LogicalResult emitPlan(mlir::ModuleOp module, llvm::raw_ostream &os,
                             unsigned indent = 0);

/// The same into a string.
mlir::FailureOr<std::string> emitPlan(mlir::ModuleOp module,
                                      unsigned indent = 0);

/// What a plan holds in memory (docs/plan.md): its persistent state, and
/// one entry point's arena and the bytes live at the arena's fullest step
/// (kiln-assign-buffers' `kiln.live_at_peak`, its step index left out).
struct PlanFootprint {
  int64_t stateBytes = 0, arenaBytes = 0, liveBytes = 0;
  /// The bytes live where the loss's gradient starts the backward
  /// (kiln.live_at_loss; 0 without one): every saved activation is then
  /// live, so it grows with the layers even where the fullest step of a
  /// small compile is the loss's own temporaries.
  int64_t lossLiveBytes = 0;
  /// The most bytes live in the layers' backward, from the loss's gradient
  /// to the embedding's (kiln.live_in_backward; 0 without a loss
  /// gradient): its fullest step holds every saved activation but one
  /// layer's, so it grows with the layers where the fullest step of a
  /// small compile (the embedding's gradient) does not.
  int64_t backwardLiveBytes = 0;
  /// false: kiln-assign-buffers counted the bytes live without placing
  /// them (PipelineOptions::placeBuffers), and arenaBytes is liveBytes,
  /// the least any placement needs; the module cannot be emitted yet.
  bool placed = true;
};

/// The footprint of the plan emitPlan would write for `module`, at entry
/// point `entry` ("train_step"), without writing it: the same value table
/// and arena, read off the module (kiln plan decides what fits from it
/// before timing a plan). Fails as emitPlan does, but for a function whose
/// buffers were counted and not placed.
mlir::FailureOr<PlanFootprint> planFootprint(mlir::ModuleOp module,
                                             llvm::StringRef entry);

} // namespace kiln

#endif // KILN_PLAN_PLANEMITTER_H
