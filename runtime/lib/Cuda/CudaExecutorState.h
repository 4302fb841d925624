//===- CudaExecutorState.h - What the CUDA executor holds -------*- C++ -*-===//
//
// Internal to the CUDA backend: the executor's state, shared by its three
// files: CudaExecutor.cpp (creating it, the communicator, reports),
// CudaExecutorMemory.cpp (device memory, the plan's states in and out) and
// CudaExecutorRun.cpp (an entry's actions, run eagerly or captured and
// replayed as a CUDA graph, and their trace).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CUDA_CUDAEXECUTORSTATE_H
#define KILN_RUNTIME_CUDA_CUDAEXECUTORSTATE_H

#include "kiln/Runtime/Cuda/CudaExecutor.h"
#include "CudaActions.h"

#include "kiln/Runtime/StateLayout.h"
#include "kiln/Runtime/Trace.h"

#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace kiln::runtime::cuda {

/// Everything the executor holds. Device addresses never change after
/// prepare(), which is what lets actions and graphs keep them.
struct CudaExecutor::State final : DeviceValues {
  explicit State(const Plan &plan) : plan(plan) {}
  ~State() override;

  const Plan &plan;
  comm::Communicator *host = nullptr;
  /// The world's NCCL communicator (a plan over several ranks), and the
  /// mesh's axes made from it by comm::splitMesh: an axis spanning the
  /// world is `nccl` itself, one of one rank a local communicator, the
  /// others ncclCommSplit of `nccl` (each with its own stream). Destroyed
  /// before `nccl` (~State).
  std::unique_ptr<comm::NcclCommunicator> nccl;
  comm::AxisCommunicators axes;
  /// The axes' NCCL communicators, which run the collective steps.
  AxisComms deviceAxes;
  /// The axes' host communicators, which gather checkpoints: each NCCL
  /// axis's host() (the host communicator split alike), a local axis
  /// itself; in a one-rank run the host communicator (or none).
  comm::Communicator *hostDpShard = nullptr, *hostTp = nullptr;
  /// The world rank, and its position on the dp_shard axis (which piece
  /// of each flat shard it holds).
  int rankIndex = 0, shardPosition = 0;
  int device = 0;
  cudaDeviceProp prop{};
  std::string arch;
  bool prepared = false, graphs = true, warnedCapture = false;
  /// The per-op numerics check: a device flag every computing step's
  /// results are checked into, and its pinned host copy.
  bool checkNumerics = false;
  uint64_t *numericsFlag = nullptr, *numericsHost = nullptr;
  cudaStream_t stream = nullptr;

  /// Device memory: the arena, the state, the small values (constants and
  /// per-run inputs), the step scratch; pinned host memory for inputs and
  /// outputs.
  char *arena = nullptr, *states = nullptr, *small = nullptr,
       *scratch = nullptr, *pinned = nullptr;
  int64_t scratchBytes = 0;
  std::map<int64_t, char *> at;       // state, const and input values
  std::map<int64_t, char *> pinnedAt; // inputs and outputs, host side
  std::unique_ptr<Gemms> gemms;
  /// cuDNN's fused SDPA for the attention steps it runs (null: none).
  std::unique_ptr<CudnnAttention> attention;
  std::unique_ptr<LoadedModule> ops;
  std::map<std::string, std::unique_ptr<LoadedModule>> groups;

  struct Entry {
    std::vector<Action> actions;
    int runs = 0;
    cudaGraphExec_t graph = nullptr;
    bool eagerOnly = false;
    /// With a trace: an event before each action and one after the last.
    std::vector<cudaEvent_t> marks;
  };
  std::map<std::string, Entry> entries;
  int64_t allocated = 0, predicted = 0, usedPeak = 0;
  Trace *trace = nullptr;

  void *address(int64_t id) const override {
    const PlanValue &v = plan.values[id];
    if (v.kind == PlanValue::Arena)
      return arena + v.offset;
    return at.at(id);
  }
  int shardIndex() const override { return shardPosition; }

  Error prepare();
  Error allocate();
  Error upload(const HostStates &host);
  Error download(HostStates &host);
  /// One copy between host memory (pageable) and the device; `what`
  /// names it in an error.
  struct Transfer {
    void *dst;
    const void *src;
    int64_t bytes;
    std::string what;
  };
  /// Queues `transfers` on `stream`, then waits once for them all: ordered
  /// after every kernel and collective enqueued before them, which a copy
  /// on the legacy stream is not (the stream is non-blocking).
  Error copyOnStream(const std::vector<Transfer> &transfers,
                     cudaMemcpyKind kind);
  Error buildEntry(const std::string &name, Entry &entry);
  /// Enqueues entry `name` for training step `step` (named in a watchdog
  /// abort of a replay).
  Error launch(const std::string &name, Entry &entry, int64_t step);
  void noteMemory();
  /// Forgets every entry's actions and graph (built again at next use).
  void dropEntries();
  /// Adds each action of the run just finished to the trace: its time on
  /// the stream between its marks, named "<category>: <kernel> op N, <step>"
  /// (actionCategory), placed from `began` by the stream's own clock.
  Error traceActions(const std::string &name, const Entry &entry,
                     Trace::Clock::time_point began);
};

} // namespace kiln::runtime::cuda

#endif // KILN_RUNTIME_CUDA_CUDAEXECUTORSTATE_H
