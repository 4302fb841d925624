//===- Executor.h - What runs a plan: the backends' interface ---*- C++ -*-===//
//
// The Trainer, the sampler and the tools drive a plan through this
// interface; the CPU backend (CpuExecutor.h, the reference) and the CUDA
// backend (Cuda/CudaExecutor.h) implement it. Every backend keeps the
// plan's persistent state in f32 and gives outputs as f32 on the host.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_EXECUTOR_H
#define KILN_RUNTIME_EXECUTOR_H

#include "kiln/Runtime/Comm/Communicator.h"
#include "kiln/Runtime/Plan.h"
#include "kiln/Runtime/Safetensors.h"
#include "kiln/Runtime/Support/Error.h"
#include "kiln/Runtime/Trace.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace kiln::runtime {

/// An entry's outputs by name (loss, grad_norm, lr, or grad:<param>
/// flattened).
using EntryOutputs = std::map<std::string, std::vector<float>>;

class Executor {
public:
  virtual ~Executor();

  /// The ranks a plan with `ranks` > 1 runs on: a host-memory communicator
  /// (MPI or local; not owned) of plan().ranks ranks. Without one the plan
  /// must have one rank. Fails saying why not.
  virtual Error setCommunicator(comm::Communicator *communicator) = 0;
  virtual int rank() const = 0;

  /// Runs the `init` entry: every state value from its `init` and `seed`.
  /// A sharded state gets the elements of its rank's piece of the flat
  /// buffer, as if the whole buffer had been initialised.
  virtual Error initialize(uint64_t seed) = 0;

  /// Every state in the unsharded layout (a sharded state is all-gathered
  /// and cut into its parts: every rank must call this, in step). Names are
  /// parameter names and exp_avg.<param> / exp_avg_sq.<param>.
  virtual Expected<std::vector<FloatTensor>> unshardedState() = 0;
  /// Under pipeline parallel (a plan with pp > 1), once setCommunicator
  /// has split the mesh: this rank's pp axis, which checkpoints gather
  /// the stages over (Train/Stages.h). Null otherwise, and on backends
  /// that do not run pipeline-parallel plans.
  virtual comm::Communicator *pipelineCommunicator() { return nullptr; }
  /// Sets every state from tensors in the unsharded layout, each rank
  /// keeping its shard. `byName` must hold every name unshardedState gives.
  virtual Error setUnshardedState(
      const std::map<std::string, const FloatTensor *> &byName) = 0;

  /// Runs `entry` with `tokens` and `targets` ([batch, seq]) and the 1-based
  /// step number. Returns the entry's outputs, or an error naming the step
  /// and the model component when an op fails.
  virtual Expected<EntryOutputs> run(const std::string &entry,
                                     const std::vector<int32_t> &tokens,
                                     const std::vector<int32_t> &targets,
                                     int64_t step) = 0;

  /// Record every step and collective of later runs into `trace` (not
  /// owned; null stops recording).
  virtual void setTrace(Trace *trace) = 0;
  /// Check every op's result for NaN and infinity, where the backend can.
  virtual void setCheckNumerics(bool on) = 0;

  virtual const Plan &plan() const = 0;
  /// Bytes held for persistent state, the arena and the backend's own
  /// buffers.
  virtual int64_t allocatedBytes() const = 0;
  /// One line for the start of a run: "CPU, 2 threads", "CUDA, NVIDIA H100
  /// (sm_90), 80.0 GiB", with what memory the run holds where that matters.
  virtual std::string describe() const = 0;
  /// After a run: the memory the backend predicted and measured, where it
  /// measures any ("" for the CPU backend).
  virtual std::string memoryReport() const { return ""; }
  /// The most memory the run has held on its device so far: the CPU
  /// backend's allocations (fixed by the plan), or on a GPU the most in
  /// use on the device at any step (cudaMemGetInfo, CUDA's own included).
  virtual int64_t peakMemoryBytes() const { return allocatedBytes(); }
};

struct ExecutorOptions {
  /// CUDA: replay each entry as a CUDA graph after its first run.
  bool cudaGraphs = true;
};

/// Whether `plan` runs on `communicator` (none: one rank) as rank
/// `communicator->rank()`: the run has the plan's ranks, and the rank sits
/// at the plan's tp position (rank % tp == Plan::tpIndex; a plan with tp >
/// 1 is one position's). Every backend's setCommunicator asks this first;
/// the error says how to start the run instead.
Error checkRunFits(const Plan &plan, const comm::Communicator *communicator);

/// The backends this build has: "cpu", and "cuda" with the CUDA backend.
std::vector<std::string> executorBackends();

/// An executor of `backend` ("cpu" or "cuda") for `plan`, or a one-line
/// error when the backend is unknown, not built, has no device, or cannot
/// run the plan.
Expected<std::unique_ptr<Executor>>
createExecutor(const Plan &plan, const std::string &backend,
               const ExecutorOptions &options = {});

} // namespace kiln::runtime

#endif // KILN_RUNTIME_EXECUTOR_H
