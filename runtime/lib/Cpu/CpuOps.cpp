//===- CpuOps.cpp - The plan's ops on the CPU kernels ---------------------===//
//
// Each library op of the plan unpacks its operands' shapes and attributes
// and calls one kernel of kiln/Runtime/Cpu (the formulas live in those
// headers). Nothing here computes anything itself except the layout-only
// ops (reshape, transpose, flatten, unflatten). Elementwise and row-wise
// ops never reach this table: the plan writes them as fused groups
// (CpuFusedGroup.cpp).
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Cpu/CpuOps.h"
#include "kiln/Runtime/Cpu/Kernels.h"

#include <algorithm>
#include <cstring>

namespace kiln::runtime {

namespace {

using Views = std::vector<View>;

#define KILN_CPU_OP(name)                                                      \
  Error name(const PlanStep &step, const Views &in, const Views &out)

/// A tensor seen as [rows, last dim].
int64_t lastDim(const View &v) { return v.shape.back(); }
int64_t rows(const View &v) { return v.numElements() / lastDim(v); }

/// The rows of the vocabulary an embedding's table holds: its step's
/// vocab_start and vocab_size, or the whole table.
cpu::TableSlice tableSlice(const PlanStep &step, const View &table) {
  return {table.shape[0], step.i64Or("vocab_start", 0),
          step.i64Or("vocab_size", table.shape[0])};
}

KILN_CPU_OP(embedding) {
  const View &table = in[0];
  return cpu::embedding(table.f32(), in[1].i32(), out[0].f32(),
                        in[1].numElements(), tableSlice(step, table),
                        table.shape[1]);
}

KILN_CPU_OP(embeddingGrad) {
  const View &table = out[0];
  std::memset(table.f32(), 0, table.numElements() * sizeof(float));
  return cpu::embeddingBackward(in[0].f32(), in[1].i32(), table.f32(),
                                in[1].numElements(), tableSlice(step, table),
                                table.shape[1]);
}

KILN_CPU_OP(linear) {
  (void)step;
  // y [m, n] = x [m, k] W^T, W [n, k].
  cpu::linear(in[0].f32(), in[1].f32(), out[0].f32(), rows(in[0]),
              lastDim(in[0]), in[1].shape[0]);
  return Error::success();
}

KILN_CPU_OP(linearGradInput) {
  (void)step;
  // dx [m, k] = dy [m, n] W [n, k].
  cpu::linearBackwardInput(in[0].f32(), in[1].f32(), out[0].f32(),
                           rows(in[0]), in[1].shape[1], lastDim(in[0]),
                           /*accumulate=*/false);
  return Error::success();
}

KILN_CPU_OP(linearGradWeight) {
  (void)step;
  // dW [n, k] = dy [m, n]^T x [m, k].
  cpu::linearBackwardWeight(in[0].f32(), in[1].f32(), out[0].f32(),
                            rows(in[0]), lastDim(in[1]), lastDim(in[0]),
                            /*accumulate=*/false);
  return Error::success();
}

KILN_CPU_OP(scaledMatmul) {
  (void)step;
  // Operands: a [m, k], a_scale, b [n, k], b_scale (rank-0 or per row).
  const View &a = in[0], &b = in[2];
  cpu::scaledMatmul(a.f32(), in[1].f32(), in[1].shape.size() == 1, b.f32(),
                    in[3].f32(), in[3].shape.size() == 1,
                    out[0].f32(), a.shape[0], a.shape[1], b.shape[0]);
  return Error::success();
}

template <void (*Kernel)(const float *, float *, int64_t, int64_t, int64_t,
                         int64_t, double)>
KILN_CPU_OP(ropeOp) {
  const std::vector<int64_t> &s = in[0].shape;
  Kernel(in[0].f32(), out[0].f32(), s[0], s[1], s[2], s[3],
         step.f64("theta"));
  return Error::success();
}

cpu::AttentionShape attentionShape(const View &q, const View &k) {
  return {q.shape[0], q.shape[1], q.shape[2], k.shape[2], q.shape[3]};
}

KILN_CPU_OP(attention) {
  cpu::attention(in[0].f32(), in[1].f32(), in[2].f32(), out[0].f32(),
                 out[1].f32(), attentionShape(in[0], in[1]),
                 static_cast<float>(step.f64("scale")), step.flag("causal"));
  return Error::success();
}

KILN_CPU_OP(attentionGrad) {
  // Operands: dout, q, k, v, out, lse; results: dq, dk, dv.
  cpu::attentionBackward(in[1].f32(), in[2].f32(), in[3].f32(), in[4].f32(),
                         in[5].f32(), in[0].f32(), out[0].f32(),
                         out[1].f32(), out[2].f32(),
                         attentionShape(in[1], in[2]),
                         static_cast<float>(step.f64("scale")),
                         step.flag("causal"));
  return Error::success();
}

KILN_CPU_OP(crossEntropy) {
  (void)step;
  return cpu::crossEntropy(in[0].f32(), in[1].i32(), out[0].f32(), rows(in[0]),
                           lastDim(in[0]));
}

KILN_CPU_OP(crossEntropyGrad) {
  (void)step;
  // Operands: dloss, logits, targets.
  const View &logits = in[1];
  return cpu::crossEntropyBackward(logits.f32(), in[2].i32(), in[0].f32()[0],
                                   out[0].f32(), rows(logits), lastDim(logits));
}

KILN_CPU_OP(indexToFloat) {
  (void)step;
  for (int64_t i = 0, n = in[0].numElements(); i < n; ++i)
    out[0].f32()[i] = static_cast<float>(in[0].i32()[i]);
  return Error::success();
}

KILN_CPU_OP(vocabParallelMax) {
  cpu::vocabParallelMax(in[0].f32(), out[0].f32(), rows(in[0]), lastDim(in[0]),
                        step.i64("vocab_start"), step.i64("vocab_size"));
  return Error::success();
}

KILN_CPU_OP(vocabParallelStats) {
  // Operands: logits, max, targets.
  return cpu::vocabParallelStats(
      in[0].f32(), in[1].f32(), in[2].f32(), out[0].f32(), rows(in[0]),
      lastDim(in[0]), step.i64("vocab_start"), step.i64("vocab_size"));
}

KILN_CPU_OP(vocabParallelStatsGrad) {
  // Operands: dstats, logits, max, targets.
  return cpu::vocabParallelStatsBackward(
      in[0].f32(), in[1].f32(), in[2].f32(), in[3].f32(), out[0].f32(),
      rows(in[1]), lastDim(in[1]), step.i64("vocab_start"),
      step.i64("vocab_size"));
}

KILN_CPU_OP(vocabParallelLoss) {
  (void)step;
  cpu::vocabParallelLoss(in[0].f32(), in[1].f32(), out[0].f32(),
                         in[1].numElements());
  return Error::success();
}

KILN_CPU_OP(vocabParallelLossGrad) {
  (void)step;
  cpu::vocabParallelLossBackward(in[0].f32()[0], in[1].f32(), out[0].f32(),
                                 in[1].numElements() / 2);
  return Error::success();
}

// Token ids (i32) are neither widened nor narrowed: their 4-byte elements
// are moved as they are.
KILN_CPU_OP(copy) {
  (void)step;
  std::memmove(out[0].f32(), in[0].f32(),
               in[0].numElements() * sizeof(float));
  return Error::success();
}

KILN_CPU_OP(flatten) {
  // Each operand at its offset; the rest (padding) zero.
  const std::vector<int64_t> &offsets =
      std::get<std::vector<int64_t>>(step.attrs.at("offsets"));
  std::memset(out[0].f32(), 0, out[0].numElements() * sizeof(float));
  for (size_t i = 0; i < in.size(); ++i)
    std::memcpy(out[0].f32() + offsets[i], in[i].f32(),
                in[i].numElements() * sizeof(float));
  return Error::success();
}

KILN_CPU_OP(unflatten) {
  std::memcpy(out[0].f32(), in[0].f32() + step.i64("offset"),
              out[0].numElements() * sizeof(float));
  return Error::success();
}

KILN_CPU_OP(transpose) {
  const std::vector<int64_t> &perm =
      std::get<std::vector<int64_t>>(step.attrs.at("permutation"));
  const View &x = in[0];
  size_t rank = x.shape.size();
  std::vector<int64_t> inStride(rank, 1);
  for (size_t d = rank - 1; d > 0; --d)
    inStride[d - 1] = inStride[d] * x.shape[d];
  std::vector<int64_t> index(rank, 0);
  const std::vector<int64_t> &outShape = out[0].shape;
  for (int64_t o = 0, n = out[0].numElements(); o < n; ++o) {
    int64_t src = 0;
    for (size_t d = 0; d < rank; ++d)
      src += index[d] * inStride[perm[d]];
    out[0].f32()[o] = x.f32()[src];
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < outShape[d])
        break;
      index[d] = 0;
    }
  }
  return Error::success();
}

KILN_CPU_OP(delayedAmax) {
  // The history's max (or its most recent entry).
  const View &history = in[0];
  int64_t n = history.numElements();
  float h = history.f32()[0];
  if (step.str("algo") == "max")
    for (int64_t i = 1; i < n; ++i)
      h = std::max(h, history.f32()[i]);
  // With a current amax (the calibration step): it stands in for an empty
  // history.
  out[0].f32()[0] = in.size() > 1 && !(h > 0.0f) ? in[1].f32()[0] : h;
  return Error::success();
}

KILN_CPU_OP(amaxHistoryUpdate) {
  (void)step;
  // [amax, history[0], ..., history[n - 2]]; the result may be the
  // history's own buffer.
  int64_t n = in[0].numElements();
  std::memmove(out[0].f32() + 1, in[0].f32(), (n - 1) * sizeof(float));
  out[0].f32()[0] = in[1].f32()[0];
  return Error::success();
}

KILN_CPU_OP(gradNorm) {
  std::vector<cpu::FloatSpan> grads;
  for (const View &g : in)
    grads.push_back({g.f32(), g.numElements()});
  double norm = cpu::gradNorm(grads.data(), static_cast<int64_t>(grads.size()));
  // `squared`: a rank's sum of squares, for a norm over shards.
  out[0].f32()[0] = static_cast<float>(step.flag("squared") ? norm * norm : norm);
  return Error::success();
}

KILN_CPU_OP(lrSchedule) {
  out[0].f32()[0] = static_cast<float>(cpu::learningRate(
      in[0].i64()[0], step.i64("warmup_steps"), step.i64("total_steps"),
      step.f64("peak"), step.f64("min_lr"), step.str("decay") != "constant"));
  return Error::success();
}

KILN_CPU_OP(adamw) {
  // Operands: param, grad, exp_avg, exp_avg_sq, grad_norm, lr, step; the
  // results are the updated param, exp_avg, exp_avg_sq.
  int64_t n = in[0].numElements();
  for (int r = 0; r < 3; ++r) {
    const View &from = in[r == 0 ? 0 : r + 1];
    if (out[r].data != from.data)
      std::memmove(out[r].f32(), from.f32(), n * sizeof(float));
  }
  cpu::AdamWConfig config;
  config.lr = in[5].f32()[0];
  config.beta1 = step.f64("beta1");
  config.beta2 = step.f64("beta2");
  config.eps = step.f64("eps");
  config.weightDecay = step.f64("weight_decay");
  float clip = cpu::clipCoefficient(in[4].f32()[0], step.f64("max_norm"));
  cpu::adamwStep(out[0].f32(), in[1].f32(), out[1].f32(), out[2].f32(), n,
                 in[6].i64()[0], config, clip);
  return Error::success();
}

#undef KILN_CPU_OP

} // namespace

CpuOpFn findCpuOp(plan::Op op) {
  using plan::Op;
  switch (op) {
  case Op::Embedding:
    return embedding;
  case Op::EmbeddingGrad:
    return embeddingGrad;
  case Op::Linear:
    return linear;
  case Op::LinearGradInput:
    return linearGradInput;
  case Op::LinearGradWeight:
    return linearGradWeight;
  case Op::ScaledMatmul:
    return scaledMatmul;
  case Op::Rope:
    return ropeOp<cpu::rope>;
  case Op::RopeGrad:
    return ropeOp<cpu::ropeBackward>;
  case Op::Attention:
    return attention;
  case Op::AttentionGrad:
    return attentionGrad;
  case Op::CrossEntropy:
    return crossEntropy;
  case Op::CrossEntropyGrad:
    return crossEntropyGrad;
  case Op::IndexToFloat:
    return indexToFloat;
  case Op::VocabParallelMax:
    return vocabParallelMax;
  case Op::VocabParallelStats:
    return vocabParallelStats;
  case Op::VocabParallelStatsGrad:
    return vocabParallelStatsGrad;
  case Op::VocabParallelLoss:
    return vocabParallelLoss;
  case Op::VocabParallelLossGrad:
    return vocabParallelLossGrad;
  case Op::Reshape:
    // The executor rounds every result to its dtype: a reshape is a copy
    // through f32.
    return copy;
  case Op::Transpose:
    return transpose;
  case Op::Flatten:
    return flatten;
  case Op::Unflatten:
    return unflatten;
  case Op::DelayedAmax:
    return delayedAmax;
  case Op::AmaxHistoryUpdate:
    return amaxHistoryUpdate;
  case Op::GradNorm:
    return gradNorm;
  case Op::LrSchedule:
    return lrSchedule;
  case Op::AdamW:
    return adamw;
  default:
    // Not a library op: the executor runs it itself (plan::Category).
    return nullptr;
  }
}

} // namespace kiln::runtime
