//===- CudaActions.h - A plan entry as a list of device actions -*- C++ -*-===//
//
// Internal to the CUDA backend. An entry of the plan becomes, once at load,
// a list of actions whose device addresses are all resolved (the arena and
// the state never move), so running the entry is enqueueing the list, and
// capturing that enqueueing once gives the CUDA graph later runs replay.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CUDA_CUDAACTIONS_H
#define KILN_RUNTIME_CUDA_CUDAACTIONS_H

#include "CudnnAttention.h"

#include "kiln/Runtime/Comm/NcclCommunicator.h"
#include "kiln/Runtime/Cuda/Gemm.h"
#include "kiln/Runtime/Plan.h"
#include "kiln/Runtime/Support/Error.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace kiln::runtime::cuda {

/// A loaded CUBIN and the kernels taken from it by name.
class LoadedModule {
public:
  /// Loads `cubin`.
  static Expected<std::unique_ptr<LoadedModule>> load(const std::string &cubin);
  ~LoadedModule();
  /// The kernel `name`; an error when the module lacks it.
  Expected<cudaKernel_t> kernel(const std::string &name);

private:
  cudaLibrary_t library = nullptr;
  std::map<std::string, cudaKernel_t> kernels;
};

struct Action {
  enum Kind {
    Launch,     // a kernel: params point into `args` (and `extra`)
    Memset,     // dst, bytes
    Copy,       // dst <- src, bytes (device to device, or pinned host)
    Linear,     // gemm: op, dtype, a, b, c, m, k, n
    Scaled,     // scaled: an FP8 GEMM
    Collective, // start on the communication stream
    Wait,       // the compute stream waits for a collective
    Sdpa,       // cuDNN's fused attention: `sdpa`, the tensors in `args`
  } kind = Launch;
  size_t step = 0; // the plan step it comes from (for messages)

  // Launch
  cudaKernel_t kernel = nullptr; // null when built as a dry run
  std::string kernelName;
  dim3 grid = {1, 1, 1}, block = {1, 1, 1};
  unsigned shared = 0;
  std::vector<uint64_t> args; // the one by-value struct parameter
  bool hasExtra = false;      // a second parameter, an int
  int extra = 0;

  // Memset / Copy
  void *dst = nullptr;
  const void *src = nullptr;
  int64_t bytes = 0;

  // Linear
  enum class Gemm { Forward, GradInput, GradWeight } gemm = Gemm::Forward;
  DType dtype = DType::BF16;
  const void *a = nullptr, *b = nullptr;
  void *c = nullptr;
  int64_t m = 0, k = 0, n = 0;

  // Scaled
  Gemms::Scaled scaled;

  // Sdpa: the graph; args holds the tensors' addresses in SdpaSlot order.
  const SdpaGraph *sdpa = nullptr;

  // Collective / Wait: the collective is named by its result's value id.
  /// AllGatherStart, ReduceScatterStart, AllReduceStart or SendRecvStart.
  plan::Op collective = plan::Op::AllReduceStart;
  /// The mesh axis whose communicator runs it (the step's `axis`).
  plan::Axis axis = plan::Axis::DpShard;
  int64_t resultId = 0;
  comm::ElementType element = comm::ElementType::F32;
  comm::ReduceOp reduce = comm::ReduceOp::Sum;
  int64_t count = 0;
  int shift = 0; // SendRecvStart's
};

/// Where the executor keeps each value on the device.
class DeviceValues {
public:
  virtual ~DeviceValues() = default;
  virtual void *address(int64_t valueId) const = 0;
  /// This rank's position on the dp_shard axis: which piece of each flat
  /// shard it holds (shard_amax, shard_quantize).
  virtual int shardIndex() const = 0;
};

/// The NCCL communicator of each mesh axis a plan's collectives run on:
/// null for an axis of one rank (its collectives are copies, and the
/// actions have none) and for a one-rank run. The world's communicator is
/// the axis that spans the world; the others are split from it.
struct AxisComms {
  comm::NcclCommunicator *dpShard = nullptr, *tp = nullptr;
  comm::NcclCommunicator *of(plan::Axis axis) const {
    return axis == plan::Axis::Tp ? tp : dpShard;
  }
};

/// What building actions needs from the executor: addresses, the loaded
/// kernels, the step scratch.
struct ActionContext {
  const Plan *plan = nullptr;
  const DeviceValues *values = nullptr;
  /// The op kernel library.
  LoadedModule *ops = nullptr;
  /// A fused step's loaded kernels (by its group's source).
  std::map<std::string, std::unique_ptr<LoadedModule>> *groups = nullptr;
  std::string arch;
  std::string cacheDir;
  void *scratch = nullptr; // shared by every step (they run in order)
  int64_t scratchBytes = 0;
  /// The attention steps cuDNN's fused SDPA runs (CudnnAttention.h, built
  /// at load); null, or a step it has no graph for: the attention kernels.
  const SdpaGraphs *attention = nullptr;
  /// The per-op numerics check (nonFiniteCheckLaunch): with a flag, every
  /// float result of every computing step is checked into it.
  void *numericsFlag = nullptr;
  /// Build without a device (a check of the actions on the host): no
  /// kernel is compiled or looked up, so `ops` and `groups` may be null
  /// and every Launch's `kernel` is null; everything else is as for a run.
  bool dryRun = false;
};

/// Whether cuBLASLt runs `op` (the linears and the scaled GEMM).
bool isGemm(plan::Op op);

/// The scratch bytes `plan`'s steps need at most at position `shardIndex`
/// of the dp_shard axis (op kernels' scratch, column-sum partials), so it
/// can be allocated before building actions.
Expected<int64_t> scratchBytesNeeded(const Plan &plan, int shardIndex);

/// The f32 bytes of `plan`'s largest scaled_matmul output: what the GEMMs'
/// rowwise fallback may need (Gemms::reserveFallbackScratch).
int64_t fallbackScratchBytes(const Plan &plan);

/// The actions of `entry`. Compiles and loads group kernels it meets for
/// the first time into ctx.groups. On failure, an error naming the step.
Expected<std::vector<Action>> buildActions(const ActionContext &ctx,
                                           const std::string &entry);

/// Enqueues `actions` on `stream`; each collective goes through its axis's
/// communicator in `comms` (each on its own stream, joined to `stream` by
/// events at the start and at the wait). With `marks` (actions.size() + 1
/// events), event i is recorded on `stream` before action i and the last
/// after the last action, so consecutive marks time each action on the
/// stream (any idle time before it starts included). The first error,
/// naming the step.
Error enqueueActions(const Plan &plan, const std::string &entry,
                     const std::vector<Action> &actions, Gemms &gemms,
                     const AxisComms &comms, cudaStream_t stream,
                     const std::vector<cudaEvent_t> *marks = nullptr);

/// What an action's time counts as in a breakdown: "GEMM", "FP8 GEMM",
/// "attention" (the kernels and cuDNN's SDPA), "fused groups", "AdamW",
/// "numerics check", "other op kernels", "copies and memsets",
/// "collectives".
const char *actionCategory(const Action &a);

/// "CUDA error: <what> (<name>)".
std::string cudaProblem(const std::string &what, cudaError_t e);

} // namespace kiln::runtime::cuda

#endif // KILN_RUNTIME_CUDA_CUDAACTIONS_H
