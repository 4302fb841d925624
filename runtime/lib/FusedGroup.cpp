//===- FusedGroup.cpp - Names and checks of the fused-group language ------===//

#include "kiln/Runtime/FusedGroup.h"
#include "kiln/Runtime/Plan.h"

#include <algorithm>
#include <utility>

namespace kiln::runtime {

namespace {
using Op = GroupInstr::Op;
using Store = GroupOutput::Store;

/// The kind of a value computed from values of kinds `a` and `b`: a row
/// value combined with a column value has one value per point.
GroupKind join(GroupKind a, GroupKind b) {
  if (a == b || b == GroupKind::Scalar)
    return a;
  if (a == GroupKind::Scalar)
    return b;
  return GroupKind::Elem;
}

bool isComputeType(DType t) {
  return t == DType::F32 || t == DType::BF16 || isFp8(t);
}
} // namespace

Error checkFusedGroup(FusedGroup &group,
                      const std::vector<const PlanValue *> &operands,
                      const std::vector<const PlanValue *> &results) {
  const int64_t rows = group.rows, cols = group.cols;
  if (rows < 1 || cols < 1)
    return Error("the group's rows and cols must be positive");
  auto elements = [&](GroupKind kind) -> int64_t {
    switch (kind) {
    case GroupKind::Scalar:
      return 1;
    case GroupKind::Row:
      return rows;
    case GroupKind::Col:
      return cols;
    case GroupKind::Elem:
      return rows * cols;
    }
    return 0;
  };
  for (size_t i = 0; i < group.body.size(); ++i) {
    GroupInstr &in = group.body[i];
    std::string where = "instruction " + std::to_string(i) + " (" +
                        plan::name(in.op) + ")";
    if (static_cast<int>(in.args.size()) != plan::arity(in.op))
      return Error(where + " has " + std::to_string(in.args.size()) +
                   " arguments, not " + std::to_string(plan::arity(in.op)));
    for (int32_t a : in.args)
      if (a < 0 || a >= static_cast<int32_t>(i))
        return Error(where + " reads instruction " + std::to_string(a) +
                     ", which does not come before it");
    if (in.op == Op::Load) {
      if (in.operand < 0 || in.operand >= static_cast<int32_t>(operands.size()))
        return Error(where + " loads operand " + std::to_string(in.operand) +
                     " of " + std::to_string(operands.size()));
      const PlanValue &v = *operands[in.operand];
      if (!isComputeType(v.dtype) || v.dtype != in.type)
        return Error(where + " loads a " + dtypeName(v.dtype) + " tensor as " +
                     dtypeName(in.type));
      if (v.numElements() != elements(in.kind))
        return Error(where + " loads " + std::to_string(v.numElements()) +
                     " elements as a " + plan::name(in.kind) + " value of " +
                     std::to_string(elements(in.kind)));
      continue;
    }
    if (!isComputeType(in.type))
      return Error(where + " has type " + dtypeName(in.type) +
                   "; group values are f32, bf16 or FP8");
    if (in.op == Op::Const) {
      in.kind = GroupKind::Scalar;
      continue;
    }
    if (in.op == Op::RowSum || in.op == Op::RowMax) {
      if (group.body[in.args[0]].kind != GroupKind::Elem)
        return Error(where + " reduces a value that is not per element");
      in.kind = GroupKind::Row;
      continue;
    }
    in.kind = group.body[in.args[0]].kind;
    if (in.args.size() == 2)
      in.kind = join(in.kind, group.body[in.args[1]].kind);
  }

  if (group.outputs.size() != results.size())
    return Error("the group has " + std::to_string(group.outputs.size()) +
                 " outputs for " + std::to_string(results.size()) + " results");
  for (size_t o = 0; o < group.outputs.size(); ++o) {
    const GroupOutput &out = group.outputs[o];
    std::string where = "output " + std::to_string(o) + " (" +
                        plan::name(out.store) + ")";
    if (out.value < 0 || out.value >= static_cast<int32_t>(group.body.size()))
      return Error(where + " stores instruction " + std::to_string(out.value) +
                   ", which does not exist");
    const GroupInstr &in = group.body[out.value];
    const PlanValue &r = *results[o];
    GroupKind want = out.store == Store::Row      ? GroupKind::Row
                     : out.store == Store::Scalar ? GroupKind::Scalar
                                                  : GroupKind::Elem;
    if (in.kind != want)
      return Error(where + " stores a " + plan::name(in.kind) + " value");
    int64_t n = out.store == Store::ColSum ? cols
                : out.store == Store::Amax ? 1
                                           : elements(want);
    if (r.numElements() != n)
      return Error(where + " writes " + std::to_string(n) +
                   " elements to value " + std::to_string(r.id) +
                   ", which has " + std::to_string(r.numElements()));
    if (out.store == Store::Amax && r.dtype != DType::F32)
      return Error(where + " stores an amax into a " + dtypeName(r.dtype) +
                   " tensor (amaxes are f32)");
    if (out.store == Store::ColSum ? r.dtype != DType::F32 &&
                                         r.dtype != DType::BF16
        : out.store == Store::Amax ? false
                                   : r.dtype != in.type)
      return Error(where + " stores a " + dtypeName(in.type) +
                   " value into a " + dtypeName(r.dtype) + " tensor");
    if (out.store == Store::Transpose && r.shape.size() == 2 &&
        (r.shape[0] != cols || r.shape[1] != rows))
      return Error(where + " must write a [cols, rows] tensor");
    if (std::find(operands.begin(), operands.end(), &r) != operands.end())
      return Error(where + " writes value " + std::to_string(r.id) +
                   ", which the group also reads");
  }
  return Error::success();
}

} // namespace kiln::runtime
