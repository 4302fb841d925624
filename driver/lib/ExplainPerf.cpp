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
#include "kiln/Driver/Predict.h"
#include "kiln/Driver/Session.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

using namespace kiln;

int kiln::explainPerf(const ExplainCommand &command) {
  auto target = loadPerfTarget(command.hardware, command.efficiency);
  if (!target)
    return 1;
  const perf::Hardware *hw = &target->first;
  const perf::Efficiency *eff = &target->second;

  PredictOptions options;
  options.cudaGraphs = command.cudaGraphs;
  options.fuse = command.fuse;
  options.eagerLoss = command.eagerLoss;
  std::optional<Config> loaded;
  std::string error;
  std::optional<StepPrediction> predicted =
      predictStep(command.model, command.overrides, command.worldSize, *hw,
                  *eff, options, loaded, error);
  if (!predicted)
    return error.empty() ? 1 : commandError(error);
  const StepPrediction &total = *predicted;
  const Config &config = *loaded;
  MeshShape mesh = total.mesh;
  int64_t world = mesh.ranks();
  double perGpu = total.tokensPerGpu, modelTflops = total.modelTflops,
         mfu = total.mfu, peakGiB = total.peakGiB();
  std::vector<std::pair<double, std::string>> top;
  for (const auto &[op, s] : total.byOp)
    top.push_back({s, op});
  std::sort(top.rbegin(), top.rend());
  top.resize(std::min<size_t>(top.size(), 10));
  // The collectives the compute waits for, the longest first.
  std::vector<std::pair<double, std::string>> exposedBy;
  for (const auto &[what, s] : total.exposedBy)
    if (s > 0)
      exposedBy.push_back({s, what});
  std::sort(exposedBy.rbegin(), exposedBy.rend());

  llvm::raw_ostream &os = llvm::outs();
  if (command.json) {
    llvm::json::Array ops;
    for (const auto &[s, op] : top)
      ops.push_back(llvm::json::Object{{"op", op}, {"seconds", s}});
    llvm::json::Object kinds;
    for (const auto &[kind, s] : total.byKind)
      kinds[kind] = s;
    llvm::json::Object waitedFor;
    for (const auto &[s, what] : exposedBy)
      waitedFor[what] = s;
    llvm::json::Object out{
        {"model", config.sourceName},
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
        {"exposed_comm_by_collective_s", std::move(waitedFor)},
        {"compute_s", total.compute},
        {"launch_s", total.launch},
        {"compute_by_kind_s", std::move(kinds)},
        {"bubble", total.bubble},
        {"top_ops", std::move(ops)}};
    os << llvm::formatv("{0:2}", llvm::json::Value(std::move(out))) << "\n";
    return 0;
  }
  os << "kiln explain --perf: " << config.sourceName << " on " << world << " x "
     << hw->name << " (mesh pp " << mesh.pp << " x dp_shard " << mesh.dpShard
     << " x tp " << mesh.tp << "), efficiency " << eff->name << ", "
     << (command.cudaGraphs ? "CUDA graphs" : "eager launches")
     << (command.eagerLoss && command.fuse ? ", eager loss" : "") << "\n";
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
  for (const auto &[s, what] : exposedBy)
    os << llvm::format("    %10.5f  ", s) << what << "\n";
  os << llvm::format("  launch overhead      %10.4f s\n", total.launch);
  if (mesh.pp > 1)
    os << llvm::format("  pipeline bubble      %10.3f\n", total.bubble);
  os << "  the ten most expensive ops (seconds per step, summed):\n";
  for (const auto &[s, op] : top)
    os << llvm::format("    %10.5f  ", s) << op << "\n";
  return 0;
}
