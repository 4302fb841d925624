//===- GroupKernelValues.cpp - A fused group's values as CUDA C++ ---------===//
//
// Each instruction of the group language becomes one f32 expression over
// earlier values, rounded to the instruction's type as the CPU interpreter
// rounds it (docs/plan.md, "Fused groups"); loads and stores convert from
// and to the buffers' dtypes through the device prelude. The cones say
// which instructions a column loop must compute for what it stores.
//
//===----------------------------------------------------------------------===//

#include "GroupKernelWriter.h"

#include <cstdio>
#include <limits>

namespace kiln::runtime::cuda::group {

const char *ctype(DType t) {
  switch (t) {
  case DType::F32:
    return "float";
  case DType::BF16:
    return "kiln_u16";
  default:
    return "kiln_u8";
  }
}

bool supported(DType t) {
  return t == DType::F32 || t == DType::BF16 || t == DType::F8E4M3 ||
         t == DType::F8E5M2;
}

/// `x` (an f32 expression) rounded to `t`.
std::string rounded(DType t, const std::string &x) {
  switch (t) {
  case DType::BF16:
    return "kiln_round_bf16(" + x + ")";
  case DType::F8E4M3:
    return "kiln_round_e4m3(" + x + ")";
  case DType::F8E5M2:
    return "kiln_round_e5m2(" + x + ")";
  default:
    return x;
  }
}

/// Element `index` of a buffer of type `t`, as f32.
std::string loaded(DType t, const std::string &buffer,
                   const std::string &index) {
  std::string e = "((const " + std::string(ctype(t)) + " *)" + buffer + ")[" +
                  index + "]";
  switch (t) {
  case DType::BF16:
    return "kiln_from_bf16(" + e + ")";
  case DType::F8E4M3:
    return "kiln_from_e4m3(" + e + ")";
  case DType::F8E5M2:
    return "kiln_from_e5m2(" + e + ")";
  default:
    return e;
  }
}

/// Writes the f32 value `x` (already of `t`'s values) as element `index`.
std::string stored(DType t, const std::string &buffer,
                   const std::string &index, const std::string &x) {
  std::string e =
      "((" + std::string(ctype(t)) + " *)" + buffer + ")[" + index + "]";
  switch (t) {
  case DType::BF16:
    return e + " = kiln_bf16_bits(" + x + ");";
  case DType::F8E4M3:
    return e + " = kiln_e4m3_bits(" + x + ");";
  case DType::F8E5M2:
    return e + " = kiln_e5m2_bits(" + x + ");";
  default:
    return e + " = " + x + ";";
  }
}

std::string hexFloat(double value) {
  char text[64];
  std::snprintf(text, sizeof text, "%af", static_cast<float>(value));
  return text;
}

bool perColumn(GroupKind k) {
  return k == GroupKind::Elem || k == GroupKind::Col;
}

/// Whether every point of `g` can be computed on its own: no row sum or
/// maximum, no column sum.
bool pointwise(const FusedGroup &g) {
  for (const GroupInstr &ins : g.body)
    if (ins.op == GroupInstr::Op::RowSum || ins.op == GroupInstr::Op::RowMax)
      return false;
  for (const GroupOutput &o : g.outputs)
    if (o.store == GroupOutput::Store::ColSum)
      return false;
  return true;
}

std::string Writer::expression(int32_t i) {
  const GroupInstr &ins = g.body[i];
  auto arg = [&](int k) { return v(ins.args[k]); };
  std::string e;
  switch (ins.op) {
  case Op::Load: {
    if (chunked && ins.kind == GroupKind::Elem)
      return "kiln_x" + std::to_string(i) + "[e]";
    std::string index = ins.kind == GroupKind::Elem  ? "r * cols + c"
                        : ins.kind == GroupKind::Row ? "r"
                        : ins.kind == GroupKind::Col ? "c"
                                                     : "0";
    return loaded(in[ins.operand], "a.in[" + std::to_string(ins.operand) + "]",
                  index);
  }
  case Op::Const:
    e = hexFloat(ins.value);
    break;
  case Op::Neg:
    e = "-" + arg(0);
    break;
  case Op::Exp:
    e = "expf(" + arg(0) + ")";
    break;
  case Op::Log:
    e = "logf(" + arg(0) + ")";
    break;
  case Op::Sqrt:
    e = "sqrtf(" + arg(0) + ")";
    break;
  case Op::Rsqrt:
    e = "1.0f / sqrtf(" + arg(0) + ")";
    break;
  case Op::Sigmoid:
    e = "1.0f / (1.0f + expf(-" + arg(0) + "))";
    break;
  case Op::Convert:
    e = arg(0);
    break;
  case Op::Abs:
    e = "fabsf(" + arg(0) + ")";
    break;
  case Op::Pow2Floor:
    e = "kiln_pow2_floor(" + arg(0) + ")";
    break;
  case Op::Add:
    e = arg(0) + " + " + arg(1);
    break;
  case Op::Sub:
    e = arg(0) + " - " + arg(1);
    break;
  case Op::Mul:
    e = arg(0) + " * " + arg(1);
    break;
  case Op::Div:
    e = arg(0) + " / " + arg(1);
    break;
  case Op::Max:
    e = "kiln_nan_or(" + arg(0) + ", " + arg(1) + ", " + arg(0) + " > " +
        arg(1) + " ? " + arg(0) + " : " + arg(1) + ")";
    break;
  case Op::Min:
    e = "kiln_nan_or(" + arg(0) + ", " + arg(1) + ", " + arg(0) + " < " +
        arg(1) + " ? " + arg(0) + " : " + arg(1) + ")";
    break;
  case Op::RowSum:
  case Op::RowMax:
    return ""; // loops of their own
  }
  return rounded(ins.type, "(" + e + ")");
}

std::set<int32_t> Writer::cone(int32_t target, bool everyKind) const {
  std::set<int32_t> seen;
  std::vector<int32_t> work = {target};
  while (!work.empty()) {
    int32_t i = work.back();
    work.pop_back();
    if ((!everyKind && !perColumn(g.body[i].kind)) || !seen.insert(i).second)
      continue;
    for (int32_t a : g.body[i].args)
      work.push_back(a);
  }
  return seen;
}

std::set<int32_t> Writer::outputCone(std::initializer_list<Store> stores,
                                     bool everyKind) const {
  std::set<int32_t> values;
  for (const GroupOutput &o : g.outputs)
    if (std::find(stores.begin(), stores.end(), o.store) != stores.end()) {
      std::set<int32_t> c = cone(o.value, everyKind);
      values.insert(c.begin(), c.end());
    }
  return values;
}

void Writer::emitValues(const std::set<int32_t> &values,
                        const std::string &indent) {
  for (int32_t i : values)
    os << indent << "const float " << v(i) << " = " << expression(i) << ";\n";
}

} // namespace kiln::runtime::cuda::group
