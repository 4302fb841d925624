//===- PlanQueries.cpp - What a loaded plan answers -----------------------===//
//
// Sizes and names of dtypes and values, a step's attributes by name, and
// the lookups and descriptions the backends, the trainer and messages use.
// Reading and checking a plan is Plan.cpp's and PlanVerifier.cpp's.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Plan.h"

namespace kiln::runtime {

int64_t dtypeBytes(DType type) {
  switch (type) {
  case DType::F8E4M3:
  case DType::F8E5M2:
    return 1;
  case DType::BF16:
  case DType::F16:
    return 2;
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::F64:
  case DType::I64:
    return 8;
  }
  return 0;
}

const char *dtypeName(DType type) {
  switch (type) {
  case DType::F32:
    return "f32";
  case DType::BF16:
    return "bf16";
  case DType::F16:
    return "f16";
  case DType::F64:
    return "f64";
  case DType::I32:
    return "i32";
  case DType::I64:
    return "i64";
  case DType::F8E4M3:
    return "f8e4m3";
  case DType::F8E5M2:
    return "f8e5m2";
  }
  return "?";
}

int64_t ShardPart::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

int64_t PlanValue::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

namespace {
template <typename T>
const T &attr(const PlanStep &step, const std::string &name) {
  return std::get<T>(step.attrs.at(name));
}
} // namespace

double PlanStep::f64(const std::string &name) const {
  const AttrValue &v = attrs.at(name);
  if (auto *i = std::get_if<int64_t>(&v))
    return static_cast<double>(*i);
  return std::get<double>(v);
}
int64_t PlanStep::i64(const std::string &name) const {
  return attr<int64_t>(*this, name);
}
int64_t PlanStep::i64Or(const std::string &name, int64_t absent) const {
  return attrs.count(name) ? i64(name) : absent;
}
bool PlanStep::flag(const std::string &name) const {
  auto it = attrs.find(name);
  return it != attrs.end() && std::get<bool>(it->second);
}
const std::string &PlanStep::str(const std::string &name) const {
  return attr<std::string>(*this, name);
}

bool isOptimizerState(const std::string &name) {
  return name.rfind("exp_avg.", 0) == 0 || name.rfind("exp_avg_sq.", 0) == 0 ||
         name.rfind("fp8_amax_history.", 0) == 0;
}

void unshardedShapes(const Plan &plan,
                     std::map<std::string, std::vector<int64_t>> &model,
                     std::map<std::string, std::vector<int64_t>> &optimizer) {
  for (const PlanValue &v : plan.values) {
    if (v.kind != PlanValue::State)
      continue;
    if (v.shardOf.empty())
      (isOptimizerState(v.name) ? optimizer : model)[v.name] =
          wholeShape(plan, v.shape, v.tp);
    for (const ShardPart &p : v.shardOf)
      (isOptimizerState(p.name) ? optimizer : model)[p.name] =
          wholeShape(plan, p.shape, p.tp);
  }
}

std::vector<int64_t> wholeShape(const Plan &plan,
                                const std::vector<int64_t> &shape,
                                const std::optional<TpSlice> &tp) {
  std::vector<int64_t> whole = shape;
  if (tp)
    whole[tp->dim] = whole[tp->dim] * plan.mesh.tp - tp->pad;
  return whole;
}

const PlanEntry *Plan::entry(const std::string &name) const {
  auto it = entries.find(name);
  return it == entries.end() ? nullptr : &it->second;
}

const PlanValue *Plan::named(PlanValue::Kind kind,
                             const std::string &name) const {
  for (const PlanValue &v : values)
    if (v.kind == kind && v.name == name)
      return &v;
  return nullptr;
}

bool sameStorage(const PlanValue &a, const PlanValue &b) {
  return a.id == b.id ||
         (a.kind == PlanValue::Arena && b.kind == PlanValue::Arena &&
          a.offset == b.offset && a.bytes() == b.bytes());
}

std::string describeStep(const Plan &plan, const PlanStep &step) {
  std::string text = step.op;
  if (step.group && step.attrs.count("ops"))
    text = "fused group (" + step.str("ops") + ")";
  for (int64_t id : step.operands)
    if (plan.values[id].kind == PlanValue::State) {
      text += " of " + plan.values[id].name;
      break;
    }
  if (!step.loc.empty())
    text += " at " + step.loc;
  return text;
}

} // namespace kiln::runtime
