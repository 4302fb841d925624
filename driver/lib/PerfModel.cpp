//===- PerfModel.cpp - A compiled step's time on a GPU cluster ------------===//
//
// The closed forms of PerfModel.h and the walk over a plan's steps that adds
// them up. docs/perf-model.md states each formula.
//
//===----------------------------------------------------------------------===//

#include "kiln/Driver/PerfModel.h"

#include <algorithm>
#include <cmath>

namespace kiln::perf {

using runtime::DType;
using runtime::Plan;
using runtime::PlanEntry;
using runtime::PlanStep;
using runtime::PlanValue;

namespace {
constexpr double kGiga = 1e9, kTera = 1e12, kMicro = 1e-6;

/// The share of the dtype's peak the GEMM's shape class reaches.
double gemmShare(int64_t smallest, bool fp8, const Efficiency &eff) {
  double share = 0;
  for (const Efficiency::GemmClass &c : eff.gemm)
    if (smallest >= c.minDim)
      share = fp8 ? c.fp8 : c.bf16;
  return share;
}

int64_t lastDim(const PlanValue &v) {
  return v.shape.empty() ? 1 : v.shape.back();
}
} // namespace

double gemmSeconds(int64_t m, int64_t n, int64_t k, DType dtype, int64_t bytes,
                   const Hardware &hw, const Efficiency &eff) {
  bool fp8 = dtype == DType::F8E4M3 || dtype == DType::F8E5M2;
  // f32 operands run on TF32 tensor cores: half the bf16 rate.
  double peak = fp8 ? hw.fp8Tflops
                    : (dtype == DType::F32 ? hw.bf16Tflops / 2 : hw.bf16Tflops);
  double share = gemmShare(std::min({m, n, k}), fp8, eff);
  double flops = 2.0 * double(m) * double(n) * double(k);
  double compute = share > 0 ? flops / (peak * kTera * share) : 0;
  return std::max(compute, memorySeconds(bytes, hw, eff));
}

double memorySeconds(int64_t bytes, const Hardware &hw, const Efficiency &eff) {
  return eff.memory > 0 ? double(bytes) / (hw.hbmGBs * kGiga * eff.memory) : 0;
}

int64_t eagerOpBytes(const std::string &op, int64_t elements, int64_t planBytes,
                     const Efficiency &eff) {
  auto it = eff.eagerBytesPerElement.find(op);
  if (it == eff.eagerBytesPerElement.end())
    return planBytes;
  return std::max(planBytes,
                  static_cast<int64_t>(it->second * double(elements)));
}

int64_t eagerHeldExtraBytes(const std::string &op, int64_t elements,
                            int64_t planBytes, const Efficiency &eff) {
  auto it = eff.eagerHeldPerElement.find(op);
  if (it == eff.eagerHeldPerElement.end())
    return 0;
  double held = it->second * double(elements);
  return std::max<int64_t>(0, static_cast<int64_t>(held) - planBytes);
}

bool isLossOp(const std::string &op) {
  return op.rfind("cross_entropy", 0) == 0 ||
         op.rfind("vocab_parallel_", 0) == 0;
}

double attentionFlops(int64_t batch, int64_t heads, int64_t seq,
                      int64_t headDim, bool causal, bool backward) {
  double flops = 4.0 * double(batch) * double(heads) * double(seq) *
                 double(seq) * double(headDim);
  if (causal)
    flops /= 2;
  return backward ? 2.5 * flops : flops;
}

Link axisLink(int64_t ranks, int64_t stride, const Hardware &hw) {
  int64_t span = ranks * stride;
  int64_t nodes = std::min(ranks, (span + hw.gpusPerNode - 1) / hw.gpusPerNode);
  return {nodes > 1 ? hw.networkGBs : hw.nvlinkGBs, hw.nvlinkLatencyUs,
          hw.networkLatencyUs, std::max<int64_t>(nodes, 1)};
}

double collectiveSeconds(Collective kind, int64_t bytes, int64_t ranks,
                         const Link &link, const Efficiency &eff) {
  if (ranks <= 1 || link.gbs <= 0 || eff.collective <= 0)
    return 0;
  double n = double(ranks), s = double(bytes);
  double beta = 1.0 / (link.gbs * kGiga * eff.collective); // s per byte
  // `steps` in all, `inter` of them across nodes.
  auto latency = [&](double steps, double inter) {
    return ((steps - inter) * link.intraUs + inter * link.interUs) * kMicro;
  };
  double crossings = double(link.nodes - 1);
  switch (kind) {
  case Collective::AllGather:
  case Collective::ReduceScatter:
    return latency(n - 1, crossings) + (n - 1) / n * s * beta;
  case Collective::AllReduce: {
    double ring = latency(2 * (n - 1), 2 * crossings);
    double depth = std::ceil(std::log2(n));
    double treeInter =
        link.nodes > 1 ? 2 * std::ceil(std::log2(double(link.nodes))) : 0;
    double tree = latency(2 * depth, std::min(2 * depth, treeInter));
    return std::min(ring, tree) + 2 * (n - 1) / n * s * beta;
  }
  case Collective::SendRecv:
    return latency(1, link.nodes > 1 ? 1 : 0) + s * beta;
  }
  return 0;
}

namespace {

/// The op eager PyTorch would run for step `s` of an unfused plan: a group
/// of one op is that op; a group of several has none.
std::string eagerOpOf(const PlanStep &s) {
  if (s.kind != plan::Op::Fused)
    return s.op;
  std::string ops = s.str("ops");
  return ops.find(',') == std::string::npos ? ops : "";
}

/// The element count of step `s`'s largest operand or result.
int64_t largestElements(const Plan &plan, const PlanStep &s) {
  int64_t largest = 0;
  for (const std::vector<int64_t> *ids : {&s.operands, &s.results})
    for (int64_t id : *ids)
      largest = std::max(largest, plan.values[id].numElements());
  return largest;
}

/// What eager PyTorch holds while step `s` (eager op `op`) runs beyond
/// what the plan holds for it: the plan's bytes are those of its operands
/// and results of the largest element count (the logits and their
/// gradient). Steps the profile's `[eager_held]` does not list (every step
/// of an unfused plan but the loss's gradient) are not walked.
int64_t eagerLossHeld(const Plan &plan, const PlanStep &s,
                      const std::string &op, const Efficiency &eff) {
  if (!eff.eagerHeldPerElement.count(op))
    return 0;
  int64_t largest = largestElements(plan, s), bytes = 0;
  for (const std::vector<int64_t> *ids : {&s.operands, &s.results})
    for (int64_t id : *ids)
      if (plan.values[id].numElements() == largest)
        bytes += plan.values[id].bytes();
  return eagerHeldExtraBytes(op, largest, bytes, eff);
}

/// One step's device time, and its kind (StepEstimate::byKind);
/// collectives and waits are timed by the caller.
double stepSeconds(const Plan &plan, const PlanStep &s, const Hardware &hw,
                   const Efficiency &eff, bool eagerOps, std::string &kind) {
  auto value = [&](int64_t id) -> const PlanValue & { return plan.values[id]; };
  using plan::Op;
  // A reshape or unflatten whose result the buffer assignment placed on
  // its operand's own bytes is no kernel at all (the CUDA backend's
  // Builder::layout skips it).
  if (s.kind == Op::Reshape || s.kind == Op::Unflatten) {
    const PlanValue &in = value(s.operands[0]), &res = value(s.results[0]);
    int64_t offset = s.kind == Op::Unflatten
                         ? s.i64("offset") * runtime::dtypeBytes(in.dtype)
                         : 0;
    kind = "memory";
    if (in.kind == PlanValue::Arena && res.kind == PlanValue::Arena &&
        in.offset + offset == res.offset)
      return 0;
  }
  // Bytes through HBM: every operand read and result written, but for
  // the ops that read only part of an operand: an unflatten copies its
  // slice of the flat buffer, an embedding reads its rows of the table.
  int64_t bytes = 0;
  for (int64_t id : s.results)
    bytes += value(id).bytes();
  if (s.kind == Op::Unflatten)
    bytes *= 2;
  else if (s.kind == Op::Embedding)
    bytes = 2 * bytes + value(s.operands[1]).bytes();
  else
    for (int64_t id : s.operands)
      bytes += value(id).bytes();
  if (eagerOps)
    bytes = eagerOpBytes(eagerOpOf(s), largestElements(plan, s), bytes, eff);
  auto gemm = [&](DType dtype) {
    kind = dtype == DType::F8E4M3 || dtype == DType::F8E5M2 ? "gemm_fp8"
                                                            : "gemm_bf16";
  };
  kind = "memory";
  switch (s.kind) {
  case Op::Linear: {
    const PlanValue &x = value(s.operands[0]), &w = value(s.operands[1]);
    int64_t k = lastDim(x), n = w.shape[0];
    gemm(x.dtype);
    return gemmSeconds(x.numElements() / k, n, k, x.dtype, bytes, hw, eff);
  }
  case Op::LinearGradInput: {
    const PlanValue &dy = value(s.operands[0]), &w = value(s.operands[1]);
    int64_t n = lastDim(dy), k = w.shape[1];
    gemm(dy.dtype);
    return gemmSeconds(dy.numElements() / n, k, n, dy.dtype, bytes, hw, eff);
  }
  case Op::LinearGradWeight: {
    const PlanValue &dy = value(s.operands[0]), &x = value(s.operands[1]);
    int64_t n = lastDim(dy), k = lastDim(x);
    gemm(dy.dtype);
    return gemmSeconds(n, k, dy.numElements() / n, dy.dtype, bytes, hw, eff);
  }
  case Op::ScaledMatmul: {
    const PlanValue &a = value(s.operands[0]), &b = value(s.operands[2]);
    gemm(a.dtype);
    return gemmSeconds(a.shape[0], b.shape[0], a.shape[1], a.dtype, bytes, hw,
                       eff);
  }
  case Op::Attention:
  case Op::AttentionGrad: {
    bool grad = s.kind == Op::AttentionGrad;
    kind = "attention";
    const PlanValue &q = value(s.operands[grad ? 1 : 0]);
    // q [B, S, H, D]; the plan's attention is causal (docs/plan.md).
    double flops = attentionFlops(q.shape[0], q.shape[2], q.shape[1],
                                  q.shape[3], true, grad);
    double compute =
        eff.attention > 0 ? flops / (hw.bf16Tflops * kTera * eff.attention) : 0;
    return std::max(compute, memorySeconds(bytes, hw, eff));
  }
  default:
    return memorySeconds(bytes, hw, eff);
  }
}

/// What a collective step moves: the whole buffer as collectiveSeconds
/// counts it.
Collective collectiveOf(plan::Op kind) {
  switch (kind) {
  case plan::Op::AllGatherStart:
    return Collective::AllGather;
  case plan::Op::ReduceScatterStart:
    return Collective::ReduceScatter;
  case plan::Op::AllReduceStart:
    return Collective::AllReduce;
  default:
    return Collective::SendRecv;
  }
}

std::string describe(const PlanStep &s) {
  if (s.kind == plan::Op::Fused)
    return "fused (" + s.str("ops") + ")";
  if (s.attrs.count("axis"))
    return s.op + " over " + s.str("axis");
  if (s.kind == plan::Op::PipeSendStart || s.kind == plan::Op::PipeRecvStart)
    return s.op + " over pp";
  return s.op;
}
} // namespace

StepEstimate estimateEntry(const Plan &plan, const PlanEntry &entry,
                           const Hardware &hw, const Efficiency &eff,
                           const Execution &how) {
  StepEstimate e;
  const runtime::PlanMesh &mesh = plan.mesh;
  // Each axis's link and stream (pp's transfers too).
  auto linkOf = [&](plan::Axis axis) {
    int64_t stride = axis == plan::Axis::Tp        ? 1
                     : axis == plan::Axis::DpShard ? mesh.tp
                                                   : mesh.tp * mesh.dpShard;
    return axisLink(mesh.axisSize(axis), stride, hw);
  };
  double launch =
      (how.cudaGraphs ? hw.graphKernelLaunchUs : hw.kernelLaunchUs) * kMicro;
  double now = 0;
  double streamFree[3] = {0, 0, 0};
  std::map<int64_t, double> finishes; // a collective's result -> its end
  std::map<int64_t, std::string> startOf; // ... -> its start's description
  std::string lastUnit;
  auto charge = [&](const PlanStep &s, double seconds) {
    if (!s.attrs.count("kiln.unit")) {
      e.outsideUnitsSeconds += seconds;
      e.afterUnitSeconds[lastUnit] += seconds;
      return;
    }
    lastUnit = s.str("kiln.unit");
    e.unitSeconds[lastUnit] += seconds;
  };
  // Where a step's sums go, once `charge` has seen it: as its time.
  auto sumsOf = [&](const PlanStep &s) -> StepSums & {
    return s.attrs.count("kiln.unit") ? e.unitSums[lastUnit]
                                      : e.afterUnitSums[lastUnit];
  };
  for (const PlanStep &s : entry.steps) {
    plan::Category category = plan::category(s.kind);
    if (category == plan::Category::Wait) {
      double end = finishes[s.operands[0]];
      if (end > now) {
        charge(s, end - now);
        StepSums &sums = sumsOf(s);
        sums.exposed += end - now;
        sums.exposedBy[startOf[s.operands[0]]] += end - now;
        now = end;
      }
      continue;
    }
    if (category == plan::Category::Collective) {
      bool transfer = s.kind == plan::Op::PipeSendStart ||
                      s.kind == plan::Op::PipeRecvStart;
      plan::Axis axis =
          transfer ? plan::Axis::Pp : *plan::parseAxis(s.str("axis"));
      int64_t bytes = s.kind == plan::Op::AllGatherStart ||
                              s.kind == plan::Op::PipeRecvStart
                          ? plan.values[s.results[0]].bytes()
                          : plan.values[s.operands[0]].bytes();
      double seconds = collectiveSeconds(collectiveOf(s.kind), bytes,
                                         transfer ? 2 : mesh.axisSize(axis),
                                         linkOf(axis), eff);
      double &free = streamFree[static_cast<int>(axis)];
      double begin = std::max(now, free);
      free = begin + seconds;
      finishes[s.results[0]] = free;
      startOf[s.results[0]] = describe(s);
      now += launch;
      charge(s, launch);
      StepSums &sums = sumsOf(s);
      sums.byOp[describe(s)] += seconds;
      sums.launch += launch;
      continue;
    }
    std::string kind;
    std::string op = how.eagerOps || how.eagerLoss ? eagerOpOf(s) : "";
    bool eager = how.eagerOps || (how.eagerLoss && isLossOp(op));
    double seconds = stepSeconds(plan, s, hw, eff, eager, kind);
    // Held while the step runs, not summed: one microbatch's loss at a
    // time.
    if (eager)
      e.eagerLossBytes =
          std::max(e.eagerLossBytes, eagerLossHeld(plan, s, op, eff));
    // The host launches each kernel; a kernel shorter than a launch leaves
    // the GPU waiting for the next.
    double spent = std::max(seconds, launch);
    charge(s, spent);
    StepSums &sums = sumsOf(s);
    sums.byKind[kind] += seconds;
    sums.compute += seconds;
    sums.launch += spent - seconds;
    sums.byOp[describe(s)] += seconds;
    now += spent;
  }
  // The step ends when its last collective has too (a wait precedes every
  // use, so only a trailing one can be left).
  for (double free : streamFree)
    now = std::max(now, free);
  e.stepSeconds = now;
  setMemory(e, plan.stateBytes, entry.arenaBytes,
            entry.liveAtPeak.parameterCopies + entry.liveAtPeak.gradients +
                entry.liveAtPeak.activations,
            eff);
  return e;
}

void StepSums::add(const StepSums &other, double scale) {
  compute += scale * other.compute;
  exposed += scale * other.exposed;
  launch += scale * other.launch;
  for (auto [into, from] :
       {std::pair{&byOp, &other.byOp}, std::pair{&byKind, &other.byKind},
        std::pair{&exposedBy, &other.exposedBy}})
    for (const auto &[key, v] : *from)
      (*into)[key] += scale * v;
}

void setMemory(StepEstimate &e, int64_t stateBytes, int64_t arenaBytes,
               int64_t liveBytes, const Efficiency &eff) {
  e.stateBytes = stateBytes;
  e.arenaBytes = arenaBytes;
  e.liveBytes = liveBytes;
  e.reservedBytes =
      static_cast<int64_t>(eff.reservedGiB * double(int64_t(1) << 30));
  e.peakBytes = e.stateBytes + e.arenaBytes + e.reservedBytes;
}

} // namespace kiln::perf
