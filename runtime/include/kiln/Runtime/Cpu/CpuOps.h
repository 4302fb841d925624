//===- CpuOps.h - The plan's ops on the CPU ---------------------*- C++ -*-===//
//
// One function per plan op. Float operands and results arrive as f32 views
// (the executor widens bf16 inputs and rounds results to their dtype);
// token ids as i32, the step as i64. Semantics: docs/plan.md.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CPU_CPUOPS_H
#define KILN_RUNTIME_CPU_CPUOPS_H

#include "kiln/Runtime/Cpu/CpuExecutor.h"

#include <string>
#include <vector>

namespace kiln::runtime {

/// Runs one step; fails saying what went wrong.
using CpuOpFn = Error (*)(const PlanStep &step,
                          const std::vector<View> &operands,
                          const std::vector<View> &results);

/// The implementation of a library op (plan::Category::Library); nullptr
/// for the ops the executor runs itself.
CpuOpFn findCpuOp(plan::Op op);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_CPU_CPUOPS_H
