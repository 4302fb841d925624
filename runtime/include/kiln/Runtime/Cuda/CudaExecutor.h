//===- CudaExecutor.h - Runs a plan on one GPU per rank ---------*- C++ -*-===//
//
// The CUDA backend (docs/cuda.md). At load it checks the plan fits in the
// device's free memory (MemoryCheck.h), allocates the arena and the state
// once, compiles every distinct fused group and the op kernel library with
// NVRTC for the device (through the on-disk cache), and turns each entry of
// the plan into a fixed list of device actions with their addresses
// resolved: group kernels, op kernels (OpKernels.h), cuBLASLt GEMMs
// (Gemm.h), and, for a plan over several ranks, NCCL collectives
// (NcclCommunicator.h), each on its mesh axis's communicator (the world's
// NCCL communicator split with comm::splitMesh; each with its own stream,
// which an event joins to the compute stream), as the plan's schedule
// orders them. None of it has run on a GPU (docs/cuda.md).
//
// An entry's first run launches its actions one by one (it also chooses
// each GEMM's algorithm); its later runs replay a CUDA graph captured from
// the second run, inputs and outputs included (they go through pinned host
// buffers at fixed addresses), unless graphs are turned off. With a trace
// (setTrace), runs are eager and each action is traced with its stream time
// (events around it), named by category (actionCategory, CudaActions.h).
//
// Numerics follow the CPU backend's semantics (every result rounded to its
// dtype) but not its bits: GEMMs sum in cuBLASLt's order, attention in its
// kernel's, exp/log are CUDA's. With setCheckNumerics, every float result
// of every fused group, GEMM and library op is checked on the device into
// one flag (nonFiniteCheckLaunch), read after the run: the first NaN or
// infinity is named as the CPU backend names it ("op N of train_step, ...:
// NaN in its result 0 at element 12"). Unlike the CPU backend, which stops
// at that op, the whole entry has run by then: the state holds the step's
// update, NaN included (the Trainer stops either way, without saving it).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CUDA_CUDAEXECUTOR_H
#define KILN_RUNTIME_CUDA_CUDAEXECUTOR_H

#include "kiln/Runtime/Executor.h"

#include <memory>

namespace kiln::runtime::cuda {

class CudaExecutor final : public Executor {
public:
  /// Checks that the backend runs every op of the plan and that a GPU is
  /// usable; allocation and compilation wait for the rank to be known
  /// (setCommunicator, or the first initialize/run).
  static Expected<std::unique_ptr<CudaExecutor>> create(const Plan &plan);
  ~CudaExecutor() override;

  Error setCommunicator(comm::Communicator *communicator) override;
  int rank() const override;
  Error initialize(uint64_t seed) override;
  Expected<std::vector<FloatTensor>> unshardedState() override;
  Error setUnshardedState(
      const std::map<std::string, const FloatTensor *> &byName) override;
  Expected<EntryOutputs> run(const std::string &entry,
                             const std::vector<int32_t> &tokens,
                             const std::vector<int32_t> &targets,
                             int64_t step) override;
  void setTrace(Trace *trace) override;
  void setCheckNumerics(bool on) override;
  const Plan &plan() const override;
  int64_t allocatedBytes() const override;
  std::string describe() const override;
  std::string memoryReport() const override;
  int64_t peakMemoryBytes() const override;

  /// Replay entries as CUDA graphs after their first run (default on).
  void setGraphs(bool on);
  /// Predicted device bytes, what the backend allocated, and the device's
  /// used memory at its highest seen (cudaMemGetInfo after each run).
  struct Memory {
    int64_t predicted = 0, allocated = 0, deviceUsedPeak = 0;
  };
  Memory memory() const;

  struct State;

private:
  explicit CudaExecutor(std::unique_ptr<State> state);
  std::unique_ptr<State> s;
};

} // namespace kiln::runtime::cuda

#endif // KILN_RUNTIME_CUDA_CUDAEXECUTOR_H
