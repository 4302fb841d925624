//===- PerfModel.h - A compiled step's time on a GPU cluster ----*- C++ -*-===//
//
// The cost model of issue #19 (docs/perf-model.md): what a compiled plan's
// train_step takes on a described GPU, from the hardware's peaks (data files
// under perf/hardware) and the share of them each kind of work reaches (an
// efficiency profile, perf/profiles). Every formula is here, in closed
// form, and nothing runs a GPU: the plan says every GEMM, attention,
// memory-bound kernel and collective, with its shape, dtype and mesh axis,
// and in what order the step starts and waits for them.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DRIVER_PERFMODEL_H
#define KILN_DRIVER_PERFMODEL_H

#include "kiln/Runtime/Plan.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kiln::perf {

/// A GPU and how its cluster connects it (perf/hardware/NAME.toml).
struct Hardware {
  std::string name, source;
  double bf16Tflops = 0, fp8Tflops = 0; // dense tensor-core peaks
  double hbmGBs = 0;                    // HBM bandwidth, 10^9 bytes/s
  double hbmGiB = 0;                    // HBM capacity
  int64_t gpusPerNode = 0;
  /// Per GPU and direction, 10^9 bytes/s: NVLink inside a node, the
  /// network (RDMA) across nodes.
  double nvlinkGBs = 0, networkGBs = 0;
  /// A collective step's latency on each link (the alpha of alpha-beta).
  double nvlinkLatencyUs = 0, networkLatencyUs = 0;
  /// The host's time to launch one kernel, eagerly or inside a CUDA graph.
  double kernelLaunchUs = 0, graphKernelLaunchUs = 0;
  /// The names CUDA gives the GPU (cudaDeviceProp::name), by which kiln
  /// train finds its peak for MFU; optional (`gpu.cuda_names`).
  std::vector<std::string> cudaNames;
};

/// What share of the hardware's peaks each kind of work reaches
/// (perf/profiles/NAME.toml).
struct Efficiency {
  std::string name, source;
  /// GEMMs by shape class: a GEMM whose smallest dimension is at least
  /// `minDim` reaches `bf16` (or `fp8`) of its dtype's peak; the classes are
  /// in increasing `minDim`, the first at 0.
  struct GemmClass {
    int64_t minDim = 0;
    double bf16 = 0, fp8 = 0;
  };
  std::vector<GemmClass> gemm;
  double attention = 0;  // of the bf16 peak, for attention's FLOPs
  double memory = 0;     // of HBM bandwidth, for memory-bound kernels
  double collective = 0; // of a link's bandwidth, for NCCL's bus traffic
  /// Bytes a rank holds besides the plan's state and arena (CUDA context,
  /// cuBLAS workspaces, NCCL buffers, the allocator's slack), GiB.
  double reservedGiB = 0;
  /// How eager PyTorch runs the ops Kiln runs as one kernel even unfused
  /// (`[eager]`, optional): the bytes its decomposition moves per element
  /// of the op's largest operand or result, by plan op name (rms_norm,
  /// rope, cross_entropy and their grads). An unfused plan timed as eager
  /// PyTorch (Execution::eagerOps) uses them all, a fused one with an eager
  /// loss (Execution::eagerLoss) the loss's.
  std::map<std::string, double> eagerBytesPerElement;
  /// What eager PyTorch holds while the loss's gradient runs (`[eager_held]`,
  /// optional): bytes per element of the op's largest operand, by plan op
  /// name (cross_entropy_grad, vocab_parallel_stats_grad: the f32
  /// log-softmax the forward saved, the gradient it receives and the one it
  /// gives). Used as `[eager]` is, and by Execution::eagerLoss.
  std::map<std::string, double> eagerHeldPerElement;
};

/// How a step runs: its kernels launched one by one or replayed as a CUDA
/// graph, and whether its ops move what eager PyTorch's decompositions of
/// them move (the profile's `[eager]`; the plan is then the unfused one).
struct Execution {
  bool cudaGraphs = true;
  bool eagerOps = false;
  /// The loss alone as eager PyTorch runs it, in a fused plan too
  /// (TorchTitan compiles each block and leaves its loss eager): its ops
  /// move what `[eager]` says, and the step holds what `[eager_held]` says.
  bool eagerLoss = false;
};

/// The built-in description `name` (perf/hardware/*.toml, compiled in), or
/// a TOML file at that path; a one-line error naming the file and key.
runtime::Expected<Hardware> loadHardware(const std::string &nameOrPath);
runtime::Expected<Efficiency> loadEfficiency(const std::string &nameOrPath);
/// The built-in names, for messages and --help.
std::vector<std::string> builtinHardware();
/// The built-in hardware whose `gpu.cuda_names` holds `cudaName`, if any.
std::optional<Hardware> hardwareOfCudaDevice(const std::string &cudaName);
std::vector<std::string> builtinEfficiencies();

// --- The closed forms -------------------------------------------------------

/// A GEMM of m x k by k x n moving `bytes` through HBM: the larger of its
/// FLOPs at the reached peak (the shape class's share of the dtype's peak;
/// f32 runs at TF32's, half of bf16's) and its bytes at the reached
/// bandwidth (the roofline: small GEMMs are memory-bound).
double gemmSeconds(int64_t m, int64_t n, int64_t k, runtime::DType dtype,
                   int64_t bytes, const Hardware &hw, const Efficiency &eff);

/// A memory-bound kernel moving `bytes`.
double memorySeconds(int64_t bytes, const Hardware &hw, const Efficiency &eff);

/// What plan op `op` moves, `planBytes` as Kiln's kernel for it, when eager
/// PyTorch runs it: the profile's bytes per element times `elements` (of
/// the op's largest operand or result), or `planBytes` for an op the
/// profile does not list; never less than `planBytes`.
int64_t eagerOpBytes(const std::string &op, int64_t elements, int64_t planBytes,
                     const Efficiency &eff);

/// What eager PyTorch holds while plan op `op` runs beyond `planBytes`
/// (what the plan holds for it: its largest operand and result): the
/// profile's `[eager_held]` bytes per element times `elements`, less
/// `planBytes`; 0 for an op the profile does not list, never negative.
int64_t eagerHeldExtraBytes(const std::string &op, int64_t elements,
                            int64_t planBytes, const Efficiency &eff);

/// Whether plan op `op` is part of the loss (cross entropy, unsharded or
/// vocab-parallel, and its gradient).
bool isLossOp(const std::string &op);

/// Attention's FLOPs: 4 B H S^2 D for Q K^T and P V, half of them under a
/// causal mask; its backward 2.5 times that.
double attentionFlops(int64_t batch, int64_t heads, int64_t seq,
                      int64_t headDim, bool causal, bool backward);

/// What a collective's group runs over: the bandwidth of its slowest link,
/// the latency of a step between two GPUs of one node and between nodes,
/// and how many nodes the group spans.
struct Link {
  double gbs = 0, intraUs = 0, interUs = 0;
  int64_t nodes = 1;
};
/// The link of a mesh axis whose groups are `ranks` ranks `stride` apart
/// (tp: stride 1; dp_shard: tp; pp: dp_shard x tp): a group spans
/// ceil(ranks x stride / GPUs per node) nodes, at most `ranks`; NVLink's
/// bandwidth when it fits in one, else the network's.
Link axisLink(int64_t ranks, int64_t stride, const Hardware &hw);

enum class Collective { AllGather, ReduceScatter, AllReduce, SendRecv };

/// NCCL's alpha-beta cost over `ranks` ranks of `link`, `bytes` the whole
/// buffer (an all-gather's result, a reduce-scatter's input, an
/// all-reduce's buffer, a send's message). Ring: an all-gather or
/// reduce-scatter takes n - 1 steps carrying (n - 1) / n of the buffer
/// (its bus bandwidth factor), an all-reduce 2 (n - 1) steps carrying
/// 2 (n - 1) / n; a tree all-reduce 2 ceil(log2 n) steps carrying
/// 2 (n - 1) / n; NCCL takes the faster. As NCCL's own tuning counts them,
/// the steps that cross nodes (a ring's nodes - 1, twice for an
/// all-reduce; a tree's 2 ceil(log2 nodes)) take the network's latency and
/// the others NVLink's. A send (or ring step) is one step carrying the
/// message. One rank costs nothing.
double collectiveSeconds(Collective kind, int64_t bytes, int64_t ranks,
                         const Link &link, const Efficiency &eff);

// --- A compiled step --------------------------------------------------------

/// What a stretch of a step's steps adds up to: compute, the time spent
/// waiting for collectives, launches that outlast their kernels, and those
/// by op, by compute kind and by the collective waited for.
struct StepSums {
  double compute = 0; // GEMMs, attention, memory-bound kernels
  double exposed = 0; // waiting for collectives
  double launch = 0;  // launches that outlast their kernels
  /// Every step's time, by the step's description.
  std::map<std::string, double> byOp;
  /// Compute time by kind: "gemm_bf16" (f32 and f16 too), "gemm_fp8",
  /// "attention", "memory" (everything memory-bound).
  std::map<std::string, double> byKind;
  /// The exposed communication by the collective waited for (its start
  /// step's description: "reduce_scatter_start over tp").
  std::map<std::string, double> exposedBy;

  /// Adds `scale` times `other`.
  void add(const StepSums &other, double scale = 1);
};

struct StepEstimate {
  /// The step's time: compute, launches and the communication that no
  /// compute hides, in the plan's order.
  double stepSeconds = 0;
  /// Time per pipeline unit (`kiln.unit`), and outside any unit.
  std::map<std::string, double> unitSeconds;
  double outsideUnitsSeconds = 0;
  /// That outside time by the unit last run before it ("": before any),
  /// such as a gradient's accumulation after its microbatch's backward.
  std::map<std::string, double> afterUnitSeconds;
  /// The step's sums (StepSums), split as the time is: each unit's, and
  /// what runs outside units by the unit last run before it. A pipeline step's
  /// microbatches repeat them (kiln plan's probes run fewer than the step).
  std::map<std::string, StepSums> unitSums, afterUnitSums;
  /// State + the arena + the profile's reserve.
  int64_t peakBytes = 0;
  /// Its parts: the plan's state, the entry's arena, the bytes live at the
  /// arena's fullest step (the arena is that plus what first-fit placement
  /// leaves unused), the reserve.
  int64_t stateBytes = 0, arenaBytes = 0, liveBytes = 0, reservedBytes = 0;
  /// What eager PyTorch holds at the loss's gradient beyond what the plan
  /// holds there (eagerHeldExtraBytes; the most of any one step, 0 unless
  /// the loss runs eagerly).
  int64_t eagerLossBytes = 0;
};

/// `entry` of `plan` on `hw` reaching `eff`, run as `how` says. Compute
/// runs in the plan's order on one stream; each collective runs on its
/// mesh axis's own stream in issue order, from its start, and its wait
/// holds the compute until it has finished.
StepEstimate estimateEntry(const runtime::Plan &plan,
                           const runtime::PlanEntry &entry, const Hardware &hw,
                           const Efficiency &eff, const Execution &how);

/// A step's memory (StepEstimate's bytes): the plan's state, the entry's
/// arena and the bytes live at its fullest step, and the profile's reserve.
void setMemory(StepEstimate &estimate, int64_t stateBytes, int64_t arenaBytes,
               int64_t liveBytes, const Efficiency &eff);

} // namespace kiln::perf

#endif // KILN_DRIVER_PERFMODEL_H
