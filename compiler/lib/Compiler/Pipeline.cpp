//===- Pipeline.cpp - The phases of a Kiln compilation --------------------===//

#include "kiln/Compiler/Pipeline.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;
using namespace kiln;

void kiln::buildImportPipeline(OpPassManager &pm) {
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

void kiln::buildTpPipeline(OpPassManager &pm) {
  // A no-op unless the module's mesh has tp > 1.
  pm.addPass(createKilnTpPartition());
  // A no-op unless kiln.tp asks for async TP; on the partition's IR as
  // written, before canonicalization.
  pm.addPass(createKilnAsyncTp());
  pm.addPass(createCanonicalizerPass());
}

void kiln::buildTrainPipeline(OpPassManager &pm) {
  pm.addPass(createKilnAutodiff());
  // A no-op unless kiln-async-tp split linears into chunks.
  pm.addPass(createKilnAsyncTpGrads());
  pm.addPass(createKilnOptimizer());
  // A no-op unless the mesh's tp > 1: the replicated parameters' gradients
  // and the grad norm summed over tp, in @loss_and_grads and @train_step.
  pm.addPass(createKilnTpGradSync());
  pm.addPass(createKilnLogitsEntry());
  pm.addPass(createCSEPass());
}

void kiln::buildPrecisionPipeline(OpPassManager &pm) {
  pm.addPass(createKilnMixedPrecision());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

void kiln::buildShardPipeline(OpPassManager &pm) {
  // FP8 decisions before anything else: kiln-fsdp groups the FP8 weights
  // apart for the FP8 all-gather, and recomputed clones copy their linear's
  // mark.
  pm.addPass(createKilnFp8Select());
  // Recompute first: kiln-fsdp then gives the clones (backward ops) the
  // backward's gathered parameters.
  pm.addPass(createKilnActivationCheckpoint());
  pm.addPass(createKilnFsdp());
}

void kiln::buildFp8Pipeline(OpPassManager &pm) {
  // No CSE after the shard phase: it would merge the backward's re-gathered
  // parameters with the forward's.
  pm.addPass(createKilnFp8Linear());
  pm.addPass(createKilnFp8AllGather());
  pm.addPass(createKilnFp8TpAllGather());
}

void kiln::buildAccumulatePipeline(OpPassManager &pm) {
  pm.addPass(createKilnGradAccum());
  // No-ops unless the mesh's pp > 1: the microbatches in the schedule's
  // order, then the loss and the clipping norm over every stage.
  pm.addPass(createKilnPipelineSchedule());
  pm.addPass(createKilnPipelineSync());
}

void kiln::buildFusePipeline(OpPassManager &pm) {
  pm.addNestedPass<func::FuncOp>(createKilnFuseElementwise());
}

void kiln::buildSchedulePipeline(OpPassManager &pm,
                                 const PipelineOptions &options) {
  pm.addNestedPass<func::FuncOp>(createKilnScheduleCollectives());
  // The last cleanup before the arena is laid out: the offsets hold only
  // while no op moves, and CSE would no longer merge ops that carry them.
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  KilnAssignBuffersOptions assign;
  assign.place = options.placeBuffers;
  pm.addNestedPass<func::FuncOp>(createKilnAssignBuffers(assign));
}

void kiln::buildPlanPipeline(OpPassManager &) {
  // Nothing left to transform: the driver serializes the module with
  // emitPlan, which reads the offsets kiln-assign-buffers wrote.
}

namespace {
/// A phase whose passes no PipelineOptions choice changes.
template <void (*build)(OpPassManager &)>
void withoutOptions(OpPassManager &pm, const PipelineOptions &) {
  build(pm);
}
} // namespace

ArrayRef<PhaseInfo> kiln::pipelinePhases() {
  static const PhaseInfo phases[] = {
      {"import", "the model description as kiln ops (@forward_loss)",
       withoutOptions<buildImportPipeline>},
      {"tp",
       "@forward_loss as one rank of the tp axis (Megatron, sequence "
       "parallel; only when the mesh's tp > 1)",
       withoutOptions<buildTpPipeline>},
      {"train", "autodiff backward and AdamW (@train_step), @forward_logits",
       withoutOptions<buildTrainPipeline>},
      {"precision", "mixed-precision casts as explicit ops",
       withoutOptions<buildPrecisionPipeline>},
      {"shard", "FP8 decisions; FSDP shards, all-gathers and reduce-scatters",
       withoutOptions<buildShardPipeline>},
      {"fp8", "eligible linears as FP8 scaled GEMMs",
       withoutOptions<buildFp8Pipeline>},
      {"accumulate",
       "microbatches: the step's forward and backward once per microbatch "
       "(training.local_batch_size), in the pipeline schedule's order "
       "(pp > 1)",
       withoutOptions<buildAccumulatePipeline>},
      {"fuse", "elementwise and row-wise ops as fused groups",
       withoutOptions<buildFusePipeline>},
      {"schedule",
       "collectives ordered for overlap (prefetch, late waits), buffers "
       "placed in the arena",
       buildSchedulePipeline},
      {"plan", "the serialized runtime plan",
       withoutOptions<buildPlanPipeline>},
  };
  return phases;
}

const PhaseInfo *kiln::findPhase(StringRef name) {
  for (const PhaseInfo &phase : pipelinePhases())
    if (name == phase.name)
      return &phase;
  return nullptr;
}

void kiln::registerKilnPipelines() {
  registerKilnPasses();
  for (const PhaseInfo &phase : pipelinePhases()) {
    std::string flag = std::string("kiln-") + phase.name + "-pipeline";
    std::string help = std::string("Kiln phase '") + phase.name +
                       "': " + phase.summary;
    auto build = phase.buildPipeline;
    PassPipelineRegistration<>(flag, help,
                               [build](OpPassManager &pm) { build(pm, {}); });
  }
}

LogicalResult kiln::runPipeline(
    ModuleOp module, const PhaseInfo &lastPhase,
    function_ref<LogicalResult(unsigned, const PhaseInfo &)> afterPhase,
    function_ref<LogicalResult(PassManager &)> configure,
    function_ref<bool(const PhaseInfo &)> skip,
    const PipelineOptions &options) {
  unsigned index = 0;
  for (const PhaseInfo &phase : pipelinePhases()) {
    ++index;
    if (skip && skip(phase))
      continue;
    PassManager pm(module->getContext());
    if (failed(configure(pm)))
      return failure();
    phase.buildPipeline(pm, options);
    if (failed(pm.run(module)) || failed(afterPhase(index, phase)))
      return failure();
    if (&phase == &lastPhase)
      break;
  }
  return success();
}

LogicalResult kiln::placeBuffers(ModuleOp module) {
  PassManager pm(module->getContext());
  pm.enableVerifier(false);
  pm.addNestedPass<func::FuncOp>(createKilnAssignBuffers());
  return pm.run(module);
}
