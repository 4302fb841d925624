//===- ExplainPerf.cpp - `kiln explain --perf` ----------------------------===//
//
// What the compiled step takes on a described GPU cluster (issue #19,
// docs/perf-model.md): each distinct rank's plan (one per pp position; tp
// and dp_shard positions are alike) timed by PerfModel.h, pipeline units
// replayed by the schedule's timeline (PipelineOrder.h), and the step's
// throughput against TorchTitan's model FLOPs.
//
//===----------------------------------------------------------------------===//

#include "kiln/Driver/Driver.h"
#include "kiln/Driver/PerfModel.h"
#include "kiln/Driver/Session.h"
#include "kiln/Frontend/ModelImporter.h"
#include "kiln/Transforms/PipelineOrder.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

using namespace kiln;

namespace {

/// TorchTitan's model FLOPs per token: 6 per non-embedding parameter, and
/// 12 L H D S for attention's scores (get_nparams_and_flops).
double modelFlopsPerToken(const Config &config) {
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

struct Prediction {
  double step = 0, exposed = 0, compute = 0, launch = 0, bubble = 0;
  int64_t peakBytes = 0;
  std::map<std::string, double> byOp, byKind;
};

} // namespace

int kiln::explainPerf(const ExplainCommand &command) {
  runtime::Expected<perf::Hardware> hw = perf::loadHardware(command.hardware);
  if (!hw)
    return commandError(hw.error().message());
  runtime::Expected<perf::Efficiency> eff =
      perf::loadEfficiency(command.efficiency);
  if (!eff)
    return commandError(eff.error().message());

  ModelSession first;
  if (!first.load(command.model, command.overrides, command.worldSize, 0))
    return 1;
  const Config &config = *first.config;
  MeshShape mesh = config.runMesh();
  Prediction total;
  // Each pp position's plan; the positions' units combined by the schedule.
  pipeline::Shape shape{mesh.pp, mesh.pp > 1 ? config.pipelineStages() : 1,
                        config.microbatches()};
  pipeline::Durations units;
  units.forward.assign(shape.stages, 0);
  units.backward.assign(shape.stages, 0);
  double outside = 0;
  for (int64_t p = 0; p < mesh.pp; ++p) {
    ModelSession stage;
    if (!stage.loadPipelinePosition(command.model, command.overrides,
                                    command.worldSize, mesh, p))
      return 1;
    // The fused plan from the cache; an unfused one compiled afresh.
    bool hit = false;
    std::optional<runtime::Plan> plan;
    if (command.fuse) {
      plan = stage.cachedRuntimePlan(command.overrides, hit);
    } else if (std::optional<std::string> text = stage.compilePlan(false)) {
      runtime::Expected<runtime::Plan> parsed = runtime::parsePlan(*text);
      if (!parsed)
        return commandError("internal: the compiled plan does not load: " +
                            parsed.error().message());
      plan = *std::move(parsed);
    }
    if (!plan)
      return 1;
    perf::StepEstimate e = perf::estimateEntry(
        *plan, *plan->entry("train_step"), *hw, *eff, command.cudaGraphs);
    total.exposed = std::max(total.exposed, e.exposedCommSeconds);
    total.compute = std::max(total.compute, e.computeSeconds);
    total.launch = std::max(total.launch, e.launchSeconds);
    total.peakBytes = std::max(total.peakBytes, e.peakBytes);
    for (const auto &[op, s] : e.byOp)
      total.byOp[op] = std::max(total.byOp[op], s);
    for (const auto &[kind, s] : e.byKind)
      total.byKind[kind] = std::max(total.byKind[kind], s);
    if (mesh.pp == 1) {
      total.step = e.stepSeconds;
      continue;
    }
    outside = std::max(outside, e.outsideUnitsSeconds);
    for (const auto &[label, s] : e.unitSeconds)
      if (std::optional<pipeline::Unit> u = pipeline::parseUnit(label))
        (u->backward ? units.backward : units.forward)[u->stage] +=
            s / double(shape.microbatches);
  }
  if (mesh.pp > 1) {
    std::optional<pipeline::Schedule> schedule =
        pipeline::parseSchedule(config.parallelism.pipeline_parallel_schedule);
    std::string error;
    std::optional<pipeline::Timeline> t = pipeline::simulate(
        pipeline::rankOrders(*schedule, shape), shape, units, error);
    if (!t)
      return commandError("internal: " + error);
    total.step = outside + t->makespan;
    total.bubble = t->bubble;
  }

  int64_t world = mesh.ranks();
  double tokens =
      double(config.training.global_batch_size) * config.training.seq_len;
  double perGpu = tokens / total.step / double(world);
  double modelTflops = perGpu * modelFlopsPerToken(config) / 1e12;
  double mfu = modelTflops / hw->bf16Tflops;
  double peakGiB = double(total.peakBytes) / double(int64_t(1) << 30);
  std::vector<std::pair<double, std::string>> top;
  for (const auto &[op, s] : total.byOp)
    top.push_back({s, op});
  std::sort(top.rbegin(), top.rend());
  top.resize(std::min<size_t>(top.size(), 10));

  llvm::raw_ostream &os = llvm::outs();
  if (command.json) {
    llvm::json::Array ops;
    for (const auto &[s, op] : top)
      ops.push_back(llvm::json::Object{{"op", op}, {"seconds", s}});
    llvm::json::Object kinds;
    for (const auto &[kind, s] : total.byKind)
      kinds[kind] = s;
    llvm::json::Object out{
        {"model", first.source->name},
        {"hardware", hw->name},
        {"efficiency", eff->name},
        {"gpus", world},
        {"mesh", llvm::json::Object{{"pp", mesh.pp},
                                    {"dp_shard", mesh.dpShard},
                                    {"tp", mesh.tp}}},
        {"cuda_graphs", command.cudaGraphs},
        {"step_time_s", total.step},
        {"tokens_per_s_per_gpu", perGpu},
        {"model_tflops_per_gpu", modelTflops},
        {"mfu", mfu},
        {"peak_memory_gib", peakGiB},
        {"fits", peakGiB <= hw->hbmGiB},
        {"exposed_comm_s", total.exposed},
        {"compute_s", total.compute},
        {"launch_s", total.launch},
        {"compute_by_kind_s", std::move(kinds)},
        {"bubble", total.bubble},
        {"top_ops", std::move(ops)}};
    os << llvm::formatv("{0:2}", llvm::json::Value(std::move(out))) << "\n";
    return 0;
  }
  os << "kiln explain --perf: " << first.source->name << " on " << world
     << " x " << hw->name << " (mesh pp " << mesh.pp << " x dp_shard "
     << mesh.dpShard << " x tp " << mesh.tp << "), efficiency " << eff->name
     << ", " << (command.cudaGraphs ? "CUDA graphs" : "eager launches") << "\n";
  os << llvm::format("  step time            %10.4f s\n", total.step);
  os << llvm::format("  tokens/s per GPU     %10.1f\n", perGpu);
  os << llvm::format("  model TFLOP/s per GPU%10.1f  (MFU %.1f%% of %.1f "
                     "BF16 TFLOP/s)\n",
                     modelTflops, 100 * mfu, hw->bf16Tflops);
  os << llvm::format("  peak memory per rank %10.2f GiB (of %.1f%s)\n", peakGiB,
                     hw->hbmGiB, peakGiB <= hw->hbmGiB ? "" : ": does not fit");
  os << llvm::format("  compute              %10.4f s  (", total.compute);
  bool firstKind = true;
  for (const auto &[kind, s] : total.byKind) {
    os << (firstKind ? "" : ", ") << kind << llvm::format(" %.4f", s);
    firstKind = false;
  }
  os << ")\n";
  os << llvm::format("  exposed communication%10.4f s\n", total.exposed);
  os << llvm::format("  launch overhead      %10.4f s\n", total.launch);
  if (mesh.pp > 1)
    os << llvm::format("  pipeline bubble      %10.3f\n", total.bubble);
  os << "  the ten most expensive ops (seconds per step, summed):\n";
  for (const auto &[s, op] : top)
    os << llvm::format("    %10.5f  ", s) << op << "\n";
  return 0;
}
