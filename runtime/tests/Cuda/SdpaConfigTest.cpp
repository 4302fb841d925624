// The CUDA backend's mapping of attention steps onto cuDNN's fused SDPA
// (lib/Cuda/SdpaConfig.h), on the host: cuDNN's [b, h, s, d] strides
// address exactly the plan's [B, S, H, D] elements (and lse's [B, H, S]),
// the tensors come from the right operands and results, equal steps share
// a cache key and any attribute that changes the graph changes it, f32 or
// mixed steps stay on the hand-written kernels with their reason, and the
// one line the executor prints.
#include "../../lib/Cuda/SdpaConfig.h"
#include "AttentionPlan.h"

#include <gtest/gtest.h>

using namespace kiln::runtime;
using namespace kiln::runtime::cuda;
namespace plan = kiln::plan;

namespace {

struct Shape {
  int64_t b, s, h, hkv, d;
};

/// A plan with one attention step (step 0) and its attention_grad (step
/// 1), every tensor of `dtype` but lse (f32) and, when given, dq
/// (`dqType`).
Plan attentionPlan(Shape x, DType dtype, bool causal = true,
                   double scale = 0.125, DType dqType = DType::BF16,
                   bool dqGiven = false) {
  return checks::attentionPlan({x.b, x.s, x.h, x.hkv, x.d}, dtype, causal,
                               scale, dqGiven ? dqType : dtype, "train_step");
}

const PlanStep &step(const Plan &p, int i) {
  return p.entries.at("train_step").steps.at(i);
}

int64_t offset(const SdpaTensor &t, int64_t b, int64_t h, int64_t s,
               int64_t d) {
  return b * t.stride[0] + h * t.stride[1] + s * t.stride[2] + d * t.stride[3];
}

} // namespace

TEST(SdpaConfig, StridesAddressThePlanLayoutInPlace) {
  Shape x{3, 7, 6, 2, 16};
  Plan p = attentionPlan(x, DType::BF16);
  Expected<SdpaConfig> c = sdpaConfig(p, step(p, 0));
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->batch, 3);
  EXPECT_EQ(c->seq, 7);
  EXPECT_EQ(c->heads, 6);
  EXPECT_EQ(c->kvHeads, 2);
  EXPECT_EQ(c->headDim, 16);
  EXPECT_TRUE(c->causal);
  EXPECT_FALSE(c->backward);
  SdpaTensor q = c->query(), kv = c->keyValue(), st = c->stats();
  EXPECT_EQ(q.dim, (std::array<int64_t, 4>{3, 6, 7, 16}));
  EXPECT_EQ(kv.dim, (std::array<int64_t, 4>{3, 2, 7, 16}));
  EXPECT_EQ(st.dim, (std::array<int64_t, 4>{3, 6, 7, 1}));
  // Every element of cuDNN's logical tensor is the plan's element of the
  // same (b, s, h, d), and they cover the buffer once.
  std::vector<int> seenQ(x.b * x.s * x.h * x.d),
      seenKv(x.b * x.s * x.hkv * x.d), seenStats(x.b * x.h * x.s);
  for (int64_t b = 0; b < x.b; ++b)
    for (int64_t s = 0; s < x.s; ++s) {
      for (int64_t h = 0; h < x.h; ++h) {
        for (int64_t d = 0; d < x.d; ++d)
          ++seenQ.at(offset(q, b, h, s, d));
        for (int64_t d = 0; d < x.d; ++d)
          EXPECT_EQ(offset(q, b, h, s, d), ((b * x.s + s) * x.h + h) * x.d + d);
        EXPECT_EQ(offset(st, b, h, s, 0), (b * x.h + h) * x.s + s);
        ++seenStats.at(offset(st, b, h, s, 0));
      }
      for (int64_t h = 0; h < x.hkv; ++h)
        for (int64_t d = 0; d < x.d; ++d) {
          EXPECT_EQ(offset(kv, b, h, s, d),
                    ((b * x.s + s) * x.hkv + h) * x.d + d);
          ++seenKv.at(offset(kv, b, h, s, d));
        }
    }
  for (const auto *seen : {&seenQ, &seenKv, &seenStats})
    for (int n : *seen)
      EXPECT_EQ(n, 1);
}

TEST(SdpaConfig, TensorsComeFromTheirOperandsAndResults) {
  Plan p = attentionPlan({2, 4, 4, 4, 8}, DType::BF16);
  const PlanStep &fwd = step(p, 0), &bwd = step(p, 1);
  // q k v out lse.
  EXPECT_EQ(
      sdpaTensorIds(fwd),
      (std::vector<int64_t>{fwd.operands[0], fwd.operands[1], fwd.operands[2],
                            fwd.results[0], fwd.results[1]}));
  // attention_grad: dout, q, k, v, out, lse -> dq, dk, dv; slots q k v out
  // lse dout dq dk dv.
  std::vector<int64_t> ids = sdpaTensorIds(bwd);
  ASSERT_EQ(ids.size(), static_cast<size_t>(kSdpaBackwardSlots));
  EXPECT_EQ(ids[int(SdpaSlot::Q)], bwd.operands[1]);
  EXPECT_EQ(ids[int(SdpaSlot::K)], bwd.operands[2]);
  EXPECT_EQ(ids[int(SdpaSlot::V)], bwd.operands[3]);
  EXPECT_EQ(ids[int(SdpaSlot::O)], bwd.operands[4]);
  EXPECT_EQ(ids[int(SdpaSlot::Stats)], bwd.operands[5]);
  EXPECT_EQ(ids[int(SdpaSlot::dO)], bwd.operands[0]);
  EXPECT_EQ(ids[int(SdpaSlot::dQ)], bwd.results[0]);
  EXPECT_EQ(ids[int(SdpaSlot::dK)], bwd.results[1]);
  EXPECT_EQ(ids[int(SdpaSlot::dV)], bwd.results[2]);
  // The forward's q is the backward's: one tensor, the same graph shapes.
  EXPECT_EQ(sdpaTensorIds(fwd)[0], ids[0]);
  Expected<SdpaConfig> c = sdpaConfig(p, bwd);
  ASSERT_TRUE(c) << c.error();
  EXPECT_TRUE(c->backward);
  EXPECT_EQ(c->describe(), "attention_grad of batch 2, 4 heads (4 kv), seq 4, "
                           "dim 8, bf16, causal, scale 0.125");
}

TEST(SdpaConfig, TheCacheKeyIsTheGraphsShapeAndAttributes) {
  Shape x{2, 16, 8, 2, 64};
  Plan a = attentionPlan(x, DType::BF16), b = attentionPlan(x, DType::BF16);
  SdpaConfig fa = *sdpaConfig(a, step(a, 0)), fb = *sdpaConfig(b, step(b, 0));
  EXPECT_EQ(fa, fb); // another plan's step of the same shape: a cache hit
  EXPECT_FALSE(fa < fb || fb < fa);
  std::vector<SdpaConfig> differ;
  differ.push_back(*sdpaConfig(a, step(a, 1))); // the backward
  for (Plan p : {attentionPlan(x, DType::BF16, false),
                 attentionPlan(x, DType::BF16, true, 0.25),
                 attentionPlan({3, 16, 8, 2, 64}, DType::BF16),
                 attentionPlan({2, 17, 8, 2, 64}, DType::BF16),
                 attentionPlan({2, 16, 4, 2, 64}, DType::BF16),
                 attentionPlan({2, 16, 8, 4, 64}, DType::BF16),
                 attentionPlan({2, 16, 8, 2, 128}, DType::BF16)})
    differ.push_back(*sdpaConfig(p, step(p, 0)));
  for (size_t i = 0; i < differ.size(); ++i) {
    EXPECT_FALSE(differ[i] == fa) << differ[i].describe();
    EXPECT_TRUE(differ[i] < fa || fa < differ[i]) << differ[i].describe();
    for (size_t j = 0; j < i; ++j)
      EXPECT_FALSE(differ[i] == differ[j]) << differ[i].describe();
  }
}

TEST(SdpaConfig, TheScaleIsThePlansRoundedToF32) {
  Plan p = attentionPlan({1, 4, 2, 1, 8}, DType::BF16, false, 0.1);
  SdpaConfig c = *sdpaConfig(p, step(p, 0));
  EXPECT_EQ(c.scale, static_cast<float>(0.1));
  EXPECT_FALSE(c.causal);
}

TEST(SdpaConfig, F32AttentionStaysOnTheKernels) {
  Plan p = attentionPlan({4, 32, 4, 2, 16}, DType::F32);
  for (int i : {0, 1}) {
    Expected<SdpaConfig> c = sdpaConfig(p, step(p, i));
    ASSERT_FALSE(c);
    EXPECT_EQ(c.error().message(),
              std::string(i ? "attention_grad" : "attention") +
                  " of batch 4, 4 heads (2 kv), seq 32, dim 16, f32, causal, "
                  "scale 0.125: f32 tensors (cuDNN's fused SDPA takes bf16 "
                  "here)");
  }
}

TEST(SdpaConfig, AMixedStepStaysOnTheKernels) {
  Plan p = attentionPlan({1, 8, 2, 2, 16}, DType::BF16, true, 0.125, DType::F32,
                         true);
  EXPECT_TRUE(sdpaConfig(p, step(p, 0))); // the forward is all bf16
  Expected<SdpaConfig> c = sdpaConfig(p, step(p, 1));
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message().find(
                ": f32 tensors (cuDNN's fused SDPA takes bf16 here)"),
            std::string::npos)
      << c.error();
}

TEST(SdpaConfig, OtherStepsAreNotAttention) {
  Plan p = attentionPlan({1, 8, 2, 2, 16}, DType::BF16);
  PlanStep other = step(p, 0);
  other.kind = plan::Op::Rope;
  EXPECT_FALSE(isAttention(other.kind));
  EXPECT_FALSE(sdpaConfig(p, other));
  EXPECT_TRUE(isAttention(plan::Op::Attention));
  EXPECT_TRUE(isAttention(plan::Op::AttentionGrad));
}

TEST(SdpaConfig, TheLineSaysWhichAttentionRunsAndWhy) {
  const std::string v = "cuDNN 9.19.0, cudnn-frontend 1.16.0";
  AttentionTally none;
  EXPECT_EQ(attentionSummary(none, v), "");

  AttentionTally all;
  all.cudnnSteps = 8;
  all.graphs = 2;
  EXPECT_EQ(attentionSummary(all, v),
            "attention: cuDNN fused SDPA (cuDNN 9.19.0, cudnn-frontend "
            "1.16.0) for all 8 attention steps (2 graphs)");
  all.note = "attention_grad of ...: cuDNN's default backward, not "
             "deterministic (why)";
  EXPECT_EQ(attentionSummary(all, v),
            "attention: cuDNN fused SDPA (cuDNN 9.19.0, cudnn-frontend "
            "1.16.0) for all 8 attention steps (2 graphs; attention_grad of "
            "...: cuDNN's default backward, not deterministic (why))");

  AttentionTally f32;
  f32.kernelSteps = 8;
  f32.firstFallback = "attention of batch 4, 4 heads (2 kv), seq 32, dim 16, "
                      "f32, causal, scale 0.25: f32 tensors (cuDNN's fused "
                      "SDPA takes bf16 here)";
  EXPECT_EQ(attentionSummary(f32, v),
            "attention: the hand-written CUDA kernels for all 8 attention "
            "steps (attention of batch 4, 4 heads (2 kv), seq 32, dim 16, "
            "f32, causal, scale 0.25: f32 tensors (cuDNN's fused SDPA takes "
            "bf16 here))");

  AttentionTally mixed;
  mixed.cudnnSteps = 1;
  mixed.kernelSteps = 1;
  mixed.graphs = 1;
  mixed.firstFallback = "attention_grad of ...: cuDNN refused it "
                        "(check_support): no engine";
  EXPECT_EQ(attentionSummary(mixed, v),
            "attention: cuDNN fused SDPA (cuDNN 9.19.0, cudnn-frontend "
            "1.16.0) for 1 of 2 attention steps (1 graph), the hand-written "
            "CUDA kernels for the other 1 (first: attention_grad of ...: "
            "cuDNN refused it (check_support): no engine)");

  AttentionTally missing;
  missing.kernelSteps = 1;
  missing.unavailable = "cudnnCreate: CUDNN_STATUS_NOT_INITIALIZED";
  EXPECT_EQ(attentionSummary(missing, v),
            "attention: the hand-written CUDA kernels for the attention step "
            "(cuDNN's fused SDPA is unavailable: cudnnCreate: "
            "CUDNN_STATUS_NOT_INITIALIZED)");
}
