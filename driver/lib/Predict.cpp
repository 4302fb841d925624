//===- Predict.cpp - A whole step's predicted time and memory -------------===//

#include "kiln/Driver/Predict.h"
#include "kiln/Compiler/Pipeline.h"
#include "kiln/Driver/Session.h"
#include "kiln/Frontend/ModelImporter.h"
#include "kiln/Plan/PlanEmitter.h"
#include "kiln/Transforms/PipelineOrder.h"

#include <algorithm>
#include <functional>

using namespace kiln;

double PositionCost::outsideOf(int64_t microbatches) const {
  // One microbatch is the first and the last.
  if (microbatches == 1)
    return outside + after[kFirst];
  return outside + after[kFirst] + double(microbatches - 2) * after[kMiddle] +
         after[kLast];
}

perf::StepSums PositionCost::sumsOf(int64_t microbatches) const {
  perf::StepSums out = outsideSums;
  out.add(phaseSums[kFirst]);
  if (microbatches == 1)
    return out;
  out.add(phaseSums[kMiddle], double(microbatches - 2));
  out.add(phaseSums[kLast]);
  return out;
}

PositionCost kiln::positionCost(const perf::StepEstimate &e,
                                int64_t microbatches) {
  PositionCost c;
  c.step = e.stepSeconds;
  c.peakBytes = e.peakBytes;
  c.stateBytes = e.stateBytes;
  c.arenaBytes = e.arenaBytes;
  c.liveBytes = e.liveBytes;
  c.reservedBytes = e.reservedBytes;
  c.eagerLossBytes = e.eagerLossBytes;
  // Every microbatch between the first and the last runs the same ops:
  // their mean is each one's. `add(phase, scale)` for each phase that
  // microbatch `m` is (one microbatch is the first and the last), with the
  // share of it that phase takes.
  double between = double(std::max<int64_t>(microbatches - 2, 1));
  auto byPhase = [&](int64_t m, auto &&add) {
    if (m == 0)
      add(kFirst, 1.0);
    if (m == microbatches - 1)
      add(kLast, 1.0);
    if (m > 0 && m < microbatches - 1)
      add(kMiddle, 1 / between);
  };
  for (const auto &[label, s] : e.unitSeconds)
    if (std::optional<pipeline::Unit> u = pipeline::parseUnit(label))
      byPhase(u->microbatch, [&](int phase, double share) {
        (u->backward ? c.backward : c.forward)[phase][u->stage] += s * share;
      });
  for (const auto &[label, s] : e.afterUnitSeconds) {
    std::optional<pipeline::Unit> u = pipeline::parseUnit(label);
    if (!u)
      c.outside += s;
    else
      byPhase(u->microbatch,
              [&](int phase, double share) { c.after[phase] += s * share; });
  }
  // The sums likewise: a unit's and what follows it, by its microbatch's
  // phase.
  for (const auto *segments : {&e.unitSums, &e.afterUnitSums})
    for (const auto &[label, sums] : *segments) {
      std::optional<pipeline::Unit> u = pipeline::parseUnit(label);
      if (!u)
        c.outsideSums.add(sums);
      else
        byPhase(u->microbatch, [&](int phase, double share) {
          c.phaseSums[phase].add(sums, share);
        });
    }
  // Two microbatches have none between: the last stands in (unused by the
  // step's own timeline).
  for (auto *byPhase : {c.forward, c.backward})
    if (microbatches <= 2)
      byPhase[kMiddle] = byPhase[kLast];
  if (microbatches <= 2) {
    c.after[kMiddle] = c.after[kLast];
    c.phaseSums[kMiddle] = c.phaseSums[kLast];
  }
  return c;
}

namespace {
using Entries = std::map<int64_t, double>;

double lerp(double a, double b, double t) { return a + t * (b - a); }

template <typename K>
std::map<K, double> lerpMap(const std::map<K, double> &a,
                            const std::map<K, double> &b,
                            const std::function<double(const K &)> &t) {
  std::map<K, double> out;
  for (const auto &[k, v] : a)
    out[k] = lerp(v, b.count(k) ? b.at(k) : 0, t(k));
  for (const auto &[k, v] : b)
    if (!a.count(k))
      out[k] = lerp(0, v, t(k));
  return out;
}
} // namespace

PositionCost kiln::extrapolate(const PositionCost &a, const PositionCost &b,
                               double t, const Entries &stageT) {
  PositionCost c;
  auto perStage = [&](const int64_t &s) {
    auto it = stageT.find(s);
    return it == stageT.end() ? t : it->second;
  };
  auto whole = [&](const std::string &) { return t; };
  for (int phase = 0; phase < kPhases; ++phase) {
    c.forward[phase] =
        lerpMap<int64_t>(a.forward[phase], b.forward[phase], perStage);
    c.backward[phase] =
        lerpMap<int64_t>(a.backward[phase], b.backward[phase], perStage);
  }
  c.outside = lerp(a.outside, b.outside, t);
  for (int phase = 0; phase < kPhases; ++phase)
    c.after[phase] = lerp(a.after[phase], b.after[phase], t);
  c.step = lerp(a.step, b.step, t);
  auto sums = [&](const perf::StepSums &x, const perf::StepSums &y) {
    perf::StepSums out;
    out.compute = lerp(x.compute, y.compute, t);
    out.exposed = lerp(x.exposed, y.exposed, t);
    out.launch = lerp(x.launch, y.launch, t);
    out.byOp = lerpMap<std::string>(x.byOp, y.byOp, whole);
    out.byKind = lerpMap<std::string>(x.byKind, y.byKind, whole);
    out.exposedBy = lerpMap<std::string>(x.exposedBy, y.exposedBy, whole);
    return out;
  };
  c.outsideSums = sums(a.outsideSums, b.outsideSums);
  for (int phase = 0; phase < kPhases; ++phase)
    c.phaseSums[phase] = sums(a.phaseSums[phase], b.phaseSums[phase]);
  auto bytes = [&](int64_t x, int64_t y) {
    return std::max(0.0, lerp(double(x), double(y), t));
  };
  // Each is the most bytes live over some steps, and grows by what a layer
  // adds to those steps: the step's fullest is at least each.
  double live = bytes(a.liveBytes, b.liveBytes);
  double atLoss = bytes(a.lossLiveBytes, b.lossLiveBytes);
  double inBackward = bytes(a.backwardLiveBytes, b.backwardLiveBytes);
  if (a.lossLiveBytes > 0 && b.lossLiveBytes > 0)
    live = std::max(live, atLoss);
  if (a.backwardLiveBytes > 0 && b.backwardLiveBytes > 0)
    live = std::max(live, inBackward);
  double arena = b.liveBytes > 0
                     ? live * double(b.arenaBytes) / double(b.liveBytes)
                     : bytes(a.arenaBytes, b.arenaBytes);
  c.stateBytes = static_cast<int64_t>(bytes(a.stateBytes, b.stateBytes));
  c.liveBytes = static_cast<int64_t>(live);
  c.lossLiveBytes = static_cast<int64_t>(atLoss);
  c.backwardLiveBytes = static_cast<int64_t>(inBackward);
  c.arenaBytes = static_cast<int64_t>(arena);
  c.reservedBytes = b.reservedBytes;
  c.peakBytes = c.stateBytes + c.arenaBytes + c.reservedBytes;
  return c;
}

std::optional<std::pair<perf::Hardware, perf::Efficiency>>
kiln::loadPerfTarget(const std::string &hardware,
                     const std::string &efficiency) {
  runtime::Expected<perf::Hardware> hw = perf::loadHardware(hardware);
  if (!hw) {
    commandError(hw.error().message());
    return std::nullopt;
  }
  runtime::Expected<perf::Efficiency> eff = perf::loadEfficiency(efficiency);
  if (!eff) {
    commandError(eff.error().message());
    return std::nullopt;
  }
  return std::make_pair(*std::move(hw), *std::move(eff));
}

double kiln::modelFlopsPerToken(const Config &config) {
  double params = 0;
  for (const ParamSpec &p : modelParameters(config)) {
    if (p.name == "model.embed_tokens.weight")
      continue;
    double n = 1;
    for (int64_t d : p.shape)
      n *= double(d);
    params += n;
  }
  const ModelConfig &m = config.model;
  return 6 * params + 12.0 * double(m.n_layers) * double(m.n_heads) *
                          double(m.headDim()) * double(config.training.seq_len);
}

std::optional<StepPrediction>
kiln::combine(const Config &config, const std::vector<PositionCost> &positions,
              const perf::Hardware &hw, std::string &error) {
  MeshShape mesh = config.runMesh();
  StepPrediction total;
  total.mesh = mesh;
  pipeline::Shape shape{mesh.pp, mesh.pp > 1 ? config.pipelineStages() : 1,
                        config.microbatches()};
  pipeline::Durations units;
  units.microbatches = shape.microbatches;
  std::vector<double> *forward[kPhases] = {&units.firstForward, &units.forward,
                                           &units.lastForward};
  std::vector<double> *backward[kPhases] = {
      &units.firstBackward, &units.backward, &units.lastBackward};
  for (int phase = 0; phase < kPhases; ++phase) {
    forward[phase]->assign(shape.stages, 0);
    backward[phase]->assign(shape.stages, 0);
  }
  double outside = 0;
  for (const PositionCost &c : positions) {
    // The step's own microbatches (a probe may have run fewer).
    perf::StepSums sums = c.sumsOf(shape.microbatches);
    total.exposed = std::max(total.exposed, sums.exposed);
    total.compute = std::max(total.compute, sums.compute);
    total.launch = std::max(total.launch, sums.launch);
    total.peakBytes = std::max(total.peakBytes, c.peakBytes);
    for (const auto &[op, s] : sums.byOp)
      total.byOp[op] = std::max(total.byOp[op], s);
    for (const auto &[kind, s] : sums.byKind)
      total.byKind[kind] = std::max(total.byKind[kind], s);
    for (const auto &[what, s] : sums.exposedBy)
      total.exposedBy[what] = std::max(total.exposedBy[what], s);
    outside = std::max(outside, c.outsideOf(shape.microbatches));
    total.step = std::max(total.step, c.step);
    for (int phase = 0; phase < kPhases; ++phase) {
      for (const auto &[stage, s] : c.forward[phase])
        if (stage >= 0 && stage < shape.stages)
          (*forward[phase])[stage] += s;
      for (const auto &[stage, s] : c.backward[phase])
        if (stage >= 0 && stage < shape.stages)
          (*backward[phase])[stage] += s;
    }
  }
  if (mesh.pp > 1) {
    std::optional<pipeline::Schedule> schedule =
        pipeline::parseSchedule(config.parallelism.pipeline_parallel_schedule);
    if (!schedule) {
      error = "unknown pipeline schedule '" +
              config.parallelism.pipeline_parallel_schedule + "'";
      return std::nullopt;
    }
    std::optional<pipeline::Timeline> t = pipeline::simulate(
        pipeline::rankOrders(*schedule, shape), shape, units, error);
    if (!t)
      return std::nullopt;
    total.step = outside + t->makespan;
    total.bubble = t->bubble;
  }
  double tokens =
      double(config.training.global_batch_size) * config.training.seq_len;
  total.tokensPerGpu = tokens / total.step / double(mesh.ranks());
  total.modelTflops = total.tokensPerGpu * modelFlopsPerToken(config) / 1e12;
  total.mfu = total.modelTflops / hw.bf16Tflops;
  return total;
}

namespace {
/// `compiled.memory` from its module's footprint; false if it has none.
bool readMemory(CompiledPosition &compiled, const perf::Efficiency &eff) {
  mlir::FailureOr<PlanFootprint> footprint =
      planFootprint(*compiled.module, "train_step");
  if (mlir::failed(footprint))
    return false;
  perf::StepEstimate e;
  perf::setMemory(e, footprint->stateBytes, footprint->arenaBytes,
                  footprint->liveBytes, eff);
  compiled.memory = positionCost(e, compiled.session->config->microbatches());
  compiled.memory.lossLiveBytes = footprint->lossLiveBytes;
  compiled.memory.backwardLiveBytes = footprint->backwardLiveBytes;
  compiled.memory.placed = footprint->placed;
  return true;
}
} // namespace

std::optional<CompiledPosition>
kiln::compilePosition(const std::string &model,
                      const std::vector<std::string> &overrides,
                      int64_t worldSize, const MeshShape &mesh, int64_t p,
                      const perf::Efficiency &eff,
                      const PredictOptions &options, std::string &error) {
  CompiledPosition out;
  out.session = std::make_unique<ModelSession>();
  ModelSession &stage = *out.session;
  stage.quiet = options.quiet;
  stage.stepOnly = options.stepOnly;
  stage.verifyEachPass = options.verifyEachPass;
  stage.placeBuffers = options.placeBuffers;
  if (stage.loadPipelinePosition(model, overrides, worldSize, mesh, p))
    out.module = stage.compileThrough("plan", options.fuse);
  if (!out.module || !readMemory(out, eff)) {
    error = stage.firstError;
    return std::nullopt;
  }
  return out;
}

bool kiln::placePosition(CompiledPosition &compiled,
                         const perf::Efficiency &eff, std::string &error) {
  if (compiled.memory.placed)
    return true;
  if (mlir::failed(placeBuffers(*compiled.module)) ||
      !readMemory(compiled, eff)) {
    error = compiled.session->firstError;
    return false;
  }
  return true;
}

namespace {
/// `plan`'s train_step timed, as a position's cost.
PositionCost timePlan(const runtime::Plan &plan, int64_t microbatches,
                      const perf::Hardware &hw, const perf::Efficiency &eff,
                      const PredictOptions &options) {
  perf::StepEstimate e = perf::estimateEntry(
      plan, *plan.entry("train_step"), hw, eff,
      {options.cudaGraphs, /*eagerOps=*/!options.fuse, options.eagerLoss});
  return positionCost(e, microbatches);
}
} // namespace

std::optional<PositionCost> kiln::timePosition(CompiledPosition &compiled,
                                               const perf::Hardware &hw,
                                               const perf::Efficiency &eff,
                                               const PredictOptions &options,
                                               std::string &error) {
  if (!placePosition(compiled, eff, error))
    return std::nullopt;
  mlir::FailureOr<std::string> text = emitPlan(*compiled.module);
  compiled.module = nullptr;
  if (mlir::failed(text)) {
    error = compiled.session->firstError;
    return std::nullopt;
  }
  runtime::Expected<runtime::Plan> plan = runtime::parsePlan(*text);
  if (!plan) {
    error =
        "internal: the compiled plan does not load: " + plan.error().message();
    return std::nullopt;
  }
  PositionCost cost = timePlan(*plan, compiled.session->config->microbatches(),
                               hw, eff, options);
  // The plan does not carry it; the compile's footprint does.
  cost.lossLiveBytes = compiled.memory.lossLiveBytes;
  cost.backwardLiveBytes = compiled.memory.backwardLiveBytes;
  // Eager PyTorch's loss holds its f32 tensors on top of every byte live
  // at the loss's gradient (no arena: PyTorch's allocator places them).
  if (cost.eagerLossBytes > 0 && cost.lossLiveBytes > 0)
    cost.peakBytes =
        std::max(cost.peakBytes, cost.stateBytes + cost.lossLiveBytes +
                                     cost.eagerLossBytes + cost.reservedBytes);
  return cost;
}

std::optional<std::vector<PositionCost>>
kiln::positionCosts(const std::string &model,
                    const std::vector<std::string> &overrides,
                    int64_t worldSize, const std::vector<int64_t> &positions,
                    const perf::Hardware &hw, const perf::Efficiency &eff,
                    const PredictOptions &options,
                    std::optional<Config> &config, std::string &error) {
  std::vector<PositionCost> out;
  ModelSession whole;
  whole.quiet = options.quiet;
  if (!whole.load(model, overrides, worldSize)) {
    error = whole.firstError;
    return std::nullopt;
  }
  MeshShape mesh = whole.config->runMesh();
  std::vector<int64_t> all = positions;
  if (all.empty())
    for (int64_t p = 0; p < mesh.pp; ++p)
      all.push_back(p);
  for (int64_t p : all) {
    std::optional<PositionCost> cost;
    if (options.useCache && options.fuse && !options.eagerLoss) {
      // The fused plan from the cache, or compiled and stored there (the
      // eager loss needs the compile's footprint, which it does not keep).
      ModelSession stage;
      stage.quiet = options.quiet;
      bool hit = false;
      std::optional<runtime::Plan> plan;
      if (stage.loadPipelinePosition(model, overrides, worldSize, mesh, p))
        plan = stage.cachedRuntimePlan(overrides, hit);
      if (!plan) {
        error = stage.firstError;
        return std::nullopt;
      }
      cost = timePlan(*plan, stage.config->microbatches(), hw, eff, options);
    } else {
      std::optional<CompiledPosition> compiled = compilePosition(
          model, overrides, worldSize, mesh, p, eff, options, error);
      if (compiled)
        cost = timePosition(*compiled, hw, eff, options, error);
    }
    if (!cost)
      return std::nullopt;
    out.push_back(*std::move(cost));
  }
  config = *whole.config;
  return out;
}

std::optional<StepPrediction>
kiln::predictStep(const std::string &model,
                  const std::vector<std::string> &overrides, int64_t worldSize,
                  const perf::Hardware &hw, const perf::Efficiency &eff,
                  const PredictOptions &options, std::optional<Config> &config,
                  std::string &error) {
  std::optional<std::vector<PositionCost>> costs = positionCosts(
      model, overrides, worldSize, {}, hw, eff, options, config, error);
  if (!costs)
    return std::nullopt;
  return combine(*config, *costs, hw, error);
}
