//===- MemoryCheck.cpp - Will the plan fit on the device? -----------------===//

#include "kiln/Runtime/MemoryCheck.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace kiln::runtime {

std::string formatBytes(int64_t bytes) {
  char text[32];
  double b = static_cast<double>(bytes);
  if (bytes >= (int64_t(1) << 30))
    std::snprintf(text, sizeof text, "%.2f GiB", b / (1 << 30));
  else if (bytes >= (1 << 20))
    std::snprintf(text, sizeof text, "%.1f MiB", b / (1 << 20));
  else if (bytes >= (1 << 10))
    std::snprintf(text, sizeof text, "%.1f KiB", b / (1 << 10));
  else
    std::snprintf(text, sizeof text, "%lld B", static_cast<long long>(bytes));
  return text;
}

std::vector<MemoryConsumer>
deviceMemoryConsumers(const Plan &plan, int64_t backendBytes,
                      const std::string &backendWhat) {
  int64_t params = 0, moments = 0, histories = 0;
  for (const PlanValue &v : plan.values) {
    if (v.kind != PlanValue::State)
      continue;
    if (v.name.rfind("fp8_amax_history.", 0) == 0)
      histories += v.bytes();
    else if (isOptimizerState(v.name))
      moments += v.bytes();
    else
      params += v.bytes();
  }
  // The arena is as large as its largest entry's; what that entry holds at
  // its fullest step is what the plan recorded.
  const PlanEntry *largest = nullptr;
  std::string largestName;
  for (const auto &[name, entry] : plan.entries)
    if (!largest || entry.arenaBytes > largest->arenaBytes) {
      largest = &entry;
      largestName = name;
    }
  std::vector<MemoryConsumer> out = {
      {"parameters", params},
      {"AdamW moments (exp_avg, exp_avg_sq)", moments},
      {"FP8 amax histories", histories},
  };
  int64_t recorded = 0;
  if (largest) {
    const LiveAtPeak &p = largest->liveAtPeak;
    std::string at = " at the fullest step of " + largestName;
    out.push_back({"activations" + at, p.activations});
    out.push_back({"gradients" + at, p.gradients});
    out.push_back({"gathered parameter copies" + at, p.parameterCopies});
    recorded = p.activations + p.gradients + p.parameterCopies;
  }
  out.push_back({"rest of the arena (other steps' buffers, alignment)",
                 std::max<int64_t>(0, plan.arenaBytes - recorded)});
  out.push_back({backendWhat, backendBytes});
  out.erase(std::remove_if(out.begin(), out.end(),
                           [](const MemoryConsumer &c) { return c.bytes <= 0; }),
            out.end());
  std::stable_sort(out.begin(), out.end(),
                   [](const MemoryConsumer &a, const MemoryConsumer &b) {
                     return a.bytes > b.bytes;
                   });
  return out;
}

int64_t predictedDeviceBytes(const Plan &plan, int64_t backendBytes) {
  int64_t total = 0;
  for (const MemoryConsumer &c : deviceMemoryConsumers(plan, backendBytes))
    total += c.bytes;
  return total;
}

Error memoryShortfall(const Plan &plan, int64_t backendBytes, int64_t freeBytes,
                      const std::string &device, const std::string &backendWhat,
                      const MemoryReserve &reserve) {
  std::vector<MemoryConsumer> consumers =
      deviceMemoryConsumers(plan, backendBytes, backendWhat);
  int64_t total = reserve.bytes;
  for (const MemoryConsumer &c : consumers)
    total += c.bytes;
  if (total <= freeBytes)
    return Error::success();
  std::string text = "the plan needs " + formatBytes(total) +
                     " of memory per rank but " + formatBytes(freeBytes) +
                     " are free on " + device + "; the largest: ";
  for (size_t i = 0; i < consumers.size() && i < 3; ++i)
    text += (i ? ", " : "") + consumers[i].what + " " +
            formatBytes(consumers[i].bytes);
  if (reserve.bytes > 0)
    text += "; with " + formatBytes(reserve.bytes) + " kept free for " +
            reserve.what;
  // FSDP divides the state (parameters, moments, histories) by the ranks;
  // the rest stays. When the rest fits, say how many ranks would do.
  int64_t state = 0;
  for (const PlanValue &v : plan.values)
    if (v.kind == PlanValue::State)
      state += v.bytes();
  int64_t rest = total - state, room = freeBytes - rest;
  std::string advice;
  if (room > 0 && state > 0) {
    // The whole state over r ranks: plan.ranks * state / r <= room.
    double whole = static_cast<double>(state) * plan.ranks;
    double ranks = std::ceil(whole / static_cast<double>(room));
    if (ranks <= static_cast<double>(plan::kMaxRanks))
      advice = "sharded over " + std::to_string(static_cast<int64_t>(ranks)) +
               " ranks (mpirun -np N, or --world-size N to compile for N) "
               "the state would fit; ";
  }
  return Error(
      text + " (" + advice +
      "activation checkpointing ([activation_checkpoint] mode), FP8 "
      "([float8] enable), a smaller batch or a smaller model need less; "
      "`kiln explain --memory` itemises it)");
}

std::optional<int64_t> hostAvailableBytes(std::string &where) {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  int64_t kib = -1;
  while (std::getline(meminfo, line))
    if (std::sscanf(line.c_str(), "MemAvailable: %lld kB",
                    reinterpret_cast<long long *>(&kib)) == 1)
      break;
  if (kib < 0)
    return std::nullopt;
  int64_t ranks = 1;
  if (const char *local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE"))
    ranks = std::max(1, std::atoi(local));
  where = "this machine (MemAvailable" +
          (ranks > 1 ? ", shared by " + std::to_string(ranks) + " ranks"
                     : std::string()) +
          ")";
  return kib * 1024 / ranks;
}

int64_t cpuBackendBytes(const Plan &plan) {
  int64_t scratch = 0;
  for (const auto &[name, entry] : plan.entries)
    for (const PlanStep &step : entry.steps) {
      if (step.group || plan::category(step.kind) != plan::Category::Library)
        continue;
      int64_t bytes = 0;
      for (const auto *ids : {&step.operands, &step.results})
        for (int64_t id : *ids) {
          const PlanValue &v = plan.values[id];
          if (v.dtype != DType::F32 && v.dtype != DType::I32 &&
              v.dtype != DType::I64)
            bytes += v.numElements() * 4;
        }
      scratch = std::max(scratch, bytes);
    }
  int64_t inputs = 0, unsharded = 0;
  for (const PlanValue &v : plan.values) {
    if (v.kind == PlanValue::Input)
      inputs += v.bytes();
    if (v.kind != PlanValue::State)
      continue;
    // A checkpoint gathers every rank's whole tensors: flat shards over
    // dp_shard, tp slices over tp.
    bool sliced = v.tp || std::any_of(v.shardOf.begin(), v.shardOf.end(),
                                      [](const ShardPart &p) { return p.tp; });
    unsharded += v.bytes() * (v.shardOf.empty() ? 1 : plan.mesh.dpShard) *
                 (sliced ? plan.mesh.tp : 1);
  }
  return scratch + inputs + unsharded;
}

} // namespace kiln::runtime
