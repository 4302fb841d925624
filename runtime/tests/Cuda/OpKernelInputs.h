//===- OpKernelInputs.h - The op kernel check's random steps ----*- C++ -*-===//
//
// What kiln-op-kernel-check (OpKernelCheck.cpp) feeds a step: random
// operands shaped for the op, and for loss parallel each tp position's
// vocabulary slice.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_TESTS_CUDA_OPKERNELINPUTS_H
#define KILN_RUNTIME_TESTS_CUDA_OPKERNELINPUTS_H

#include "kiln/Runtime/Plan.h"
#include "kiln/Runtime/Support/Error.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace kiln::runtime::opcheck {

/// Element `i` of `b`, a buffer of dtype `t`, set to `x` rounded to `t`.
void setValue(DType t, std::vector<uint8_t> &b, int64_t i, float x);

/// Random values of operand `index` of `step`: normal floats, ids inside
/// the table, and where an op expects it, positive amaxes and norms,
/// sensible AdamW state, whole-vocabulary targets, positive sums.
std::vector<uint8_t> randomOperand(const Plan &plan, const PlanStep &step,
                                   size_t index, std::mt19937 &rng);

/// The step as each tp position's plan has it: a vocab_parallel_max,
/// _stats or _stats_grad step of a tp plan once per position r, with
/// vocab_start = r L (L the logits' slice), so that the slices with the
/// vocabulary's padding are checked too (`kiln compile` builds position
/// 0's plan only); any other step as it is. An error when the plan's own
/// vocab_start is not its position's.
Expected<std::vector<PlanStep>> tpPositions(const Plan &plan,
                                            const PlanStep &step);

} // namespace kiln::runtime::opcheck

#endif // KILN_RUNTIME_TESTS_CUDA_OPKERNELINPUTS_H
