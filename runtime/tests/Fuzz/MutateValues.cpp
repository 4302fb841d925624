//===- MutateValues.cpp - Mutations of what the structure holds ----------===//
//
// Shapes, arena offsets and sizes, fused-group instructions and outputs,
// attributes and value rows; and the near-valid edits, which keep a plan
// well-formed often enough to pass the verifier and run.
//
//===----------------------------------------------------------------------===//

#include "Mutation.h"

#include "kiln/Runtime/Plan/Format.h"

#include <algorithm>
#include <limits>

namespace kiln::fuzz::detail {

/// A shape list: of a value, of a shard part, or of nothing at all.
std::string Mutator::editShape() {
  std::vector<Slot> all = slots();
  std::vector<int> shapes;
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i].key && *all[i].key == "shape" && all[i].node->is_array())
      shapes.push_back(static_cast<int>(i));
  if (shapes.empty())
    return "";
  int at = rng.of(shapes);
  json &shape = *all[at].node;
  std::string old = shown(shape);
  size_t n = shape.size();
  switch (rng.pick(8)) {
  case 0: {
    if (n == 0)
      return "";
    size_t d = rng.pick(n);
    switch (rng.pick(6)) {
    case 0:
      shape[d] = arith(rng, shape[d], 1);
      break;
    case 1:
      shape[d] = arith(rng, shape[d], -1);
      break;
    case 2:
      shape[d] = arith(rng, shape[d], 0, 2);
      break;
    case 3:
      shape[d] = arith(rng, shape[d], 0, 1, 2);
      break;
    case 4:
      shape[d] = 0;
      break;
    default:
      shape[d] = 1;
      break;
    }
    break;
  }
  case 1:
    if (n == 0)
      return "";
    shape[rng.pick(n)] = boundary(rng, shape[0]);
    break;
  case 2:
    if (n == 0)
      return "";
    shape.erase(rng.pick(n));
    break;
  case 3:
    shape.insert(shape.begin() + rng.pick(n + 1), rng.percent(70) ? 1 : 2);
    break;
  case 4: {
    if (n < 2)
      return "";
    size_t a = rng.pick(n), b = rng.pick(n);
    std::swap(shape[a], shape[b]);
    break;
  }
  case 5:
    shape = *all[rng.of(shapes)].node;
    break;
  case 6:
    shape = json::array();
    break;
  default: {
    // 9 dimensions, or dimensions whose product passes 2^48.
    shape = rng.percent(50) ? json::array({1, 1, 1, 1, 1, 1, 1, 1, 1})
                            : json::array({int64_t(1) << 24, int64_t(1) << 25});
    break;
  }
  }
  return "shape " + pathOf(all, at) + " from " + old + " to " + shown(shape);
}

std::string Mutator::editOffset() {
  json *vals = values();
  if (!vals)
    return "";
  std::vector<size_t> arena;
  for (size_t i = 0; i < vals->size(); ++i)
    if ((*vals)[i].is_object() && (*vals)[i].contains("offset"))
      arena.push_back(i);
  if (arena.empty() || rng.percent(15)) {
    // The arena's size: of the plan or of an entry.
    json *target = &plan;
    std::string where = "/arena_bytes";
    if (rng.percent(50)) {
      std::vector<StepRef> all = steps();
      if (!all.empty()) {
        std::string entry = rng.of(all).entry;
        target = &plan["entries"][entry];
        where = "/entries/" + entry + "/arena_bytes";
      }
    }
    json &bytes = (*target)["arena_bytes"];
    std::string old = shown(bytes);
    switch (rng.pick(5)) {
    case 0:
      bytes = arith(rng, bytes, -1);
      break;
    case 1:
      bytes = arith(rng, bytes, -64);
      break;
    case 2:
      bytes = arith(rng, bytes, 0, 1, 2);
      break;
    case 3:
      bytes = arith(rng, bytes, 0, 2);
      break;
    default:
      bytes = 0;
      break;
    }
    return where + " from " + old + " to " + shown(bytes);
  }
  size_t i = rng.of(arena);
  json &offset = (*vals)[i]["offset"];
  std::string old = shown(offset);
  switch (rng.pick(4)) {
  case 0: // another buffer's offset: two live values may now overlap
    offset = (*vals)[rng.of(arena)]["offset"];
    break;
  case 1: {
    const int64_t deltas[] = {1, 2, 4, 8, 64, -64, -4, 128};
    offset = arith(rng, offset, rng.of(deltas));
    break;
  }
  case 2:
    offset = plan.value("arena_bytes", json(0));
    break;
  default:
    offset = boundary(rng, offset);
    break;
  }
  return "offset of value " + std::to_string(i) + " from " + old + " to " +
         shown(offset);
}

std::string Mutator::editGroup() {
  std::vector<StepRef> all = steps(true);
  if (all.empty())
    return "";
  StepRef s = rng.of(all);
  json &group = (*s.step)["group"];
  std::string where = s.path() + "/group";
  json *body = member(group, "body");
  json *outputs = member(group, "outputs");
  switch (rng.pick(10)) {
  case 0:
  case 1:
  case 2: { // one instruction's field
    if (!body || !body->is_array() || body->empty())
      return "";
    size_t i = rng.pick(body->size());
    json &in = (*body)[i];
    if (!in.is_object())
      return "";
    std::string at = where + "/body/" + std::to_string(i);
    switch (rng.pick(7)) {
    case 0:
      in["op"] = rng.of(kGroupOps);
      return at + " op to " + shown(in["op"]);
    case 1:
      in["type"] = rng.of(kDTypes);
      return at + " type to " + shown(in["type"]);
    case 2:
      in["kind"] = rng.of(kLoadKinds);
      return at + " kind to " + shown(in["kind"]);
    case 3: {
      json v = rng.percent(50) ? json(static_cast<int64_t>(rng.pick(8)))
                               : boundary(rng, json(0));
      in["operand"] = v;
      return at + " operand to " + shown(v);
    }
    case 4: {
      json &args = in["args"];
      if (!args.is_array())
        args = json::array();
      int64_t k = static_cast<int64_t>(i);
      const int64_t options[] = {k, k + 1, k - 1, 0, -1};
      if (args.empty() || rng.percent(30))
        args.push_back(rng.of(options));
      else if (rng.percent(50))
        args[rng.pick(args.size())] = rng.of(options);
      else
        args.erase(rng.pick(args.size()));
      return at + " args to " + shown(args);
    }
    case 5: {
      const double values[] = {1e308,  -1e308, 0.0,   -0.0,    4.9e-324,
                               3.5e38, 1e-45,  448.0, 57344.0, 65504.0};
      in["value"] = rng.of(values);
      return at + " value to " + shown(in["value"]);
    }
    default: {
      auto it = in.begin();
      if (in.empty())
        return "";
      std::advance(it, rng.pick(in.size()));
      std::string key = it.key();
      in.erase(it);
      return "deleted " + at + "/" + key;
    }
    }
  }
  case 3: { // instructions removed, duplicated, swapped
    if (!body || !body->is_array() || body->empty())
      return "";
    size_t i = rng.pick(body->size());
    if (rng.percent(40)) {
      body->erase(i);
      return "deleted " + where + "/body/" + std::to_string(i);
    }
    if (rng.percent(50)) {
      json copy = (*body)[i];
      body->insert(body->begin() + rng.pick(body->size() + 1), copy);
      return "duplicated " + where + "/body/" + std::to_string(i);
    }
    std::swap((*body)[i], (*body)[rng.pick(body->size())]);
    return "swapped " + where + "/body/" + std::to_string(i);
  }
  case 4:
  case 5:
  case 6: { // an output
    if (!outputs || !outputs->is_array() || outputs->empty())
      return "";
    size_t o = rng.pick(outputs->size());
    std::string at = where + "/outputs/" + std::to_string(o);
    json &out = (*outputs)[o];
    switch (rng.pick(5)) {
    case 0: {
      int64_t n = body && body->is_array() ? body->size() : 0;
      const int64_t options[] = {n, n - 1, 0, -1,
                                 static_cast<int64_t>(rng.pick(n + 1))};
      out["value"] = rng.of(options);
      return at + " value to " + shown(out["value"]);
    }
    case 1:
      out["store"] = rng.of(kStores);
      return at + " store to " + shown(out["store"]);
    case 2:
      outputs->erase(o);
      return "deleted " + at;
    case 3:
      outputs->push_back(out);
      return "duplicated " + at;
    default:
      out = otherType(rng, out);
      return at + " retyped";
    }
  }
  case 7: { // the iteration space
    const char *key = rng.percent(50) ? "rows" : "cols";
    json &v = group[key];
    std::string old = shown(v);
    if (rng.percent(30) && group.contains("rows") && group.contains("cols"))
      std::swap(group["rows"], group["cols"]);
    else if (rng.percent(50))
      v = arith(rng, v, rng.percent(50) ? 1 : -1);
    else
      v = boundary(rng, v);
    return where + "/" + key + " from " + old + " to " + shown(group[key]);
  }
  case 8: // a group from another step
    group = (*rng.of(all).step)["group"];
    return where + " replaced by another step's group";
  default: {
    json *list = rng.percent(50) ? body : outputs;
    if (!list)
      return "";
    *list = rng.percent(50) ? json::array() : otherType(rng, *list);
    return where + " " + (list == body ? "body" : "outputs") +
           " emptied or retyped";
  }
  }
}

std::string Mutator::editAttrs() {
  std::vector<StepRef> all = steps();
  if (all.empty())
    return "";
  StepRef s = rng.of(all);
  json &step = *s.step;
  if (!step.is_object())
    return "";
  json *found = member(step, "attrs");
  if (!found || !found->is_object())
    return "";
  json &attrs = *found;
  std::string where = s.path() + "/attrs";
  if (attrs.empty() || rng.percent(15)) {
    // An attribute the op does not take, or an annotation of a bad type.
    if (rng.percent(50)) {
      attrs["kiln.recomputed"] = rng.percent(50) ? json(1) : json::array();
      return where + "/kiln.recomputed set to a non-annotation";
    }
    const char *names[] = {"scale", "theta", "ranks", "offsets", "bogus"};
    const char *name = rng.of(names);
    attrs[name] = boundary(rng, json(1));
    return where + "/" + name + " added as " + shown(attrs[name]);
  }
  auto it = attrs.begin();
  std::advance(it, rng.pick(attrs.size()));
  std::string key = it.key();
  json &v = it.value();
  std::string old = shown(v);
  switch (rng.pick(6)) {
  case 0:
    attrs.erase(key);
    return "deleted " + where + "/" + key;
  case 1:
    v = otherType(rng, v);
    break;
  case 2:
  case 3:
    if (v.is_array()) {
      if (v.empty() || rng.percent(30))
        v.push_back(boundary(rng, json(0)));
      else if (rng.percent(50))
        v[rng.pick(v.size())] = boundary(rng, v[0]);
      else
        v.erase(rng.pick(v.size()));
    } else if (v.is_string()) {
      v = rng.of(kStrings);
    } else if (v.is_boolean()) {
      v = !v.get<bool>();
    } else {
      v = boundary(rng, v);
    }
    break;
  case 4: {
    // Out of range: negative, zero, past the top.
    const double values[] = {-1.0, 0.0, 1.0000001, 2.0, -1e308, 1e308};
    v = rng.of(values);
    break;
  }
  default:
    v = raw(rng.of(kRawTokens));
    break;
  }
  return where + "/" + key + " from " + old + " to " + shown(v);
}

std::string Mutator::editValue() {
  json *vals = values();
  if (!vals)
    return "";
  size_t i = rng.pick(vals->size());
  json &v = (*vals)[i];
  if (!v.is_object())
    return "";
  std::string at = "/values/" + std::to_string(i);
  switch (rng.pick(9)) {
  case 0:
    v["kind"] = rng.of(kValueKinds);
    return at + " kind to " + shown(v["kind"]);
  case 1:
    v["dtype"] = rng.of(kDTypes);
    return at + " dtype to " + shown(v["dtype"]);
  case 2:
    if (rng.percent(60)) {
      v["name"] = rng.of(kNames);
    } else {
      const json &other = (*vals)[rng.pick(vals->size())];
      v["name"] =
          other.is_object() ? other.value("name", json("x")) : json("x");
    }
    return at + " name to " + shown(v["name"]);
  case 3:
    v["id"] = boundary(rng, v.value("id", json(0)));
    return at + " id to " + shown(v["id"]);
  case 4: {
    json &init = v["init"];
    if (!init.is_object())
      init = json::object();
    switch (rng.pick(4)) {
    case 0:
      init["kind"] = rng.of(kInits);
      break;
    case 1:
      init["std"] = rng.percent(50) ? json(1e308) : boundary(rng, json(0.02));
      break;
    case 2: // a truncation interval that is empty or never drawn from
      init["a"] = 3.0;
      init["b"] = rng.percent(50) ? -3.0 : 4.0;
      break;
    default:
      init.erase(rng.percent(50) ? "std" : "kind");
      break;
    }
    return at + " init to " + shown(init);
  }
  case 5: { // a part of a sharded state
    json *parts = member(v, "shard_of");
    if (!parts || !parts->is_array() || parts->empty())
      return "";
    size_t p = rng.pick(parts->size());
    json &part = (*parts)[p];
    std::string where = at + "/shard_of/" + std::to_string(p);
    if (rng.percent(50) && part.is_object()) {
      part["offset"] = boundary(rng, part.value("offset", json(0)));
      return where + " offset to " + shown(part["offset"]);
    }
    if (rng.percent(50))
      parts->push_back(part);
    else
      parts->erase(p);
    return where + " duplicated or removed";
  }
  case 6:
    v["value"] = rng.percent(50) ? json(1e308) : boundary(rng, json(1.0));
    return at + " value to " + shown(v["value"]);
  case 7: // another value's description, id kept
    v = (*vals)[rng.pick(vals->size())];
    v["id"] = static_cast<int64_t>(i);
    return at + " made a copy of another value";
  default:
    vals->erase(i);
    return "deleted " + at;
  }
}

/// Edits that keep the plan well-formed often enough to pass the verifier
/// and run: an operand replaced by another value of its shape and dtype,
/// an attribute at the edge of its range, a huge constant or initial
/// value, a long or odd location.
std::string Mutator::nearValid() {
  std::vector<StepRef> all = steps();
  json *vals = values();
  if (all.empty() || !vals)
    return "";
  StepRef s = rng.of(all);
  json &step = *s.step;
  if (!step.is_object())
    return "";
  switch (rng.pick(8)) {
  case 0:
  case 1: { // a same-shaped, same-typed, same-kind operand
    json *ops = member(step, "operands");
    if (!ops || !ops->is_array() || ops->empty())
      return "";
    size_t k = rng.pick(ops->size());
    if (!(*ops)[k].is_number_integer())
      return "";
    int64_t id = (*ops)[k].get<int64_t>();
    if (id < 0 || id >= static_cast<int64_t>(vals->size()))
      return "";
    const json &v = (*vals)[id];
    std::vector<int64_t> like;
    for (size_t i = 0; i < vals->size(); ++i) {
      const json &w = (*vals)[i];
      if (!w.is_object() || !v.is_object())
        continue;
      if (static_cast<int64_t>(i) != id &&
          w.value("shape", json()) == v.value("shape", json()) &&
          w.value("dtype", json()) == v.value("dtype", json()) &&
          w.value("kind", json()) == v.value("kind", json()))
        like.push_back(static_cast<int64_t>(i));
    }
    if (like.empty())
      return "";
    (*ops)[k] = rng.of(like);
    return s.path() + "/operands/" + std::to_string(k) + " from " +
           std::to_string(id) + " to a like value " + shown((*ops)[k]);
  }
  case 2: { // a numeric attribute at the edge of its range
    json *attrs = member(step, "attrs");
    if (!attrs || !attrs->is_object())
      return "";
    std::vector<std::string> numeric;
    for (auto it = attrs->begin(); it != attrs->end(); ++it)
      if (it.value().is_number())
        numeric.push_back(it.key());
    if (numeric.empty())
      return "";
    std::string key = rng.of(numeric);
    const double edges[] = {
        0.0, 1.0, 2.2250738585072014e-308, 1e308, 1e-30, 1e30, 0.999999};
    json &v = (*attrs)[key];
    if (v.is_number_integer()) {
      const int64_t ints[] = {0, 1, 2, 1000000000000000, 1 << 30};
      v = rng.of(ints);
    } else {
      v = rng.of(edges);
    }
    return s.path() + "/attrs/" + key + " to " + shown(v);
  }
  case 3: { // a constant or an initialiser's scale, huge or zero
    size_t i = rng.pick(vals->size());
    json &v = (*vals)[i];
    if (!v.is_object())
      return "";
    const double scales[] = {1e30, 1e308, 0.0, -1e30, 1e-300, 3e38};
    double x = rng.of(scales);
    if (v.contains("value"))
      v["value"] = x;
    else if (v.contains("init") && v["init"].is_object())
      v["init"]["std"] = x;
    else
      return "";
    return "/values/" + std::to_string(i) + " value or std to " + shown(x);
  }
  case 4: { // the location, used in messages
    const char *locs[] = {"", "a\nb", "x at m.toml:1:1\r", "\"quoted\"",
                          "\xe2\x80\xa8"};
    step["loc"] =
        rng.percent(20) ? json(std::string(100000, 'L')) : json(rng.of(locs));
    return s.path() + "/loc to " + shown(step["loc"]);
  }
  case 5: { // a step run twice
    json &list = plan["entries"][s.entry]["steps"];
    json copy = list[s.index];
    list.insert(list.begin() + s.index + 1, copy);
    return "repeated " + s.path();
  }
  default: { // a group instruction changed for one of its arity and kind
    std::vector<StepRef> groups = steps(true);
    if (groups.empty())
      return "";
    StepRef g = rng.of(groups);
    json *body = member((*g.step)["group"], "body");
    if (!body || !body->is_array() || body->empty())
      return "";
    size_t i = rng.pick(body->size());
    json &in = (*body)[i];
    if (!in.is_object() || !in.contains("op") || !in["op"].is_string())
      return "";
    std::string at = g.path() + "/group/body/" + std::to_string(i);
    const char *unary[] = {"neg",     "exp",     "log", "sqrt",      "rsqrt",
                           "sigmoid", "convert", "abs", "pow2_floor"};
    const char *binary[] = {"add", "sub", "mul", "div", "max", "min"};
    const char *rows[] = {"row_sum", "row_max"};
    const char *types[] = {"f32", "bf16", "f8e4m3", "f8e5m2"};
    const double values[] = {1e308, -1e308, 0.0, 3.5e38, 1e-45, -0.0};
    std::string op = in["op"];
    if (op == "load")
      return "";
    if (op == "const") {
      in["value"] = rng.of(values);
      return at + " const value to " + shown(in["value"]);
    }
    if (rng.percent(30)) {
      in["type"] = rng.of(types);
      return at + " type to " + shown(in["type"]);
    }
    bool isRow = op == "row_sum" || op == "row_max";
    size_t args =
        in.contains("args") && in["args"].is_array() ? in["args"].size() : 0;
    in["op"] = isRow       ? rng.of(rows)
               : args == 2 ? rng.of(binary)
                           : rng.of(unary);
    return at + " op from " + op + " to " + shown(in["op"]);
  }
  }
}

} // namespace kiln::fuzz::detail
