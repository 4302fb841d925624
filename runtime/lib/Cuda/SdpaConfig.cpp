//===- SdpaConfig.cpp - A plan's attention step as cuDNN SDPA -------------===//
//
// The mapping of SdpaConfig.h (no CUDA here), the reasons a step stays on
// the hand-written kernels, and the one line that says which attention
// runs.
//
//===----------------------------------------------------------------------===//

#include "SdpaConfig.h"

#include <cstdio>
#include <mutex>
#include <set>

namespace kiln::runtime::cuda {

SdpaTensor SdpaConfig::query() const {
  return {{batch, heads, seq, headDim},
          {seq * heads * headDim, headDim, heads * headDim, 1}};
}

SdpaTensor SdpaConfig::keyValue() const {
  return {{batch, kvHeads, seq, headDim},
          {seq * kvHeads * headDim, headDim, kvHeads * headDim, 1}};
}

SdpaTensor SdpaConfig::stats() const {
  return {{batch, heads, seq, 1}, {heads * seq, seq, 1, 1}};
}

std::string SdpaConfig::describe() const {
  char text[200];
  std::snprintf(text, sizeof text,
                "%s of batch %lld, %lld heads (%lld kv), seq %lld, dim %lld, "
                "%s, %s, scale %g",
                backward ? "attention_grad" : "attention",
                static_cast<long long>(batch), static_cast<long long>(heads),
                static_cast<long long>(kvHeads), static_cast<long long>(seq),
                static_cast<long long>(headDim), dtypeName(dtype),
                causal ? "causal" : "not causal", static_cast<double>(scale));
  return text;
}

bool isAttention(plan::Op op) {
  return op == plan::Op::Attention || op == plan::Op::AttentionGrad;
}

std::vector<int64_t> sdpaTensorIds(const PlanStep &step) {
  if (step.kind == plan::Op::Attention)
    return {step.operands.at(0), step.operands.at(1), step.operands.at(2),
            step.results.at(0), step.results.at(1)};
  // attention_grad: dout, q, k, v, out, lse -> dq, dk, dv.
  return {step.operands.at(1), step.operands.at(2), step.operands.at(3),
          step.operands.at(4), step.operands.at(5), step.operands.at(0),
          step.results.at(0),  step.results.at(1),  step.results.at(2)};
}

Expected<SdpaConfig> sdpaConfig(const Plan &plan, const PlanStep &step) {
  if (!isAttention(step.kind))
    return Error("not an attention step");
  bool backward = step.kind == plan::Op::AttentionGrad;
  std::vector<int64_t> ids = sdpaTensorIds(step);
  const PlanValue &q = plan.values.at(ids[0]), &k = plan.values.at(ids[1]);
  if (q.shape.size() != 4 || k.shape.size() != 4)
    return Error("q and k are not [B, S, H, D]");
  SdpaConfig c;
  c.backward = backward;
  c.batch = q.shape[0];
  c.seq = q.shape[1];
  c.heads = q.shape[2];
  c.kvHeads = k.shape[2];
  c.headDim = q.shape[3];
  c.dtype = q.dtype;
  c.causal = step.flag("causal");
  c.scale = static_cast<float>(step.f64("scale"));
  if (c.batch < 1 || c.seq < 1 || c.heads < 1 || c.kvHeads < 1 ||
      c.headDim < 1 || c.heads % c.kvHeads != 0)
    return Error(c.describe() + ": an empty or ungrouped shape");
  // Every tensor but the stats in one dtype, bf16: the f32 policy's
  // attention (and any mix) stays on the kernels.
  for (size_t slot = 0; slot < ids.size(); ++slot) {
    if (slot == static_cast<size_t>(SdpaSlot::Stats))
      continue;
    DType t = plan.values.at(ids[slot]).dtype;
    if (t != DType::BF16)
      return Error(c.describe() + ": " + dtypeName(t) +
                   " tensors (cuDNN's fused SDPA takes bf16 here)");
  }
  if (plan.values.at(ids[static_cast<size_t>(SdpaSlot::Stats)]).dtype !=
      DType::F32)
    return Error(c.describe() + ": lse is not f32");
  return c;
}

std::string attentionSummary(const AttentionTally &t,
                             const std::string &version) {
  int steps = t.cudnnSteps + t.kernelSteps;
  if (steps == 0)
    return "";
  auto count = [](int n, const char *what) {
    return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
  };
  const std::string kernels = "the hand-written CUDA kernels";
  if (!t.unavailable.empty())
    return "attention: " + kernels + " for " +
           (steps == 1 ? "the attention step"
                       : "all " + count(steps, "attention step")) +
           " (cuDNN's fused SDPA is unavailable: " + t.unavailable + ")";
  std::string cudnn = "cuDNN fused SDPA (" + version + ")";
  std::string graphs =
      count(t.graphs, "graph") + (t.note.empty() ? "" : "; " + t.note);
  if (t.kernelSteps == 0)
    return "attention: " + cudnn + " for " +
           (steps == 1 ? "the attention step"
                       : "all " + count(steps, "attention step")) +
           " (" + graphs + ")";
  if (t.cudnnSteps == 0)
    return "attention: " + kernels + " for " +
           (steps == 1 ? "the attention step"
                       : "all " + count(steps, "attention step")) +
           " (" + t.firstFallback + ")";
  return "attention: " + cudnn + " for " + std::to_string(t.cudnnSteps) +
         " of " + count(steps, "attention step") + " (" + graphs + "), " +
         kernels + " for the other " + std::to_string(t.kernelSteps) +
         " (first: " + t.firstFallback + ")";
}

void sayOnce(const std::string &line) {
  static std::mutex lock;
  static std::set<std::string> said;
  if (line.empty())
    return;
  std::lock_guard<std::mutex> hold(lock);
  if (said.insert(line).second)
    std::fprintf(stderr, "%s\n", line.c_str());
}

} // namespace kiln::runtime::cuda
