//===- OpKernelInputs.cpp - The op kernel check's random steps ------------===//
//
// OpKernelInputs.h: the random operands of a step, and the step as each tp
// position's plan has it.
//
//===----------------------------------------------------------------------===//

#include "OpKernelInputs.h"

#include "kiln/Runtime/Cpu/Bf16.h"
#include "kiln/Runtime/Cpu/Fp8.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kiln::runtime::opcheck {

namespace plan = kiln::plan;

void setValue(DType t, std::vector<uint8_t> &b, int64_t i, float x) {
  if (t == DType::F32) {
    std::memcpy(b.data() + 4 * i, &x, 4);
  } else if (t == DType::BF16) {
    uint16_t bits = cpu::toBf16Bits(x);
    std::memcpy(b.data() + 2 * i, &bits, 2);
  } else {
    b[i] = t == DType::F8E4M3 ? cpu::toE4m3(x) : cpu::toE5m2(x);
  }
}

/// Random operand values: normal floats, ids inside the table, and where
/// an op expects it, positive amaxes and norms, sensible AdamW state.
std::vector<uint8_t> randomOperand(const Plan &plan, const PlanStep &step,
                                   size_t index, std::mt19937 &rng) {
  const PlanValue &v = plan.values[step.operands[index]];
  int64_t n = v.numElements();
  std::vector<uint8_t> b(n * dtypeBytes(v.dtype));
  const plan::Op op = step.kind;
  if (v.dtype == DType::I32 &&
      (op == plan::Op::IndexToFloat || op == plan::Op::Reshape ||
       op == plan::Op::Unflatten)) {
    // Any i32, so that ids past 2^24 round as the CPU's conversion does,
    // and a move keeps every bit.
    for (int64_t i = 0; i < n; ++i) {
      int32_t x = static_cast<int32_t>(rng());
      std::memcpy(b.data() + 4 * i, &x, 4);
    }
    return b;
  }
  if (v.dtype == DType::I32) {
    const PlanValue &table =
        op == plan::Op::EmbeddingGrad ? plan.values[step.results[0]]
        : op == plan::Op::Embedding   ? plan.values[step.operands[0]]
                                      : plan.values[step.operands[index - 1]];
    // A tp rank's slice of the embedding table draws from the whole
    // vocabulary: most ids fall outside it.
    int64_t range = op == plan::Op::Embedding || op == plan::Op::EmbeddingGrad
                        ? step.i64Or("vocab_size", table.shape[0])
                        : table.shape.back();
    std::uniform_int_distribution<int32_t> id(0,
                                              static_cast<int32_t>(range - 1));
    for (int64_t i = 0; i < n; ++i) {
      int32_t x = id(rng);
      std::memcpy(b.data() + 4 * i, &x, 4);
    }
    return b;
  }
  if (v.dtype == DType::I64) {
    int64_t most =
        op == plan::Op::LrSchedule ? step.i64("total_steps") + 100 : 200;
    for (int64_t i = 0; i < n; ++i) {
      int64_t x = 1 + static_cast<int64_t>(rng() % most);
      std::memcpy(b.data() + 8 * i, &x, 8);
    }
    return b;
  }
  std::normal_distribution<float> normal(0.0f, 1.0f);
  bool vocabParallel = op == plan::Op::VocabParallelMax ||
                       op == plan::Op::VocabParallelStats ||
                       op == plan::Op::VocabParallelStatsGrad;
  size_t logits = op == plan::Op::VocabParallelStatsGrad ? 1 : 0;
  if (vocabParallel && index == logits + 2) {
    // The targets: ids of the whole vocabulary, as floats; about 1/tp of
    // them in the step's slice.
    std::uniform_int_distribution<int64_t> id(0, step.i64("vocab_size") - 1);
    for (int64_t i = 0; i < n; ++i)
      setValue(v.dtype, b, i, static_cast<float>(id(rng)));
    return b;
  }
  int64_t width = v.shape.empty() ? 1 : std::max<int64_t>(v.shape.back(), 1);
  for (int64_t i = 0; i < n; ++i) {
    float x = normal(rng);
    if (op == plan::Op::DelayedAmax || op == plan::Op::AmaxHistoryUpdate)
      x = std::fabs(x) * 4;
    else if (op == plan::Op::AdamW && index == 2)
      x *= 0.1f;
    else if (op == plan::Op::AdamW && index == 3)
      x = std::fabs(x) * 0.01f;
    else if (op == plan::Op::AdamW && index == 4)
      x = 0.5f + std::fabs(x); // the norm: clipping or not
    else if (op == plan::Op::AdamW && index == 5)
      x = 1e-3f;
    else if (op == plan::Op::ShardQuantize && index == 1)
      x = 0.5f + 3 * std::fabs(x);
    else if (op == plan::Op::CrossEntropyGrad && index == 0)
      x = 0.5f + std::fabs(x);
    else if (op == plan::Op::CrossEntropy || op == plan::Op::CrossEntropyGrad)
      x *= 3; // logits with a spread
    else if (vocabParallel && index == logits && (i / width) % 4 == 1)
      // Rows of +0 and -0 but for every third column (the first among
      // them), which is negative: which zero is the max.
      x = i % width % 3 == 0 ? -1.0f - std::fabs(x) : std::copysign(0.0f, x);
    else if (vocabParallel && index == logits && (i / width) % 4 == 2)
      x = std::round(x * 2); // rows of repeated maxima, -0 among them
    else if (vocabParallel && index == logits)
      x *= 3;
    else if ((op == plan::Op::VocabParallelLoss && index == 0) ||
             (op == plan::Op::VocabParallelLossGrad && index == 1))
      x = i % 2 == 0 ? 1.0f + 100 * std::fabs(x) : 3 * x; // sum > 0, logit
    setValue(v.dtype, b, i, x);
  }
  return b;
}

/// The step as each tp position's plan has it: a vocab_parallel_max,
/// _stats, _stats_grad, embedding or embedding_grad step of a tp plan once
/// per position r, with vocab_start = r L (L the logits' or the table's
/// slice of the vocabulary), so that the slices with the
/// vocabulary's padding are checked too (`kiln compile` builds position
/// 0's plan only); any other step as it is. Empty, with `why`, when the
/// plan's own vocab_start is not its position's.
Expected<std::vector<PlanStep>> tpPositions(const Plan &plan,
                                            const PlanStep &step) {
  if (plan.mesh.tp < 2 || !step.attrs.count("vocab_start"))
    return std::vector<PlanStep>{step};
  // The slice: the embedding table's rows, or the logits' last dim.
  int64_t slice =
      step.kind == plan::Op::Embedding ? plan.values[step.operands[0]].shape[0]
      : step.kind == plan::Op::EmbeddingGrad
          ? plan.values[step.results[0]].shape[0]
          : plan.values[step.operands
                            [step.kind == plan::Op::VocabParallelStatsGrad ? 1
                                                                           : 0]]
                .shape.back();
  int64_t vocab = step.i64("vocab_size");
  if (step.i64("vocab_start") != plan.tpIndex * slice) {
    return Error("vocab_start " + std::to_string(step.i64("vocab_start")) +
                 " is not tp position " + std::to_string(plan.tpIndex) + "'s");
  }
  std::vector<PlanStep> steps;
  for (int64_t r = 0; r < plan.mesh.tp && r * slice < vocab; ++r) {
    steps.push_back(step);
    steps.back().attrs["vocab_start"] = r * slice;
  }
  return steps;
}

} // namespace kiln::runtime::opcheck
