//===- Predict.h - A whole step's predicted time and memory -----*- C++ -*-===//
//
// What `kiln explain --perf` and `kiln plan` report of one configuration
// (docs/perf-model.md): each pp position's compiled plan timed by
// PerfModel.h (PositionCost), the positions joined by the pipeline
// schedule's timeline (PipelineOrder.h), and the step's throughput against
// TorchTitan's model FLOPs.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DRIVER_PREDICT_H
#define KILN_DRIVER_PREDICT_H

#include "kiln/Driver/PerfModel.h"
#include "kiln/Driver/Session.h"
#include "kiln/Frontend/Config.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

/// A microbatch's place in the step: the first (nothing accumulated yet),
/// one between (all alike), the last.
enum Phase { kFirst, kMiddle, kLast, kPhases };

/// One pp position's plan, timed: the pipeline units per microbatch by
/// stage, and the rest.
struct PositionCost {
  /// Seconds of a microbatch's forward and backward unit, by phase, by
  /// stage.
  std::map<int64_t, double> forward[kPhases], backward[kPhases];
  /// Time outside any unit: before the first (the step's first gathers),
  /// and after a unit of each phase (a microbatch's gradients accumulated;
  /// after the last, the optimizer), kMiddle's per microbatch. With pp 1,
  /// `step` is the whole step.
  double outside = 0, step = 0;
  double after[kPhases] = {0, 0, 0};
  /// All the time outside units of a step of `microbatches`.
  double outsideOf(int64_t microbatches) const;
  /// The sums (compute, exposed communication, launches, by op, kind and
  /// collective) as the time: outside any unit and after none (`outside`'s
  /// part before the first unit, and all of a step without units), and a
  /// microbatch's units and what follows them, by phase (kMiddle's per
  /// microbatch).
  perf::StepSums outsideSums, phaseSums[kPhases];
  /// All the sums of a step of `microbatches`.
  perf::StepSums sumsOf(int64_t microbatches) const;
  int64_t peakBytes = 0;
  /// peakBytes' parts (StepEstimate's).
  int64_t stateBytes = 0, arenaBytes = 0, liveBytes = 0, reservedBytes = 0;
  /// The bytes live where the loss's gradient starts (PlanFootprint's; 0
  /// without one).
  int64_t lossLiveBytes = 0;
  /// The most bytes live in the layers' backward (PlanFootprint's).
  int64_t backwardLiveBytes = 0;
  /// false: arenaBytes is the bytes live, not a placement's
  /// (PlanFootprint::placed), and peakBytes the least the plan needs.
  bool placed = true;
  /// What eager PyTorch's loss holds there beyond the plan
  /// (StepEstimate::eagerLossBytes).
  int64_t eagerLossBytes = 0;
};

/// `estimate` of a plan with `microbatches` microbatches, as a PositionCost.
PositionCost positionCost(const perf::StepEstimate &estimate,
                          int64_t microbatches);

/// a + t (b - a), entry by entry (a key missing on one side counts as 0):
/// a quantity that grows by the same amount with every layer, known at
/// two layer counts, at a third. `stageT` gives each stage's own t (stages
/// may hold different numbers of layers); `t` is for the position's
/// totals. The peak is the state and the bytes live at the arena's fullest
/// step so extrapolated (or, when more, those live where the loss's
/// gradient starts, so extrapolated: every saved activation is live there,
/// and with more layers they can outgrow what made a small compile's
/// fullest step), the live bytes scaled by b's arena over b's live bytes
/// (first-fit placement's slack, which does not grow by the same bytes
/// with every layer), and the reserve.
PositionCost extrapolate(const PositionCost &a, const PositionCost &b,
                         double t, const std::map<int64_t, double> &stageT);

struct StepPrediction {
  MeshShape mesh;
  double step = 0, exposed = 0, compute = 0, launch = 0, bubble = 0;
  int64_t peakBytes = 0;
  /// peakBytes is the least the step needs, not a prediction (kiln plan's:
  /// a probe's, bytes live counted before placing, or the positions
  /// extrapolated before one was past the memory).
  bool peakAtLeast = false;
  std::map<std::string, double> byOp, byKind, exposedBy;
  double tokensPerGpu = 0, modelTflops = 0, mfu = 0;
  double peakGiB() const { return double(peakBytes) / double(int64_t(1) << 30); }
};

/// The step of `config` from each of its pp positions' costs (index: the
/// position): the largest of the positions' times and bytes, pipeline
/// units replayed by the schedule's timeline. Nothing and `error` when the
/// schedule cannot run.
std::optional<StepPrediction> combine(const Config &config,
                                      const std::vector<PositionCost> &positions,
                                      const perf::Hardware &hw,
                                      std::string &error);

struct PredictOptions {
  bool cudaGraphs = true;
  /// false: the plan without the fuse phase, each op timed as eager
  /// PyTorch runs it (the profile's `[eager]`)
  bool fuse = true;
  /// The loss alone as eager PyTorch runs it (Execution::eagerLoss): its
  /// time, and the bytes it holds at its gradient on top of those live
  /// there (TorchTitan's compiled rows)
  bool eagerLoss = false;
  bool useCache = true; // the on-disk plan cache (explain), or not (plan)
  bool quiet = false;   // a configuration's error into `error`, not stderr
  bool stepOnly = false; // compile train_step (and eval_loss) only
  bool verifyEachPass = true; // false: the module verified once, at the end
  /// false: compilePosition counts the bytes live without placing the
  /// arena (PlanFootprint::placed); placePosition places it.
  bool placeBuffers = true;
};

/// One pp position compiled but not yet timed: its module, and the memory
/// its plan needs (PositionCost's bytes only, from planFootprint). Timing
/// it writes the plan and reads it back as the runtime would, which costs
/// twice the passes: kiln plan times only what fits.
struct CompiledPosition {
  std::unique_ptr<ModelSession> session;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  PositionCost memory;
};

/// Position `p` of `model` with `overrides` on `worldSize` ranks, compiled
/// afresh (never the cache). Nothing and `error` when it does not compile.
std::optional<CompiledPosition>
compilePosition(const std::string &model,
                const std::vector<std::string> &overrides, int64_t worldSize,
                const MeshShape &mesh, int64_t p, const perf::Efficiency &eff,
                const PredictOptions &options, std::string &error);

/// `compiled`'s arena placed, where compilePosition only counted it
/// (PredictOptions::placeBuffers), and its memory read again. False and
/// `error` when that fails.
bool placePosition(CompiledPosition &compiled, const perf::Efficiency &eff,
                   std::string &error);

/// `compiled`'s plan, written and loaded, timed (its module is consumed;
/// placed first if it was not).
std::optional<PositionCost> timePosition(CompiledPosition &compiled,
                                         const perf::Hardware &hw,
                                         const perf::Efficiency &eff,
                                         const PredictOptions &options,
                                         std::string &error);

/// The costs of pp positions `positions` (empty: all) of `model` with `overrides` on
/// `worldSize` ranks (`config`: the loaded configuration). Nothing after
/// printing (or, quiet, putting into `error`) what went wrong.
std::optional<std::vector<PositionCost>>
positionCosts(const std::string &model, const std::vector<std::string> &overrides,
              int64_t worldSize, const std::vector<int64_t> &positions,
              const perf::Hardware &hw, const perf::Efficiency &eff,
              const PredictOptions &options, std::optional<Config> &config,
              std::string &error);

/// Every position compiled and combined: `kiln explain --perf`'s figures.
std::optional<StepPrediction>
predictStep(const std::string &model, const std::vector<std::string> &overrides,
            int64_t worldSize, const perf::Hardware &hw,
            const perf::Efficiency &eff, const PredictOptions &options,
            std::optional<Config> &config, std::string &error);

/// The GPU description and efficiency profile named (built in, or .toml
/// paths), or nothing after printing the one-line error.
std::optional<std::pair<perf::Hardware, perf::Efficiency>>
loadPerfTarget(const std::string &hardware, const std::string &efficiency);

/// TorchTitan's model FLOPs per token (get_nparams_and_flops): 6 per
/// non-embedding parameter, and 12 L H D S for attention's scores.
double modelFlopsPerToken(const Config &config);

} // namespace kiln

#endif // KILN_DRIVER_PREDICT_H
