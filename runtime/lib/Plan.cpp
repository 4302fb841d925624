//===- Plan.cpp - Reading and checking a plan -----------------------------===//
//
// nlohmann::json throws on malformed input; every throw is caught here and
// becomes one error line, so a bad plan never aborts the runtime.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Plan.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

namespace kiln::runtime {

using nlohmann::json;

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
struct PlanError {
  std::string message;
};

template <typename T> const T &attr(const PlanStep &step, const std::string &name) {
  return std::get<T>(step.attrs.at(name));
}

DType parseDType(const std::string &s) {
  static const std::map<std::string, DType> names = {
      {"f32", DType::F32}, {"bf16", DType::BF16}, {"f16", DType::F16},
      {"f64", DType::F64}, {"i32", DType::I32},   {"i64", DType::I64},
      {"f8e4m3", DType::F8E4M3}, {"f8e5m2", DType::F8E5M2}};
  auto it = names.find(s);
  if (it == names.end())
    throw PlanError{"unknown dtype '" + s + "'"};
  return it->second;
}

InitSpec parseInit(const json &j) {
  static const std::map<std::string, InitSpec::Kind> kinds = {
      {"zeros", InitSpec::Zeros},
      {"ones", InitSpec::Ones},
      {"normal", InitSpec::Normal},
      {"trunc_normal", InitSpec::TruncNormal}};
  InitSpec init;
  auto it = kinds.find(j.at("kind").get<std::string>());
  if (it == kinds.end())
    throw PlanError{"unknown initialiser '" + j.at("kind").get<std::string>() +
                    "'"};
  init.kind = it->second;
  if (init.kind == InitSpec::Normal || init.kind == InitSpec::TruncNormal)
    init.std = j.at("std").get<double>();
  if (init.kind == InitSpec::TruncNormal) {
    init.a = j.at("a").get<double>();
    init.b = j.at("b").get<double>();
  }
  return init;
}

AttrValue parseAttr(const json &j) {
  if (j.is_boolean())
    return j.get<bool>();
  if (j.is_number_integer())
    return j.get<int64_t>();
  if (j.is_number())
    return j.get<double>();
  if (j.is_string())
    return j.get<std::string>();
  if (j.is_array())
    return j.get<std::vector<int64_t>>();
  throw PlanError{"unsupported attribute value " + j.dump()};
}

/// The `group` of a `fused` step, checked against the values it reads and
/// writes.
std::shared_ptr<const FusedGroup> parseGroup(const json &j,
                                             const PlanStep &step,
                                             const Plan &plan,
                                             const std::string &where) {
  auto group = std::make_shared<FusedGroup>();
  group->rows = j.at("rows").get<int64_t>();
  group->cols = j.at("cols").get<int64_t>();
  static const std::map<std::string, GroupKind> kinds = {
      {"scalar", GroupKind::Scalar},
      {"row", GroupKind::Row},
      {"col", GroupKind::Col},
      {"elem", GroupKind::Elem}};
  for (const json &ji : j.at("body")) {
    GroupInstr in;
    std::string op = ji.at("op").get<std::string>();
    if (!parseGroupOp(op, in.op))
      throw PlanError{where + ": unknown group instruction '" + op + "'"};
    in.type = parseDType(ji.value("type", "f32"));
    in.args = ji.value("args", std::vector<int32_t>{});
    if (in.op == GroupInstr::Op::Load) {
      in.operand = ji.at("operand").get<int32_t>();
      auto kind = kinds.find(ji.at("kind").get<std::string>());
      if (kind == kinds.end())
        throw PlanError{where + ": unknown load kind " + ji.at("kind").dump()};
      in.kind = kind->second;
    }
    if (in.op == GroupInstr::Op::Const)
      in.value = ji.at("value").get<double>();
    group->body.push_back(std::move(in));
  }
  for (const json &jo : j.at("outputs")) {
    GroupOutput out;
    out.value = jo.at("value").get<int32_t>();
    std::string store = jo.value("store", "elem");
    if (!parseGroupStore(store, out.store))
      throw PlanError{where + ": unknown store '" + store + "'"};
    group->outputs.push_back(out);
  }
  auto values = [&](const std::vector<int64_t> &ids) {
    std::vector<const PlanValue *> out;
    for (int64_t id : ids) {
      if (id < 0 || id >= static_cast<int64_t>(plan.values.size()))
        throw PlanError{where + " refers to value " + std::to_string(id) +
                        ", which does not exist"};
      out.push_back(&plan.values[id]);
    }
    return out;
  };
  std::string problem =
      checkFusedGroup(*group, values(step.operands), values(step.results));
  if (!problem.empty())
    throw PlanError{where + ": " + problem};
  return group;
}

Plan parse(const std::string &text) {
  json j = json::parse(text);
  if (!j.is_object() || j.value("format", "") != "kiln-plan")
    throw PlanError{"not a Kiln plan (no \"format\": \"kiln-plan\")"};
  Plan plan;
  plan.version = j.at("version").get<int>();
  if (plan.version != kSupportedPlanVersion)
    throw PlanError{"plan version " + std::to_string(plan.version) +
                    " is not supported by this runtime (it reads version " +
                    std::to_string(kSupportedPlanVersion) + ")"};
  plan.vocabSize = j.at("vocab_size").get<int64_t>();
  plan.ranks = j.value("ranks", int64_t(1));
  if (plan.ranks < 1)
    throw PlanError{"the plan's ranks must be at least 1"};
  plan.arenaBytes = j.at("arena_bytes").get<int64_t>();
  plan.stateBytes = j.at("state_bytes").get<int64_t>();
  const json &jt = j.at("training");
  TrainingSpec &t = plan.training;
  t.steps = jt.at("steps").get<int64_t>();
  t.seed = jt.at("seed").get<int64_t>();
  t.evalInterval = jt.at("eval_interval").get<int64_t>();
  t.evalSteps = jt.at("eval_steps").get<int64_t>();
  t.checkpointInterval = jt.at("checkpoint_interval").get<int64_t>();
  t.data = jt.at("data").get<std::string>();
  t.checkpointFolder = jt.at("checkpoint_folder").get<std::string>();
  t.commTimeoutSeconds = jt.value("comm_timeout_seconds", int64_t(100));
  if (t.steps < 0 || t.seed < 0 || t.evalInterval < 0 || t.evalSteps < 1 ||
      t.checkpointInterval < 0)
    throw PlanError{"the training section has a negative count"};
  static const std::map<std::string, PlanValue::Kind> kinds = {
      {"state", PlanValue::State},
      {"input", PlanValue::Input},
      {"const", PlanValue::Const},
      {"arena", PlanValue::Arena}};
  for (const json &jv : j.at("values")) {
    PlanValue v;
    v.id = jv.at("id").get<int64_t>();
    if (v.id != static_cast<int64_t>(plan.values.size()))
      throw PlanError{"value ids must be 0, 1, 2, ... in order"};
    auto kind = kinds.find(jv.at("kind").get<std::string>());
    if (kind == kinds.end())
      throw PlanError{"value " + std::to_string(v.id) + " has an unknown kind"};
    v.kind = kind->second;
    v.shape = jv.at("shape").get<std::vector<int64_t>>();
    for (int64_t d : v.shape)
      if (d < 0 || d > (int64_t(1) << 40))
        throw PlanError{"value " + std::to_string(v.id) + " has a bad shape"};
    v.dtype = parseDType(jv.at("dtype").get<std::string>());
    if (v.kind == PlanValue::State || v.kind == PlanValue::Input)
      v.name = jv.at("name").get<std::string>();
    if (v.kind == PlanValue::State)
      v.init = parseInit(jv.at("init"));
    if (v.kind == PlanValue::State && jv.contains("shard_of")) {
      for (const json &jp : jv.at("shard_of")) {
        ShardPart part;
        part.name = jp.at("name").get<std::string>();
        part.offset = jp.at("offset").get<int64_t>();
        part.shape = jp.at("shape").get<std::vector<int64_t>>();
        part.init = parseInit(jp.at("init"));
        if (part.offset < 0 || part.numElements() < 0 ||
            part.offset + part.numElements() >
                plan.ranks * (v.shape.empty() ? 1 : v.shape[0]))
          throw PlanError{"value " + std::to_string(v.id) + ": part '" +
                          part.name + "' lies outside its flat buffer"};
        v.shardOf.push_back(std::move(part));
      }
    }
    if (v.kind == PlanValue::Const)
      v.constValue = jv.at("value").get<double>();
    if (v.kind == PlanValue::Arena)
      v.offset = jv.at("offset").get<int64_t>();
    plan.values.push_back(std::move(v));
  }
  for (const auto &[name, je] : j.at("entries").items()) {
    PlanEntry entry;
    entry.arenaBytes = je.at("arena_bytes").get<int64_t>();
    if (je.contains("live_at_peak")) {
      const json &jl = je.at("live_at_peak");
      entry.liveAtPeak = {jl.at("peak_step").get<int64_t>(),
                          jl.at("parameter_copies").get<int64_t>(),
                          jl.at("gradients").get<int64_t>(),
                          jl.at("activations").get<int64_t>()};
    }
    entry.outputs = je.at("outputs").get<std::map<std::string, int64_t>>();
    for (const json &js : je.at("steps")) {
      PlanStep step;
      step.op = js.at("op").get<std::string>();
      step.operands = js.at("operands").get<std::vector<int64_t>>();
      step.results = js.at("results").get<std::vector<int64_t>>();
      step.loc = js.value("loc", "");
      for (const auto &[key, value] : js.at("attrs").items())
        step.attrs[key] = parseAttr(value);
      if (step.op == "fused")
        step.group =
            parseGroup(js.at("group"), step, plan,
                       name + " step " + std::to_string(entry.steps.size()));
      entry.steps.push_back(std::move(step));
    }
    plan.entries[name] = std::move(entry);
  }
  return plan;
}

/// shard_amax (shard -> amaxes) and shard_quantize (shard, amaxes -> codes,
/// scales): one offset and one size per weight, each weight inside the
/// flat buffer of `ranks` shards.
void checkShardOp(const Plan &plan, const PlanStep &s,
                  const std::string &where) {
  bool quantize = s.op == "shard_quantize";
  if (!quantize && s.op != "shard_amax")
    return;
  auto ints = [&](const char *key) -> const std::vector<int64_t> * {
    auto it = s.attrs.find(key);
    return it == s.attrs.end() ? nullptr
                               : std::get_if<std::vector<int64_t>>(&it->second);
  };
  const std::vector<int64_t> *offsets = ints("offsets"), *sizes = ints("sizes");
  auto ranks = s.attrs.find("ranks");
  bool ok = offsets && sizes && offsets->size() == sizes->size() &&
            ranks != s.attrs.end() &&
            std::holds_alternative<int64_t>(ranks->second) &&
            s.operands.size() == (quantize ? 2u : 1u) &&
            s.results.size() == (quantize ? 2u : 1u) &&
            plan.values[s.results.back()].numElements() ==
                static_cast<int64_t>(offsets->size());
  if (ok) {
    int64_t total = std::get<int64_t>(ranks->second) *
                    plan.values[s.operands[0]].numElements();
    for (size_t w = 0; ok && w < offsets->size(); ++w)
      ok = (*offsets)[w] >= 0 && (*sizes)[w] >= 0 &&
           (*offsets)[w] + (*sizes)[w] <= total;
  }
  if (!ok)
    throw PlanError{where + ": " + s.op +
                    " needs one offset and one size per weight, inside the "
                    "flat buffer of `ranks` shards"};
}

/// Ids in range, arena buffers inside the arena.
void validate(const Plan &plan) {
  auto checkId = [&](int64_t id, const std::string &where) {
    if (id < 0 || id >= static_cast<int64_t>(plan.values.size()))
      throw PlanError{where + " refers to value " + std::to_string(id) +
                      ", which does not exist"};
  };
  for (const PlanValue &v : plan.values)
    if (v.kind == PlanValue::Arena &&
        (v.offset < 0 || v.offset + v.bytes() > plan.arenaBytes))
      throw PlanError{"value " + std::to_string(v.id) +
                      " lies outside the arena"};
  for (const auto &[name, entry] : plan.entries) {
    for (size_t i = 0; i < entry.steps.size(); ++i) {
      std::string where = name + " step " + std::to_string(i);
      for (int64_t id : entry.steps[i].operands)
        checkId(id, where);
      for (int64_t id : entry.steps[i].results)
        checkId(id, where);
      if (entry.steps[i].op == "init" &&
          (entry.steps[i].results.size() != 1 ||
           plan.values[entry.steps[i].results[0]].kind != PlanValue::State))
        throw PlanError{where + ": init must have one result, a state"};
      checkShardOp(plan, entry.steps[i], where);
    }
    for (const auto &[out, id] : entry.outputs)
      checkId(id, name + " output " + out);
  }
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
      (isOptimizerState(v.name) ? optimizer : model)[v.name] = v.shape;
    for (const ShardPart &p : v.shardOf)
      (isOptimizerState(p.name) ? optimizer : model)[p.name] = p.shape;
  }
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

std::optional<Plan> parsePlan(const std::string &text, std::string &error) {
  try {
    Plan plan = parse(text);
    validate(plan);
    return plan;
  } catch (const PlanError &e) {
    error = e.message;
  } catch (const json::exception &e) {
    error = std::string("malformed plan: ") + e.what();
  } catch (const std::exception &e) {
    error = std::string("malformed plan: ") + e.what();
  }
  return std::nullopt;
}

std::optional<Plan> loadPlan(const std::string &path, std::string &error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = "cannot open plan '" + path + "'";
    return std::nullopt;
  }
  std::stringstream text;
  text << in.rdbuf();
  std::optional<Plan> plan = parsePlan(text.str(), error);
  if (!plan)
    error = path + ": " + error;
  return plan;
}

bool sameStorage(const PlanValue &a, const PlanValue &b) {
  return a.id == b.id || (a.kind == PlanValue::Arena &&
                          b.kind == PlanValue::Arena && a.offset == b.offset &&
                          a.bytes() == b.bytes());
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
