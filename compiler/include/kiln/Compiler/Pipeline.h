//===- Pipeline.h - The phases of a Kiln compilation ------------*- C++ -*-===//
//
// A compilation is a sequence of phases (docs/architecture.md). Each phase
// after `import` is a pass pipeline built by a C++ function registered once,
// so `kiln compile`, `kiln-opt` and the JIT run the same code.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_COMPILER_PIPELINE_H
#define KILN_COMPILER_PIPELINE_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/LLVM.h"

#include <functional>

namespace kiln {

/// What a compile may leave out. Every choice defaults to the whole plan.
struct PipelineOptions {
  /// false: kiln-assign-buffers only counts the bytes live (place=false),
  /// and the module has no arena until placeBuffers runs. kiln plan decides
  /// from those bytes (the least any placement needs) that most of its
  /// probes do not fit without placing them.
  bool placeBuffers = true;
};

struct PhaseInfo {
  const char *name;
  const char *summary;
  /// Adds the phase's passes.
  void (*buildPipeline)(mlir::OpPassManager &pm,
                        const PipelineOptions &options);
};

/// Every phase, in order.
llvm::ArrayRef<PhaseInfo> pipelinePhases();
const PhaseInfo *findPhase(llvm::StringRef name);

/// import: cleanup after the frontend (canonicalize, CSE).
void buildImportPipeline(mlir::OpPassManager &pm);

/// tp: kiln-tp-partition (a no-op unless the mesh's tp > 1), kiln-async-tp
/// (a no-op unless kiln.tp asks for it), canonicalize.
void buildTpPipeline(mlir::OpPassManager &pm);

/// train: kiln-autodiff, kiln-optimizer, kiln-logits-entry, CSE.
void buildTrainPipeline(mlir::OpPassManager &pm);

/// precision: kiln-mixed-precision, canonicalize, CSE.
void buildPrecisionPipeline(mlir::OpPassManager &pm);

/// shard: kiln-activation-checkpoint (the model's mode), then kiln-fsdp
/// (nothing at one rank).
void buildShardPipeline(mlir::OpPassManager &pm);

/// fp8: kiln-fp8-linear, then kiln-fp8-all-gather.
void buildFp8Pipeline(mlir::OpPassManager &pm);

/// accumulate: kiln-grad-accum (only with kiln.microbatches > 1).
void buildAccumulatePipeline(mlir::OpPassManager &pm);

/// fuse: kiln-fuse-elementwise on every function.
void buildFusePipeline(mlir::OpPassManager &pm);

/// schedule: kiln-schedule-collectives on every function, canonicalize,
/// CSE, then kiln-assign-buffers on every function (place=false unless
/// options.placeBuffers).
void buildSchedulePipeline(mlir::OpPassManager &pm,
                           const PipelineOptions &options = {});

/// plan: no pass; the driver serializes the module with emitPlan
/// (kiln/Plan/PlanEmitter.h) instead of printing IR.
void buildPlanPipeline(mlir::OpPassManager &pm);

/// Registers Kiln's passes, and `kiln-<phase>-pipeline` for every phase, with
/// the pass registry (for kiln-opt).
void registerKilnPipelines();

/// Runs the phases from `import` up to and including `lastPhase` on a module
/// the frontend produced. `afterPhase(index, phase)` is called after each,
/// e.g. to dump the IR. `configure` may add instrumentation (MLIR's
/// --mlir-print-ir-after-all and friends). Phases for which `skip` returns
/// true are not run.
mlir::LogicalResult runPipeline(
    mlir::ModuleOp module, const PhaseInfo &lastPhase,
    llvm::function_ref<mlir::LogicalResult(unsigned, const PhaseInfo &)>
        afterPhase,
    llvm::function_ref<mlir::LogicalResult(mlir::PassManager &)> configure,
    llvm::function_ref<bool(const PhaseInfo &)> skip = {},
    const PipelineOptions &options = {});
/// Places the buffers of a module compiled through the schedule phase with
/// options.placeBuffers false: kiln-assign-buffers again, alone, which
/// gives what the whole schedule phase would have (it is its last pass).
mlir::LogicalResult placeBuffers(mlir::ModuleOp module);

} // namespace kiln

#endif // KILN_COMPILER_PIPELINE_H
