//===- MemoryCheck.h - Will the plan fit on the device? ---------*- C++ -*-===//
//
// Before a backend allocates anything it compares what the compiled plan
// needs (persistent state, the arena, the backend's own buffers) with the
// device's free memory, and refuses with a message naming the largest
// consumers rather than failing an allocation halfway through a step.
// Needs no device: the numbers are the plan's (docs/plan.md, arena and
// live_at_peak), so this is tested on the host.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_MEMORYCHECK_H
#define KILN_RUNTIME_MEMORYCHECK_H

#include "kiln/Runtime/Plan.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::runtime {

struct MemoryConsumer {
  std::string what; // "AdamW moments (exp_avg, exp_avg_sq)", ...
  int64_t bytes = 0;
};

/// What one rank of `plan` holds on a device, largest first: parameters,
/// AdamW moments and FP8 amax histories (persistent state); at the arena's
/// fullest step of its largest entry, activations, gradients and gathered
/// parameter copies, and the rest of the arena (other entries' peaks,
/// alignment); and `backendBytes` (the backend's own buffers: GEMM
/// workspace, scratch, inputs). Consumers of zero bytes are left out.
std::vector<MemoryConsumer> deviceMemoryConsumers(const Plan &plan,
                                                  int64_t backendBytes);

/// The sum of deviceMemoryConsumers.
int64_t predictedDeviceBytes(const Plan &plan, int64_t backendBytes);

/// Empty when the plan fits in `freeBytes`; else one line: what it needs,
/// what is free on `device`, the three largest consumers and what would
/// make it smaller.
std::string memoryShortfall(const Plan &plan, int64_t backendBytes,
                            int64_t freeBytes, const std::string &device);

/// "1.50 GiB", "12.0 MiB", "512 B".
std::string formatBytes(int64_t bytes);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_MEMORYCHECK_H
