//===- CpuExecutor.h - Runs a plan on the CPU -------------------*- C++ -*-===//
//
// The reference backend: every step of an entry in order, fp32 math, each
// result rounded to its dtype (bf16 round-to-nearest-even), OpenBLAS GEMMs
// (Kiln's portable GEMM in builds without OpenBLAS). Deterministic for a
// given thread count.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CPU_CPUEXECUTOR_H
#define KILN_RUNTIME_CPU_CPUEXECUTOR_H

#include "kiln/Runtime/Executor.h"
#include "kiln/Runtime/StateLayout.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kiln::runtime {

/// A tensor the executor hands to an op: its storage and element type.
struct View {
  void *data = nullptr;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  int64_t numElements() const;
  float *f32() const { return static_cast<float *>(data); }
  int32_t *i32() const { return static_cast<int32_t *>(data); }
  int64_t *i64() const { return static_cast<int64_t *>(data); }
};

class CpuExecutor final : public Executor {
public:
  /// Checks that every step's op is one this backend runs and that state is
  /// f32; on failure returns nothing and sets `error`.
  static Expected<std::unique_ptr<CpuExecutor>> create(const Plan &plan);

  Error setCommunicator(comm::Communicator *communicator) override;
  int rank() const override { return rankIndex; }
  Error initialize(uint64_t seed) override;
  Expected<std::vector<FloatTensor>> unshardedState() override;
  comm::Communicator *pipelineCommunicator() override {
    return planRef.mesh.pp > 1 ? axes.pp : nullptr;
  }
  Error setUnshardedState(
      const std::map<std::string, const FloatTensor *> &byName) override;
  /// Fails on a token out of range, or a non-finite value when checking is
  /// on (naming the op).
  Expected<EntryOutputs> run(const std::string &entry,
                             const std::vector<int32_t> &tokens,
                             const std::vector<int32_t> &targets,
                             int64_t step) override;
  void setTrace(Trace *t) override { trace = t; }
  /// Off by default: one more pass over memory per step.
  void setCheckNumerics(bool on) override { checkNumerics = on; }
  const Plan &plan() const override { return planRef; }
  /// Persistent state and the arena (what `kiln explain --memory`
  /// predicts); per-op scratch for widening bf16 comes on top.
  int64_t allocatedBytes() const override;
  std::string describe() const override;

  /// The persistent tensor `name` (a parameter or an optimizer moment).
  std::vector<float> *state(const std::string &name);

private:
  explicit CpuExecutor(const Plan &plan);
  View view(int64_t id);
  Error runShardOp(const PlanStep &step,
                   std::vector<std::vector<float>> &scratch);
  Error runStep(const PlanStep &step, std::vector<std::vector<float>> &scratch);

  const Plan &planRef;
  HostStates states;
  std::vector<int32_t> tokensBuf, targetsBuf;
  int64_t stepValue = 0;
  std::map<int64_t, float> consts;
  std::unique_ptr<float[]> arena; // aligned storage, arenaBytes long
  int64_t arenaFloats = 0;
  bool checkNumerics = false;
  comm::Communicator *communicator = nullptr;
  /// The communicators of the plan's mesh axes (splitMesh): each
  /// collective step runs on its `axis`'s.
  comm::AxisCommunicators axes;
  int rankIndex = 0;
  /// This rank's position on the dp_shard axis: which shard of each flat
  /// buffer it holds.
  int shardIndex = 0;
  /// Collectives in flight, by the value id of their result: the
  /// communicator, the handle and the divisor of a mean (1 otherwise).
  struct Pending {
    comm::Communicator *comm = nullptr;
    comm::CommHandle handle;
    int64_t divisor = 1;
    // For the trace: the collective, when it started, whether its end
    // has been recorded.
    std::string name;
    Trace::Track track = Trace::Communication; // its mesh axis's
    Trace::Clock::time_point started;
    bool recorded = false;
  };
  Trace *trace = nullptr;
  /// Records the end of every traced collective that has completed.
  void traceCompleted();
  std::map<int64_t, Pending> pending;
  Error startCollective(const PlanStep &step);
  /// A pipeline transfer (pipe_send_start, pipe_recv_start) over pp.
  Error startTransfer(const PlanStep &step);
  Error waitCollective(const PlanStep &step);
};

} // namespace kiln::runtime

#endif // KILN_RUNTIME_CPU_CPUEXECUTOR_H
