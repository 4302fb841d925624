//===- CpuFusedGroup.h - The CPU backend's fused-group interpreter -*- C++ -*-===//
//
// Runs a FusedGroup (kiln/Runtime/FusedGroup.h) in one pass over memory:
// rows are taken in blocks, and every instruction of the body is applied to
// one row (or, when nothing in the group depends on rows, to one tile of
// consecutive elements) while it is in cache. Loads read f32 or bf16
// storage directly and stores write it, so a bf16 tensor is never widened
// into a separate buffer. Blocks are independent and reduced in a fixed
// order: the results do not depend on the thread count.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CPU_CPUFUSEDGROUP_H
#define KILN_RUNTIME_CPU_CPUFUSEDGROUP_H

#include "kiln/Runtime/Cpu/CpuExecutor.h"
#include "kiln/Runtime/FusedGroup.h"

#include <string>
#include <vector>

namespace kiln::runtime {

/// Σ x[0..n) in double, in a row_sum's order (Plan/Group.h: rowSumPartials(n)
/// partials of 8-column chunks, then their tree).
double rowSum(const float *x, int64_t n);

/// Element `i` of a view of a float dtype (f32, bf16, FP8), as a float.
float loadScalar(const View &v, int64_t i);

/// Computes `group` (checked by checkFusedGroup) from `operands` into
/// `results`. With `checkNumerics`, fails with "NaN in its result R at
/// element E" (or "infinity ...") for the first non-finite value stored.
Error runFusedGroup(const FusedGroup &group, const std::vector<View> &operands,
                    const std::vector<View> &results, bool checkNumerics);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_CPU_CPUFUSEDGROUP_H
