//===- Plan.cpp - Reading and checking a plan -----------------------------===//
//
// Every reader returns an Error or an Expected<T>, so a bad plan is one
// error line and never aborts the runtime. nlohmann::json throws only on
// malformed text (json::parse, caught in parsePlan): the readers check a
// value's type before they read it.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Plan.h"
#include "kiln/Runtime/Support/Files.h"

#include "PlanJson.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <new>

namespace kiln::runtime {

using nlohmann::json;
using plan::kMaxBytes;
using plan::kMaxEvalSteps;
using plan::kMaxTimeoutSeconds;
using plan::kMaxTrainingSteps;

namespace {
using namespace planjson;

Expected<InitSpec> parseInit(const json &j, const std::string &what) {
  static const std::map<std::string, InitSpec::Kind> kinds = {
      {"zeros", InitSpec::Zeros},
      {"ones", InitSpec::Ones},
      {"normal", InitSpec::Normal},
      {"trunc_normal", InitSpec::TruncNormal}};
  InitSpec init;
  Expected<InitSpec::Kind> kind =
      enumMember(kinds, j, "kind", what, "initialiser");
  if (!kind)
    return kind.takeError();
  init.kind = *kind;
  // Number `key`, which must be finite.
  auto finite = [&](const char *key) -> Expected<double> {
    Expected<double> v = readMember(j, key, what, number);
    if (v && !std::isfinite(*v))
      return fail(what + " " + key, "must be finite");
    return v;
  };
  if (init.kind == InitSpec::Normal || init.kind == InitSpec::TruncNormal) {
    Expected<double> deviation = finite("std");
    if (!deviation)
      return deviation.takeError();
    init.std = *deviation;
  }
  if (init.kind == InitSpec::TruncNormal) {
    Expected<double> a = finite("a");
    if (!a)
      return a.takeError();
    Expected<double> b = finite("b");
    if (!b)
      return b.takeError();
    init.a = *a;
    init.b = *b;
    // Values are drawn until one lies in [a, b], then clamped to it: an
    // empty interval has no values.
    if (init.a > init.b)
      return fail(what, "has an empty truncation interval: a (" +
                            std::to_string(init.a) + ") is greater than b (" +
                            std::to_string(init.b) + ")");
  }
  return init;
}

Expected<AttrValue> parseAttr(const json &j, const std::string &what) {
  if (j.is_boolean())
    return AttrValue(j.get<bool>());
  if (j.is_number_integer()) {
    Expected<int64_t> v = integer(j, INT64_MIN, INT64_MAX, what);
    if (!v)
      return v.takeError();
    return AttrValue(*v);
  }
  if (j.is_number())
    return AttrValue(j.get<double>());
  if (j.is_string()) {
    Expected<std::string> v = text(j, what);
    if (!v)
      return v.takeError();
    return AttrValue(std::move(*v));
  }
  if (j.is_array()) {
    Expected<std::vector<int64_t>> v = integers(j, INT64_MIN, INT64_MAX, what);
    if (!v)
      return v.takeError();
    return AttrValue(std::move(*v));
  }
  return fail(what, "has an unsupported value " + shown(j));
}

/// Instruction `at` of a fused group's body.
Expected<GroupInstr> parseInstr(const json &ji, const std::string &at) {
  GroupInstr in;
  Expected<std::string> op = readMember(ji, "op", at, text);
  if (!op)
    return op.takeError();
  std::optional<plan::GroupOp> parsed =
      plan::parseGroupName<plan::GroupOp>(*op);
  if (!parsed)
    return fail(at, "is an unknown group instruction '" + *op + "'");
  in.op = *parsed;
  if (ji.contains("type")) {
    Expected<DType> type = parseDType(ji["type"], at + " type");
    if (!type)
      return type.takeError();
    in.type = *type;
  }
  if (ji.contains("args")) {
    Expected<std::vector<int64_t>> args =
        integers(ji["args"], 0, INT32_MAX, at + " args");
    if (!args)
      return args.takeError();
    for (int64_t a : *args)
      in.args.push_back(static_cast<int32_t>(a));
  }
  if (in.op == GroupInstr::Op::Load) {
    Expected<int64_t> operand = integerMember(ji, "operand", 0, INT32_MAX, at);
    if (!operand)
      return operand.takeError();
    in.operand = static_cast<int32_t>(*operand);
    Expected<const json *> kind = member(ji, "kind", at);
    if (!kind)
      return kind.takeError();
    Expected<std::string> name = text(**kind, at + " kind");
    if (!name)
      return name.takeError();
    std::optional<GroupKind> parsedKind =
        plan::parseGroupName<GroupKind>(*name);
    if (!parsedKind)
      return fail(at, "has an unknown load kind " + shown(**kind));
    in.kind = *parsedKind;
  }
  if (in.op == GroupInstr::Op::Const) {
    Expected<double> value = readMember(ji, "value", at, number);
    if (!value)
      return value.takeError();
    in.value = *value;
  }
  return in;
}

/// Output `at` of a fused group.
Expected<GroupOutput> parseOutput(const json &jo, const std::string &at) {
  GroupOutput out;
  Expected<int64_t> value = integerMember(jo, "value", 0, INT32_MAX, at);
  if (!value)
    return value.takeError();
  out.value = static_cast<int32_t>(*value);
  std::string store = "elem";
  if (jo.contains("store")) {
    Expected<std::string> written = text(jo["store"], at + " store");
    if (!written)
      return written.takeError();
    store = *written;
  }
  std::optional<GroupOutput::Store> parsedStore =
      plan::parseGroupName<plan::GroupStore>(store);
  if (!parsedStore)
    return fail(at, "has an unknown store '" + store + "'");
  out.store = *parsedStore;
  return out;
}

/// The `group` of a `fused` step, checked against the values it reads and
/// writes (checkFusedGroup; ids are checked here first).
Expected<std::shared_ptr<const FusedGroup>>
parseGroup(const json &j, const PlanStep &step, const Plan &plan,
           const std::string &where) {
  std::string what = where + " group";
  auto group = std::make_shared<FusedGroup>();
  Expected<int64_t> rows =
      integerMember(j, "rows", 1, plan::kMaxElements, what);
  if (!rows)
    return rows.takeError();
  Expected<int64_t> cols =
      integerMember(j, "cols", 1, plan::kMaxElements, what);
  if (!cols)
    return cols.takeError();
  group->rows = *rows;
  group->cols = *cols;
  if (group->rows > plan::kMaxElements / group->cols)
    return fail(what, "has more than 2^48 points");
  Expected<const json *> body = arrayMember(j, "body", what);
  if (!body)
    return body.takeError();
  for (const json &ji : **body) {
    Expected<GroupInstr> in = parseInstr(
        ji, what + " instruction " + std::to_string(group->body.size()));
    if (!in)
      return in.takeError();
    group->body.push_back(std::move(*in));
  }
  Expected<const json *> outputs = arrayMember(j, "outputs", what);
  if (!outputs)
    return outputs.takeError();
  for (const json &jo : **outputs) {
    Expected<GroupOutput> out = parseOutput(
        jo, what + " output " + std::to_string(group->outputs.size()));
    if (!out)
      return out.takeError();
    group->outputs.push_back(*out);
  }
  auto values = [&](const std::vector<int64_t> &ids) {
    std::vector<const PlanValue *> out;
    for (int64_t id : ids)
      out.push_back(&plan.values[id]);
    return out;
  };
  if (Error e =
          checkFusedGroup(*group, values(step.operands), values(step.results)))
    return Error(what + ": " + e.message());
  return std::shared_ptr<const FusedGroup>(std::move(group));
}

/// The optional `tp_shard` member of a value or a flat shard's part: which
/// slice of the whole tensor it is (the verifier checks it against the
/// shape and the mesh).
Error parseTpSlice(const json &j, const std::string &at,
                   std::optional<TpSlice> &slice) {
  if (!j.is_object() || !j.contains("tp_shard"))
    return Error::success();
  const json &js = j["tp_shard"];
  std::string what = at + " tp_shard";
  Expected<int64_t> dim = integerMember(js, "dim", 0, 7, what);
  if (!dim)
    return dim.takeError();
  Expected<int64_t> index =
      integerMember(js, "index", 0, plan::kMaxRanks - 1, what);
  if (!index)
    return index.takeError();
  int64_t pad = 0;
  if (js.is_object() && js.contains("pad")) {
    Expected<int64_t> p = integerMember(js, "pad", 0, plan::kMaxElements, what);
    if (!p)
      return p.takeError();
    pad = *p;
  }
  slice = TpSlice{*dim, *index, pad};
  return Error::success();
}

/// One part of a sharded state's `shard_of`.
Expected<ShardPart> parseShardPart(const json &jp, const std::string &at) {
  ShardPart part;
  Expected<std::string> name = readMember(jp, "name", at, text);
  if (!name)
    return name.takeError();
  part.name = std::move(*name);
  Expected<int64_t> offset =
      integerMember(jp, "offset", 0, plan::kMaxElements, at);
  if (!offset)
    return offset.takeError();
  part.offset = *offset;
  Expected<std::vector<int64_t>> shape = readMember(jp, "shape", at, shapeOf);
  if (!shape)
    return shape.takeError();
  part.shape = std::move(*shape);
  Expected<InitSpec> init = readMember(jp, "init", at, parseInit);
  if (!init)
    return init.takeError();
  part.init = *init;
  if (Error e = parseTpSlice(jp, at, part.tp))
    return e;
  return part;
}

Expected<PlanValue> parseValue(const json &jv, const Plan &plan) {
  static const std::map<std::string, PlanValue::Kind> kinds = {
      {"state", PlanValue::State},
      {"input", PlanValue::Input},
      {"const", PlanValue::Const},
      {"arena", PlanValue::Arena}};
  PlanValue v;
  std::string what = "value " + std::to_string(plan.values.size());
  Expected<int64_t> id = integerMember(jv, "id", 0, INT64_MAX, what);
  if (!id)
    return id.takeError();
  v.id = *id;
  if (v.id != static_cast<int64_t>(plan.values.size()))
    return fail(what, "has id " + std::to_string(v.id) +
                          "; value ids are 0, 1, 2, ... in order");
  Expected<PlanValue::Kind> kind = enumMember(kinds, jv, "kind", what, "kind");
  if (!kind)
    return kind.takeError();
  v.kind = *kind;
  Expected<std::vector<int64_t>> shape = readMember(jv, "shape", what, shapeOf);
  if (!shape)
    return shape.takeError();
  v.shape = std::move(*shape);
  Expected<DType> dtype = readMember(jv, "dtype", what, parseDType);
  if (!dtype)
    return dtype.takeError();
  v.dtype = *dtype;
  if (v.kind == PlanValue::State || v.kind == PlanValue::Input) {
    Expected<std::string> name = readMember(jv, "name", what, text);
    if (!name)
      return name.takeError();
    v.name = std::move(*name);
  }
  if (v.kind == PlanValue::State) {
    Expected<InitSpec> init = readMember(jv, "init", what, parseInit);
    if (!init)
      return init.takeError();
    v.init = *init;
  }
  if (v.kind == PlanValue::State || v.kind == PlanValue::Input)
    if (Error e = parseTpSlice(jv, what, v.tp))
      return e;
  if (v.kind == PlanValue::State && jv.contains("shard_of")) {
    const json &parts = jv["shard_of"];
    if (Error e = array(parts, what + " shard_of"))
      return e;
    for (const json &jp : parts) {
      Expected<ShardPart> part = parseShardPart(
          jp, what + " shard_of part " + std::to_string(v.shardOf.size()));
      if (!part)
        return part.takeError();
      v.shardOf.push_back(std::move(*part));
    }
  }
  if (v.kind == PlanValue::Const) {
    Expected<double> value = readMember(jv, "value", what, number);
    if (!value)
      return value.takeError();
    v.constValue = *value;
  }
  if (v.kind == PlanValue::Arena) {
    Expected<int64_t> offset = integerMember(jv, "offset", 0, kMaxBytes, what);
    if (!offset)
      return offset.takeError();
    v.offset = *offset;
  }
  if (v.kind == PlanValue::Arena && jv.contains("view_of")) {
    // An earlier arena buffer (not itself a view) of the same bytes.
    Expected<int64_t> of = integerMember(jv, "view_of", 0, v.id - 1, what);
    if (!of)
      return of.takeError();
    const PlanValue &base = plan.values[*of];
    if (base.kind != PlanValue::Arena || base.viewOf >= 0)
      return fail(what, "is a view of value " + std::to_string(*of) +
                            ", which is not an arena buffer of its own");
    if (base.offset != v.offset || base.dtype != v.dtype ||
        base.numElements() != v.numElements())
      return fail(what, "is a view of value " + std::to_string(*of) +
                            " but not of its offset, dtype and size");
    v.viewOf = *of;
  }
  return v;
}

Expected<PlanStep> parseStep(const json &js, const Plan &plan,
                             const std::string &where) {
  PlanStep step;
  Expected<std::string> op = readMember(js, "op", where, text);
  if (!op)
    return op.takeError();
  step.op = std::move(*op);
  const plan::OpInfo *info = plan::findOp(step.op);
  if (!info)
    return fail(where, "has an unknown op '" + step.op + "'");
  std::string what = where + " (" + step.op + ")";
  if (info->category == plan::Category::GroupOnly)
    return fail(what, "is an op that only appears inside fused groups (as a "
                      "\"fused\" step)");
  step.kind = info->op;
  int64_t last = static_cast<int64_t>(plan.values.size()) - 1;
  auto ids = [&](const json &list, const std::string &name) {
    return integers(list, 0, last, name);
  };
  Expected<std::vector<int64_t>> operands =
      readMember(js, "operands", what, ids);
  if (!operands)
    return operands.takeError();
  step.operands = std::move(*operands);
  Expected<std::vector<int64_t>> results = readMember(js, "results", what, ids);
  if (!results)
    return results.takeError();
  step.results = std::move(*results);
  if (js.contains("loc")) {
    Expected<std::string> loc = text(js["loc"], what + " loc");
    if (!loc)
      return loc.takeError();
    step.loc = std::move(*loc);
  }
  Expected<const json *> attrs = member(js, "attrs", what);
  if (!attrs)
    return attrs.takeError();
  if (!(*attrs)->is_object())
    return fail(what + " attrs", "must be an object");
  for (const auto &[key, value] : (*attrs)->items()) {
    if (Error e = plain(key, what + " attribute name"))
      return e;
    Expected<AttrValue> attr =
        parseAttr(value, what + " attribute '" + key + "'");
    if (!attr)
      return attr.takeError();
    step.attrs[key] = std::move(*attr);
  }
  if (step.kind == plan::Op::Fused) {
    Expected<const json *> group = member(js, "group", what);
    if (!group)
      return group.takeError();
    Expected<std::shared_ptr<const FusedGroup>> parsed =
        parseGroup(**group, step, plan, what);
    if (!parsed)
      return parsed.takeError();
    step.group = std::move(*parsed);
  } else if (js.contains("group")) {
    return fail(what, "has a group, but only \"fused\" steps have one");
  }
  return step;
}

/// Entry `name`: its arena, what is live at its peak, its outputs and steps.
Expected<PlanEntry> parseEntry(const json &je, const std::string &name,
                               const Plan &plan) {
  std::string what = "entry " + name;
  PlanEntry entry;
  Expected<int64_t> arena =
      integerMember(je, "arena_bytes", 0, kMaxBytes, what);
  if (!arena)
    return arena.takeError();
  entry.arenaBytes = *arena;
  if (je.contains("live_at_peak")) {
    const json &jl = je["live_at_peak"];
    std::string at = what + " live_at_peak";
    LiveAtPeak &peak = entry.liveAtPeak;
    const std::tuple<const char *, int64_t, int64_t *> fields[] = {
        {"peak_step", INT64_MAX, &peak.step},
        {"parameter_copies", kMaxBytes, &peak.parameterCopies},
        {"gradients", kMaxBytes, &peak.gradients},
        {"activations", kMaxBytes, &peak.activations}};
    for (const auto &[key, max, field] : fields) {
      Expected<int64_t> v = integerMember(jl, key, 0, max, at);
      if (!v)
        return v.takeError();
      *field = *v;
    }
  }
  Expected<const json *> outputs = member(je, "outputs", what);
  if (!outputs)
    return outputs.takeError();
  if (!(*outputs)->is_object())
    return fail(what + " outputs", "must be an object");
  for (const auto &[out, id] : (*outputs)->items()) {
    if (Error e = plain(out, what + " output name"))
      return e;
    Expected<int64_t> value =
        integer(id, 0, static_cast<int64_t>(plan.values.size()) - 1,
                what + " output '" + out + "'");
    if (!value)
      return value.takeError();
    entry.outputs[out] = *value;
  }
  Expected<const json *> steps = arrayMember(je, "steps", what);
  if (!steps)
    return steps.takeError();
  for (const json &js : **steps) {
    Expected<PlanStep> step = parseStep(
        js, plan, name + " step " + std::to_string(entry.steps.size()));
    if (!step)
      return step.takeError();
    entry.steps.push_back(std::move(*step));
  }
  return entry;
}

/// The training section.
Expected<TrainingSpec> parseTraining(const json &jt) {
  TrainingSpec t;
  const std::string training = "the training section";
  const std::tuple<const char *, int64_t, int64_t, int64_t *> integers[] = {
      {"steps", 0, kMaxTrainingSteps, &t.steps},
      {"seed", 0, INT64_MAX, &t.seed},
      {"eval_interval", 0, kMaxTrainingSteps, &t.evalInterval},
      {"eval_steps", 1, kMaxEvalSteps, &t.evalSteps},
      {"checkpoint_interval", 0, kMaxTrainingSteps, &t.checkpointInterval}};
  for (const auto &[key, min, max, field] : integers) {
    Expected<int64_t> v = integerMember(jt, key, min, max, training);
    if (!v)
      return v.takeError();
    *field = *v;
  }
  Expected<std::string> data = readMember(jt, "data", training, text);
  if (!data)
    return data.takeError();
  t.data = std::move(*data);
  Expected<std::string> folder =
      readMember(jt, "checkpoint_folder", training, text);
  if (!folder)
    return folder.takeError();
  t.checkpointFolder = std::move(*folder);
  // Optional: plans written before the collective deadline existed.
  if (jt.contains("comm_timeout_seconds")) {
    Expected<int64_t> timeout =
        integer(jt["comm_timeout_seconds"], 0, kMaxTimeoutSeconds,
                training + " comm_timeout_seconds");
    if (!timeout)
      return timeout.takeError();
    t.commTimeoutSeconds = *timeout;
  }
  return t;
}

/// The plan's JSON, read into a Plan (verifyPlan checks it next).
Expected<Plan> parse(const json &j) {
  auto format = j.find("format");
  if (format == j.end() || *format != "kiln-plan")
    return Error("not a Kiln plan (no \"format\": \"kiln-plan\")");
  Plan plan;
  const std::string top = "the plan";
  Expected<int64_t> version = integerMember(j, "version", 0, INT32_MAX, top);
  if (!version)
    return version.takeError();
  plan.version = static_cast<int>(*version);
  if (plan.version != plan::kVersion)
    return Error("plan version " + std::to_string(plan.version) +
                 " is not supported by this runtime (it reads version " +
                 std::to_string(plan::kVersion) +
                 "); compile the model again with this build's kiln "
                 "(kiln compile MODEL -o PLAN)");
  Expected<int64_t> vocab = integerMember(j, "vocab_size", 1, INT32_MAX, top);
  if (!vocab)
    return vocab.takeError();
  plan.vocabSize = *vocab;
  if (j.contains("ranks")) {
    Expected<int64_t> ranks =
        integer(j["ranks"], 1, plan::kMaxRanks, "the plan ranks");
    if (!ranks)
      return ranks.takeError();
    plan.ranks = *ranks;
  }
  // The mesh (version 4): its axes' sizes multiply to the ranks.
  Expected<const json *> jm = member(j, "mesh", top);
  if (!jm)
    return jm.takeError();
  Expected<int64_t> dpShard =
      integerMember(**jm, "dp_shard", 1, plan::kMaxRanks, "the plan's mesh");
  if (!dpShard)
    return dpShard.takeError();
  Expected<int64_t> tp =
      integerMember(**jm, "tp", 1, plan::kMaxRanks, "the plan's mesh");
  if (!tp)
    return tp.takeError();
  // Pipeline parallel (version 6): the pp axis and the plan's position on
  // it, both absent without it.
  int64_t pp = 1, ppIndex = 0;
  if ((*jm)->contains("pp")) {
    Expected<int64_t> size =
        integerMember(**jm, "pp", 1, plan::kMaxRanks, "the plan's mesh");
    if (!size)
      return size.takeError();
    Expected<int64_t> index =
        integerMember(**jm, "pp_index", 0, *size - 1, "the plan's mesh");
    if (!index)
      return index.takeError();
    pp = *size;
    ppIndex = *index;
  }
  plan.mesh = {*dpShard, *tp, pp};
  plan.ppIndex = ppIndex;
  if (*dpShard * *tp * pp != plan.ranks)
    return Error("the plan's mesh (" +
                 (pp > 1 ? "pp " + std::to_string(pp) + " x " : std::string()) +
                 "dp_shard " + std::to_string(*dpShard) + " x tp " +
                 std::to_string(*tp) + ") is not its " +
                 std::to_string(plan.ranks) + " ranks");
  Expected<int64_t> arena = integerMember(j, "arena_bytes", 0, kMaxBytes, top);
  if (!arena)
    return arena.takeError();
  plan.arenaBytes = *arena;
  Expected<int64_t> state = integerMember(j, "state_bytes", 0, kMaxBytes, top);
  if (!state)
    return state.takeError();
  plan.stateBytes = *state;
  Expected<const json *> jt = member(j, "training", top);
  if (!jt)
    return jt.takeError();
  Expected<TrainingSpec> training = parseTraining(**jt);
  if (!training)
    return training.takeError();
  plan.training = std::move(*training);

  Expected<const json *> values = member(j, "values", top);
  if (!values)
    return values.takeError();
  if (Error e = array(**values, "values"))
    return e;
  for (const json &jv : **values) {
    Expected<PlanValue> v = parseValue(jv, plan);
    if (!v)
      return v.takeError();
    plan.values.push_back(std::move(*v));
  }
  // The plan's tp position: its slices' index (the verifier checks that
  // they agree).
  for (const PlanValue &v : plan.values) {
    if (v.tp)
      plan.tpIndex = v.tp->index;
    for (const ShardPart &p : v.shardOf)
      if (p.tp)
        plan.tpIndex = p.tp->index;
  }
  Expected<const json *> entries = member(j, "entries", top);
  if (!entries)
    return entries.takeError();
  if (!(*entries)->is_object())
    return Error("the plan's entries must be an object");
  for (const auto &[name, je] : (*entries)->items()) {
    if (Error e = plain(name, "an entry name"))
      return e;
    Expected<PlanEntry> entry = parseEntry(je, name, plan);
    if (!entry)
      return entry.takeError();
    plan.entries[name] = std::move(*entry);
  }
  return plan;
}
} // namespace

Expected<Plan> parsePlan(const std::string &text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception &e) { // json::exception, or std::bad_alloc
    return Error(std::string("malformed plan: ") + e.what());
  }
  // Kiln's own code throws nothing; the standard library throws
  // std::bad_alloc when a plan's tables outgrow memory, which is a refusal
  // like any other, never an abort.
  try {
    Expected<Plan> plan = parse(j);
    if (!plan)
      return plan.takeError();
    if (Error problem = verifyPlan(*plan))
      return problem;
    return plan;
  } catch (const std::bad_alloc &e) {
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
