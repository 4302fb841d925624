//===- SdpaConfig.h - A plan's attention step as cuDNN SDPA -----*- C++ -*-===//
//
// Internal to the CUDA backend, and plain C++ (no CUDA, no cuDNN), so that
// the host tests check it: how an `attention` or `attention_grad` step of
// the plan maps onto cuDNN's fused scaled dot-product attention (SDPA,
// through cudnn-frontend's graph API; CudnnAttention.h runs it), or why it
// does not, in which case the hand-written kernels (Kernels/Attention.cpp)
// run it.
//
// The plan's q, out, dout and dq are [B, S, H, D] and its k, v, dk and dv
// [B, S, Hkv, D], row-major; lse is [B, H, S] f32. cuDNN's SDPA takes
// tensors in the logical order [b, h, s, d] with any strides, so each is
// described in place, with no copy:
//
//   q-like  dims [B, H,   S, D]  strides [S*H*D,   D, H*D,   1]
//   kv-like dims [B, Hkv, S, D]  strides [S*Hkv*D, D, Hkv*D, 1]
//   lse     dims [B, H,   S, 1]  strides [H*S,     S, 1,     1]
//
// cuDNN's grouped-query attention has query head h read kv head
// h / (H / Hkv), the plan's rule. Its causal mask with the diagonal at the
// top left and right bound 0 is the plan's (key j visible from query row i
// when j <= i; the plan's query and key lengths are equal). Its "Stats"
// output is, per (b, h, s), max + log(sum exp(S - max)) of the scaled
// scores S = scale * q.k in the natural log: the plan's lse, so the
// forward's result is the plan's and the backward reads the plan's lse as
// its Stats input, whichever path made it. The scale is the plan's f64
// rounded to f32, as the CPU backend uses it.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CUDA_SDPACONFIG_H
#define KILN_RUNTIME_CUDA_SDPACONFIG_H

#include "kiln/Runtime/Plan.h"
#include "kiln/Runtime/Support/Error.h"

#include <array>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

namespace kiln::runtime::cuda {

/// One SDPA tensor in cuDNN's logical order [b, h, s, d] (the stats:
/// [b, h, s, 1]); strides in elements.
struct SdpaTensor {
  std::array<int64_t, 4> dim{}, stride{};
};

/// What one cuDNN SDPA graph is built for: the shapes and attributes of an
/// attention (forward) or attention_grad (backward) step. Steps with equal
/// configurations share a graph; the ordering is the graph cache's key.
struct SdpaConfig {
  bool backward = false;
  int64_t batch = 0, heads = 0, kvHeads = 0, seq = 0, headDim = 0;
  /// Of q, k, v, out (and dout, dq, dk, dv): bf16. The stats are f32.
  DType dtype = DType::BF16;
  bool causal = false;
  float scale = 1.0f;

  /// q, out, dout and dq.
  SdpaTensor query() const;
  /// k, v, dk and dv.
  SdpaTensor keyValue() const;
  /// lse (cuDNN's Stats).
  SdpaTensor stats() const;

  auto tie() const {
    return std::make_tuple(backward, batch, heads, kvHeads, seq, headDim, dtype,
                           causal, scale);
  }
  bool operator<(const SdpaConfig &o) const { return tie() < o.tie(); }
  bool operator==(const SdpaConfig &o) const { return tie() == o.tie(); }

  /// "attention_grad of batch 4, 4 heads (2 kv), seq 32, dim 16, bf16,
  /// causal, scale 0.25".
  std::string describe() const;
};

/// The tensors of an SDPA graph, in the order of the device pointers an
/// executor action passes (sdpaTensorIds). The forward uses the first five.
enum class SdpaSlot { Q, K, V, O, Stats, dO, dQ, dK, dV };
constexpr int kSdpaForwardSlots = 5, kSdpaBackwardSlots = 9;

/// Whether `op` is attention or attention_grad.
bool isAttention(plan::Op op);

/// The configuration of attention step `step` (attention or
/// attention_grad, shapes as the plan verifier checked them), or the
/// reason cuDNN's SDPA does not take it: "f32 tensors (cuDNN's fused SDPA
/// takes bf16 here)" and the like.
Expected<SdpaConfig> sdpaConfig(const Plan &plan, const PlanStep &step);

/// The value ids of `step`'s tensors in SdpaSlot order: q, k, v, out, lse
/// (the forward's operands then results), then dout, dq, dk, dv for the
/// backward.
std::vector<int64_t> sdpaTensorIds(const PlanStep &step);

/// How a plan's attention steps run, to be said in one line.
struct AttentionTally {
  int cudnnSteps = 0, kernelSteps = 0;
  int graphs = 0; // distinct configurations cuDNN runs
  /// Set when cuDNN cannot run at all (no cuDNN in the build, no handle):
  /// why.
  std::string unavailable;
  /// The first step left to the kernels: its configuration (or op) and why.
  std::string firstFallback;
  /// Anything else to say about the graphs (CudnnAttention::note).
  std::string note;
};

/// The line the executor prints once: which attention runs and why, e.g.
/// "attention: cuDNN fused SDPA (cuDNN 9.19.0, cudnn-frontend 1.16.0) for
/// all 8 attention steps (2 graphs)", "attention: the hand-written CUDA
/// kernels for all 8 attention steps (attention of batch 4, ..., f32:
/// cuDNN's fused SDPA takes bf16 here)". Empty when the plan has no
/// attention step.
std::string attentionSummary(const AttentionTally &tally,
                             const std::string &version);

/// Prints `line` to stderr unless this process printed it already (or it
/// is empty).
void sayOnce(const std::string &line);

} // namespace kiln::runtime::cuda

#endif // KILN_RUNTIME_CUDA_SDPACONFIG_H
