//===- Plan.cpp - Reading and checking a plan -----------------------------===//
//
// nlohmann::json throws on malformed input; every throw is caught here and
// becomes one error line, so a bad plan never aborts the runtime.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Plan.h"
#include "kiln/Runtime/Support/Files.h"

#include <nlohmann/json.hpp>

#include <cmath>

namespace kiln::runtime {

using nlohmann::json;
using plan::kMaxBytes;
using plan::kMaxEvalSteps;
using plan::kMaxTimeoutSeconds;
using plan::kMaxTrainingSteps;

namespace {
struct PlanError {
  std::string message;
};

[[noreturn]] void fail(const std::string &what, const std::string &problem) {
  throw PlanError{what + " " + problem};
}

/// A short rendering of what the plan wrote, for messages.
std::string shown(const json &j) {
  std::string text = j.dump();
  return text.size() > 40 ? text.substr(0, 37) + "..." : text;
}

/// Member `key` of the object `j` (`what` names it in messages).
const json &member(const json &j, const char *key, const std::string &what) {
  if (!j.is_object())
    fail(what, "must be an object, not " + shown(j));
  auto it = j.find(key);
  if (it == j.end())
    fail(what, std::string("has no '") + key + "'");
  return *it;
}

/// A JSON integer in [min, max]: 3.0, -0.5, 1e3, true and "3" are not one.
int64_t integer(const json &j, int64_t min, int64_t max,
                const std::string &what) {
  if (j.is_number_unsigned() &&
      j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    fail(what, "is " + shown(j) + ", past " + std::to_string(max));
  if (!j.is_number_integer())
    fail(what, "must be an integer, not " + shown(j));
  int64_t v = j.get<int64_t>();
  if (v < min || v > max)
    fail(what, "is " + std::to_string(v) + ", outside [" +
                   std::to_string(min) + ", " + std::to_string(max) + "]");
  return v;
}

int64_t integerMember(const json &j, const char *key, int64_t min,
                      int64_t max, const std::string &what) {
  return integer(member(j, key, what), min, max, what + " " + key);
}

double number(const json &j, const std::string &what) {
  if (!j.is_number())
    fail(what, "must be a number, not " + shown(j));
  return j.get<double>();
}

/// Every string of a plan (names, locations, ops, attribute values, and
/// the keys that name entries, outputs and attributes) ends up in one-line
/// messages: none may hold a control character (a line break, a tab, an
/// escape sequence).
const std::string &plain(const std::string &s, const std::string &what) {
  for (char c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      fail(what, json(s).dump().size() > 40
                     ? "holds a control character"
                     : json(s).dump() + " holds a control character");
  return s;
}

const std::string &text(const json &j, const std::string &what) {
  if (!j.is_string())
    fail(what, "must be a string, not " + shown(j));
  return plain(j.get_ref<const std::string &>(), what);
}

const json &array(const json &j, const std::string &what) {
  if (!j.is_array())
    fail(what, "must be a list, not " + shown(j));
  return j;
}

std::vector<int64_t> integers(const json &j, int64_t min, int64_t max,
                              const std::string &what) {
  std::vector<int64_t> out;
  for (const json &e : array(j, what))
    out.push_back(integer(e, min, max, what + " element"));
  return out;
}

/// A tensor shape: dimensions of at most kMaxElements, and so many
/// elements at most (checked without overflow).
std::vector<int64_t> shapeOf(const json &j, const std::string &what) {
  std::vector<int64_t> shape = integers(j, 0, plan::kMaxElements, what);
  if (shape.size() > 8)
    fail(what, "has " + std::to_string(shape.size()) +
                   " dimensions; plan tensors have at most 8");
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d != 0 && n > plan::kMaxElements / d)
      fail(what, "has more than 2^48 elements");
    n *= d;
  }
  return shape;
}

DType parseDType(const json &j, const std::string &what) {
  static const std::map<std::string, DType> names = {
      {"f32", DType::F32}, {"bf16", DType::BF16}, {"f16", DType::F16},
      {"f64", DType::F64}, {"i32", DType::I32},   {"i64", DType::I64},
      {"f8e4m3", DType::F8E4M3}, {"f8e5m2", DType::F8E5M2}};
  auto it = names.find(text(j, what));
  if (it == names.end())
    fail(what, "is an unknown dtype " + shown(j));
  return it->second;
}

InitSpec parseInit(const json &j, const std::string &what) {
  static const std::map<std::string, InitSpec::Kind> kinds = {
      {"zeros", InitSpec::Zeros},
      {"ones", InitSpec::Ones},
      {"normal", InitSpec::Normal},
      {"trunc_normal", InitSpec::TruncNormal}};
  InitSpec init;
  const json &kind = member(j, "kind", what);
  auto it = kinds.find(text(kind, what + " kind"));
  if (it == kinds.end())
    fail(what, "has an unknown initialiser " + shown(kind));
  init.kind = it->second;
  auto finite = [&](const char *key) {
    double v = number(member(j, key, what), what + " " + key);
    if (!std::isfinite(v))
      fail(what + " " + key, "must be finite");
    return v;
  };
  if (init.kind == InitSpec::Normal || init.kind == InitSpec::TruncNormal)
    init.std = finite("std");
  if (init.kind == InitSpec::TruncNormal) {
    init.a = finite("a");
    init.b = finite("b");
    // Values are drawn until one lies in [a, b], then clamped to it: an
    // empty interval has no values.
    if (init.a > init.b)
      fail(what, "has an empty truncation interval: a (" +
                     std::to_string(init.a) + ") is greater than b (" +
                     std::to_string(init.b) + ")");
  }
  return init;
}

AttrValue parseAttr(const json &j, const std::string &what) {
  if (j.is_boolean())
    return j.get<bool>();
  if (j.is_number_integer())
    return integer(j, INT64_MIN, INT64_MAX, what);
  if (j.is_number())
    return j.get<double>();
  if (j.is_string())
    return text(j, what);
  if (j.is_array())
    return integers(j, INT64_MIN, INT64_MAX, what);
  fail(what, "has an unsupported value " + shown(j));
}

/// The `group` of a `fused` step, checked against the values it reads and
/// writes (checkFusedGroup; ids are checked here first).
std::shared_ptr<const FusedGroup> parseGroup(const json &j,
                                             const PlanStep &step,
                                             const Plan &plan,
                                             const std::string &where) {
  std::string what = where + " group";
  auto group = std::make_shared<FusedGroup>();
  group->rows = integerMember(j, "rows", 1, plan::kMaxElements, what);
  group->cols = integerMember(j, "cols", 1, plan::kMaxElements, what);
  if (group->rows > plan::kMaxElements / group->cols)
    fail(what, "has more than 2^48 points");
  const json &body = array(member(j, "body", what), what + " body");
  for (const json &ji : body) {
    std::string at =
        what + " instruction " + std::to_string(group->body.size());
    GroupInstr in;
    const std::string &op = text(member(ji, "op", at), at + " op");
    std::optional<plan::GroupOp> parsed = plan::parseGroupName<plan::GroupOp>(op);
    if (!parsed)
      fail(at, "is an unknown group instruction '" + op + "'");
    in.op = *parsed;
    in.type = ji.contains("type") ? parseDType(ji["type"], at + " type")
                                  : DType::F32;
    if (ji.contains("args"))
      for (int64_t a : integers(ji["args"], 0, INT32_MAX, at + " args"))
        in.args.push_back(static_cast<int32_t>(a));
    if (in.op == GroupInstr::Op::Load) {
      in.operand =
          static_cast<int32_t>(integerMember(ji, "operand", 0, INT32_MAX, at));
      const json &kind = member(ji, "kind", at);
      std::optional<GroupKind> parsedKind =
          plan::parseGroupName<GroupKind>(text(kind, at + " kind"));
      if (!parsedKind)
        fail(at, "has an unknown load kind " + shown(kind));
      in.kind = *parsedKind;
    }
    if (in.op == GroupInstr::Op::Const)
      in.value = number(member(ji, "value", at), at + " value");
    group->body.push_back(std::move(in));
  }
  for (const json &jo : array(member(j, "outputs", what), what + " outputs")) {
    std::string at = what + " output " + std::to_string(group->outputs.size());
    GroupOutput out;
    out.value =
        static_cast<int32_t>(integerMember(jo, "value", 0, INT32_MAX, at));
    std::string store =
        jo.contains("store") ? text(jo["store"], at + " store") : "elem";
    std::optional<GroupOutput::Store> parsedStore =
        plan::parseGroupName<plan::GroupStore>(store);
    if (!parsedStore)
      fail(at, "has an unknown store '" + store + "'");
    out.store = *parsedStore;
    group->outputs.push_back(out);
  }
  auto values = [&](const std::vector<int64_t> &ids) {
    std::vector<const PlanValue *> out;
    for (int64_t id : ids)
      out.push_back(&plan.values[id]);
    return out;
  };
  if (Error e =
          checkFusedGroup(*group, values(step.operands), values(step.results)))
    throw PlanError{what + ": " + e.message()};
  return group;
}

PlanValue parseValue(const json &jv, const Plan &plan) {
  static const std::map<std::string, PlanValue::Kind> kinds = {
      {"state", PlanValue::State},
      {"input", PlanValue::Input},
      {"const", PlanValue::Const},
      {"arena", PlanValue::Arena}};
  PlanValue v;
  std::string what = "value " + std::to_string(plan.values.size());
  v.id = integerMember(jv, "id", 0, INT64_MAX, what);
  if (v.id != static_cast<int64_t>(plan.values.size()))
    fail(what, "has id " + std::to_string(v.id) +
                   "; value ids are 0, 1, 2, ... in order");
  const json &kind = member(jv, "kind", what);
  auto it = kinds.find(text(kind, what + " kind"));
  if (it == kinds.end())
    fail(what, "has an unknown kind " + shown(kind));
  v.kind = it->second;
  v.shape = shapeOf(member(jv, "shape", what), what + " shape");
  v.dtype = parseDType(member(jv, "dtype", what), what + " dtype");
  if (v.kind == PlanValue::State || v.kind == PlanValue::Input)
    v.name = text(member(jv, "name", what), what + " name");
  if (v.kind == PlanValue::State)
    v.init = parseInit(member(jv, "init", what), what + " init");
  if (v.kind == PlanValue::State && jv.contains("shard_of"))
    for (const json &jp : array(jv["shard_of"], what + " shard_of")) {
      std::string at =
          what + " shard_of part " + std::to_string(v.shardOf.size());
      ShardPart part;
      part.name = text(member(jp, "name", at), at + " name");
      part.offset = integerMember(jp, "offset", 0, plan::kMaxElements, at);
      part.shape = shapeOf(member(jp, "shape", at), at + " shape");
      part.init = parseInit(member(jp, "init", at), at + " init");
      v.shardOf.push_back(std::move(part));
    }
  if (v.kind == PlanValue::Const) {
    v.constValue = number(member(jv, "value", what), what + " value");
  }
  if (v.kind == PlanValue::Arena)
    v.offset = integerMember(jv, "offset", 0, kMaxBytes, what);
  return v;
}

PlanStep parseStep(const json &js, const Plan &plan,
                   const std::string &where) {
  PlanStep step;
  step.op = text(member(js, "op", where), where + " op");
  const plan::OpInfo *info = plan::findOp(step.op);
  if (!info)
    fail(where, "has an unknown op '" + step.op + "'");
  std::string what = where + " (" + step.op + ")";
  if (info->category == plan::Category::GroupOnly)
    fail(what, "is an op that only appears inside fused groups (as a "
               "\"fused\" step)");
  step.kind = info->op;
  int64_t last = static_cast<int64_t>(plan.values.size()) - 1;
  step.operands =
      integers(member(js, "operands", what), 0, last, what + " operands");
  step.results =
      integers(member(js, "results", what), 0, last, what + " results");
  if (js.contains("loc"))
    step.loc = text(js["loc"], what + " loc");
  const json &attrs = member(js, "attrs", what);
  if (!attrs.is_object())
    fail(what + " attrs", "must be an object");
  for (const auto &[key, value] : attrs.items()) {
    plain(key, what + " attribute name");
    step.attrs[key] = parseAttr(value, what + " attribute '" + key + "'");
  }
  if (step.kind == plan::Op::Fused)
    step.group = parseGroup(member(js, "group", what), step, plan, what);
  else if (js.contains("group"))
    fail(what, "has a group, but only \"fused\" steps have one");
  return step;
}

Plan parse(const std::string &source) {
  json j = json::parse(source);
  if (!j.is_object() || !j.contains("format") || j["format"] != "kiln-plan")
    throw PlanError{"not a Kiln plan (no \"format\": \"kiln-plan\")"};
  Plan plan;
  plan.version = static_cast<int>(
      integerMember(j, "version", 0, INT32_MAX, "the plan"));
  if (plan.version != plan::kVersion)
    throw PlanError{"plan version " + std::to_string(plan.version) +
                    " is not supported by this runtime (it reads version " +
                    std::to_string(plan::kVersion) + ")"};
  plan.vocabSize = integerMember(j, "vocab_size", 1, INT32_MAX, "the plan");
  plan.ranks = j.contains("ranks")
                   ? integer(j["ranks"], 1, plan::kMaxRanks, "the plan ranks")
                   : 1;
  plan.arenaBytes = integerMember(j, "arena_bytes", 0, kMaxBytes, "the plan");
  plan.stateBytes = integerMember(j, "state_bytes", 0, kMaxBytes, "the plan");
  const json &jt = member(j, "training", "the plan");
  TrainingSpec &t = plan.training;
  const std::string training = "the training section";
  t.steps = integerMember(jt, "steps", 0, kMaxTrainingSteps, training);
  t.seed = integerMember(jt, "seed", 0, INT64_MAX, training);
  t.evalInterval =
      integerMember(jt, "eval_interval", 0, kMaxTrainingSteps, training);
  t.evalSteps = integerMember(jt, "eval_steps", 1, kMaxEvalSteps, training);
  t.checkpointInterval =
      integerMember(jt, "checkpoint_interval", 0, kMaxTrainingSteps, training);
  t.data = text(member(jt, "data", training), training + " data");
  t.checkpointFolder = text(member(jt, "checkpoint_folder", training),
                            training + " checkpoint_folder");
  // Optional: plans written before the collective deadline existed.
  if (jt.contains("comm_timeout_seconds"))
    t.commTimeoutSeconds =
        integer(jt["comm_timeout_seconds"], 0, kMaxTimeoutSeconds,
                training + " comm_timeout_seconds");
  for (const json &jv : array(member(j, "values", "the plan"), "values"))
    plan.values.push_back(parseValue(jv, plan));
  const json &entries = member(j, "entries", "the plan");
  if (!entries.is_object())
    throw PlanError{"the plan's entries must be an object"};
  for (const auto &[name, je] : entries.items()) {
    std::string what = "entry " + plain(name, "an entry name");
    PlanEntry entry;
    entry.arenaBytes = integerMember(je, "arena_bytes", 0, kMaxBytes, what);
    if (je.contains("live_at_peak")) {
      const json &jl = je["live_at_peak"];
      std::string at = what + " live_at_peak";
      entry.liveAtPeak = {
          integerMember(jl, "peak_step", 0, INT64_MAX, at),
          integerMember(jl, "parameter_copies", 0, kMaxBytes, at),
          integerMember(jl, "gradients", 0, kMaxBytes, at),
          integerMember(jl, "activations", 0, kMaxBytes, at)};
    }
    const json &outputs = member(je, "outputs", what);
    if (!outputs.is_object())
      fail(what + " outputs", "must be an object");
    for (const auto &[out, id] : outputs.items()) {
      plain(out, what + " output name");
      entry.outputs[out] =
          integer(id, 0, static_cast<int64_t>(plan.values.size()) - 1,
                  what + " output '" + out + "'");
    }
    for (const json &js : array(member(je, "steps", what), what + " steps"))
      entry.steps.push_back(parseStep(
          js, plan, name + " step " + std::to_string(entry.steps.size())));
    plan.entries[name] = std::move(entry);
  }
  return plan;
}
} // namespace

Expected<Plan> parsePlan(const std::string &text) {
  try {
    Plan plan = parse(text);
    if (Error problem = verifyPlan(plan))
      return problem;
    return plan;
  } catch (const PlanError &e) {
    return Error(e.message);
  } catch (const json::exception &e) {
    return Error(std::string("malformed plan: ") + e.what());
  } catch (const std::exception &e) {
    return Error(std::string("malformed plan: ") + e.what());
  }
}

Expected<Plan> loadPlan(const std::string &path) {
  // The largest plans (405B over 8 ranks, 1024 layers) are tens of MB.
  Expected<std::string> text = readRegularFile(path, int64_t(1) << 30, "plan");
  if (!text)
    return text.takeError();
  Expected<Plan> plan = parsePlan(*text);
  if (!plan)
    return Error(path + ": " + plan.error().message());
  return plan;
}

} // namespace kiln::runtime
