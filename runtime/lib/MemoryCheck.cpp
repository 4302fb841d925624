//===- MemoryCheck.cpp - Will the plan fit on the device? -----------------===//

#include "kiln/Runtime/MemoryCheck.h"

#include <algorithm>
#include <cstdio>

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

std::vector<MemoryConsumer> deviceMemoryConsumers(const Plan &plan,
                                                  int64_t backendBytes) {
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
  out.push_back({"the backend's buffers (GEMM workspace, scratch, inputs)",
                 backendBytes});
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

std::string memoryShortfall(const Plan &plan, int64_t backendBytes,
                            int64_t freeBytes, const std::string &device) {
  std::vector<MemoryConsumer> consumers =
      deviceMemoryConsumers(plan, backendBytes);
  int64_t total = 0;
  for (const MemoryConsumer &c : consumers)
    total += c.bytes;
  if (total <= freeBytes)
    return "";
  std::string text = "the plan needs " + formatBytes(total) +
                     " of device memory per rank but " +
                     formatBytes(freeBytes) + " are free on " + device +
                     "; the largest: ";
  for (size_t i = 0; i < consumers.size() && i < 3; ++i)
    text += (i ? ", " : "") + consumers[i].what + " " +
            formatBytes(consumers[i].bytes);
  return text + " (more ranks, activation checkpointing or a smaller batch "
                "would need less; `kiln explain --memory` itemises it)";
}

} // namespace kiln::runtime
