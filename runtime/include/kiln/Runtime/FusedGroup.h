//===- FusedGroup.h - A fused group of the plan: a typed op list -*- C++ -*-===//
//
// A fused group is one plan step that computes several elementwise and
// row-wise ops in one pass over memory. Its body is a list of instructions
// over an iteration space of `rows` x `cols` points; each instruction names
// earlier instructions as arguments, and its *kind* says which points it
// has a value at:
//
//   scalar  one value for the whole group
//   col     one value per column (a weight vector broadcast over rows)
//   row     one value per row (a row reduction)
//   elem    one value per point
//
// Outputs store a value as a full tensor (`elem`), transposed, per row, as
// one number (`scalar`), or reduced over rows (`col_sum`) or over
// everything (`amax`). Values round to f32, bf16 or an FP8 format. The semantics
// are normative (docs/plan.md, "Fused groups"): the CPU backend interprets
// this list and the CUDA backend generates kernels from it.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_FUSEDGROUP_H
#define KILN_RUNTIME_FUSEDGROUP_H

#include "kiln/Runtime/DType.h"
#include "kiln/Runtime/Plan/Group.h"
#include "kiln/Runtime/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::runtime {

// The group language's names, arities and reduction orders are the plan
// format's (kiln/Runtime/Plan/Group.h); these are the runtime's structures.
using plan::GroupKind;
using plan::kColSumBlockRows;
using plan::kRowSumChunk;
using plan::kRowSumMaxPartials;
using plan::kRowSumWarp;
using plan::rowSumPartials;

struct GroupInstr {
  using Op = plan::GroupOp;
  Op op = Op::Const;
  std::vector<int32_t> args;
  DType type = DType::F32;          // each result is rounded to this type
  GroupKind kind = GroupKind::Elem; // loads: as written; others: inferred
  int32_t operand = -1;  // Load
  double value = 0;      // Const
};

struct GroupOutput {
  using Store = plan::GroupStore;
  int32_t value = 0;
  Store store = Store::Elem;
};

struct FusedGroup {
  int64_t rows = 0, cols = 0;
  std::vector<GroupInstr> body;
  std::vector<GroupOutput> outputs;
};

struct PlanValue;

/// Checks `group` against the values a step reads and writes, and fills in
/// the kind of every instruction that is not a load. Fails with one line
/// saying what is wrong.
Error checkFusedGroup(FusedGroup &group,
                      const std::vector<const PlanValue *> &operands,
                      const std::vector<const PlanValue *> &results);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_FUSEDGROUP_H
