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
#include <optional>
#include <string>
#include <vector>

namespace kiln::runtime {

/// What a GPU backend's own buffers are, and the CPU backend's.
inline const char *const kDeviceBackendBuffers =
    "the backend's buffers (GEMM workspace, scratch, inputs)";
inline const char *const kCpuBackendBuffers =
    "the CPU backend's buffers (f32 copies of bf16 and FP8 operands, "
    "inputs, the checkpoint's copy of the state)";

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
std::vector<MemoryConsumer> deviceMemoryConsumers(
    const Plan &plan, int64_t backendBytes,
    const std::string &backendWhat = kDeviceBackendBuffers);

/// The sum of deviceMemoryConsumers.
int64_t predictedDeviceBytes(const Plan &plan, int64_t backendBytes);

/// Memory kept free at the check for what is allocated after it.
struct MemoryReserve {
  int64_t bytes = 0;
  std::string what; // "kernel modules, CUDA graphs, NCCL's buffers"
};

/// Success when the plan and `reserve` fit in `freeBytes`; else one line:
/// what it needs, what is free on `device`, the three largest consumers,
/// the reserve, and what would make it fit: how many ranks would shard the
/// state small enough, when that alone would do, else activation
/// checkpointing, FP8, a smaller batch or model.
Error memoryShortfall(const Plan &plan, int64_t backendBytes, int64_t freeBytes,
                      const std::string &device,
                      const std::string &backendWhat = kDeviceBackendBuffers,
                      const MemoryReserve &reserve = {});

/// Host memory this process may use: /proc/meminfo's MemAvailable, shared
/// evenly among the ranks Open MPI started on this machine
/// (OMPI_COMM_WORLD_LOCAL_SIZE). Nothing, when /proc/meminfo cannot be
/// read; `where` says what the number is ("this machine (MemAvailable,
/// 1 of 2 ranks)").
std::optional<int64_t> hostAvailableBytes(std::string &where);

/// What the CPU backend holds besides the arena and the state: its
/// scratch for widening the largest step's bf16 and FP8 operands and
/// results to f32, the step's inputs, and the unsharded copy of the state a
/// checkpoint is written from.
int64_t cpuBackendBytes(const Plan &plan);

/// "1.50 GiB", "12.0 MiB", "512 B".
std::string formatBytes(int64_t bytes);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_MEMORYCHECK_H
