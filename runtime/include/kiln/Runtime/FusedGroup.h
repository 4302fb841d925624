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
#include "kiln/Runtime/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::runtime {

// The reduction orders below are part of the group semantics (docs/plan.md,
// "Fused groups"): every backend sums in this order, so their bits agree.

/// Rows per block of a `col_sum` output (part of the group semantics: the
/// partial sums of each block are added in block order).
inline constexpr int64_t kColSumBlockRows = 32;

/// Partial sums of a `row_sum` (part of the group semantics): column c
/// goes into partial c % kRowSumLanes, each in increasing column order, and
/// the partials are then added pairwise, kRowSumLanes / 2 apart, then half
/// that, down to 1 (a warp's butterfly on a GPU).
inline constexpr int kRowSumLanes = 32;

enum class GroupKind { Scalar, Row, Col, Elem };

struct GroupInstr {
  enum class Op {
    Load,
    Const,
    // Unary: f32 math, then rounding to the instruction's type.
    Neg,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Sigmoid,
    Convert,
    // Binary.
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min,
    // Σ over a row's columns, in double: 32 partial sums over the columns
    // c % 32, each in increasing column order, added pairwise (rowSum).
    RowSum,
    // The largest of a row's values (NaN if any is NaN; +0 over -0).
    RowMax,
    // |x|, and 2^floor(log2(x)) for x > 0 finite (x itself otherwise).
    Abs,
    Pow2Floor,
  };
  Op op = Op::Const;
  std::vector<int32_t> args;
  DType type = DType::F32;          // each result is rounded to this type
  GroupKind kind = GroupKind::Elem; // loads: as written; others: inferred
  int32_t operand = -1;  // Load
  double value = 0;      // Const
};

struct GroupOutput {
  enum class Store { Elem, Transpose, Row, ColSum, Amax, Scalar };
  int32_t value = 0;
  Store store = Store::Elem;
};

struct FusedGroup {
  int64_t rows = 0, cols = 0;
  std::vector<GroupInstr> body;
  std::vector<GroupOutput> outputs;
};

const char *groupOpName(GroupInstr::Op op);
const char *groupStoreName(GroupOutput::Store store);

/// Parses the names used in the plan; false if unknown.
bool parseGroupOp(const std::string &name, GroupInstr::Op &op);
bool parseGroupStore(const std::string &name, GroupOutput::Store &store);

/// Arity of an instruction's `args` (0 for Load and Const).
int groupOpArity(GroupInstr::Op op);

struct PlanValue;

/// Checks `group` against the values a step reads and writes, and fills in
/// the kind of every instruction that is not a load. Fails with one line
/// saying what is wrong.
Error checkFusedGroup(FusedGroup &group,
                      const std::vector<const PlanValue *> &operands,
                      const std::vector<const PlanValue *> &results);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_FUSEDGROUP_H
