//===- PlanMutator.cpp - Structured mutations of a plan's JSON ------------===//
//
// A mutation picks its target from the plan's structure (a step, a value,
// a fused group, an attribute, or any node of the JSON tree) and edits it.
// The families are weighted so that every one of them is hit thousands of
// times in the suite's 10,000 mutants; "near-valid" edits (a same-shaped
// operand swapped in, an attribute moved to the edge of its range, a
// constant made huge) are there so that a good share of mutants pass the
// verifier and run.
//
//===----------------------------------------------------------------------===//

#include "PlanMutator.h"

#include "kiln/Runtime/Plan/Format.h"

#include <algorithm>
#include <limits>

namespace kiln::fuzz {

namespace {

using nlohmann::json;

/// SplitMix64: a small generator whose sequence is the same everywhere.
class Rng {
public:
  explicit Rng(uint64_t seed) : state(seed) {}
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t pick(size_t n) { return n ? static_cast<size_t>(next() % n) : 0; }
  bool percent(unsigned p) { return pick(100) < p; }
  template <typename T, size_t N> const T &of(const T (&items)[N]) {
    return items[pick(N)];
  }
  template <typename T> T &of(std::vector<T> &items) {
    return items[pick(items.size())];
  }

private:
  uint64_t state;
};

/// Text that replaces a placeholder string after the plan is written out:
/// numbers JSON can spell but a double cannot hold (2^64, 1e999), and
/// spellings of integers the loader must refuse (1.0, 1e3, -0).
const char kRawMark[] = "\x01raw:";
json raw(const char *token) { return std::string(kRawMark) + token; }

const char *const kRawTokens[] = {
    "18446744073709551616", "18446744073709551615", "9223372036854775808",
    "-9223372036854775809", "1e999", "-1e999", "1.0", "3.0", "1e3", "-0",
    "-0.0", "0.0", "1E2", "4.9e-324", "2.2250738585072014e-308"};

const char *const kDTypes[] = {"f32",  "bf16", "f16",    "f64",    "i32",
                               "i64",  "f8e4m3", "f8e5m2", "f4",   "F32"};
const char *const kGroupOps[] = {
    "load", "const", "neg",  "exp",     "log",     "sqrt",    "rsqrt",
    "sigmoid", "convert", "add", "sub", "mul",     "div",     "max",
    "min",  "row_sum", "row_max", "abs", "pow2_floor", "fma"};
const char *const kStores[] = {"elem",    "transpose", "row",  "col_sum",
                               "amax",    "scalar",    "rows", ""};
const char *const kLoadKinds[] = {"scalar", "row", "col", "elem", "diag"};
const char *const kValueKinds[] = {"state", "input", "const", "arena", "temp"};
const char *const kInits[] = {"zeros", "ones", "normal", "trunc_normal",
                              "uniform"};
const char *const kNames[] = {
    "tokens", "targets", "step", "seed", "model.norm.weight",
    "exp_avg.model.norm.weight", "fp8_amax_history.x.y", "", "a\nb",
    "model.layers.0.attention.wq.weight"};
const char *const kStrings[] = {"wq",     "w2",      "output", "sum",
                                "mean",   "max",     "cosine", "constant",
                                "most_recent", "grad_weight", "",
                                "x",      "line\nbreak", "\t", "\xc3\xa9"};
const char *const kEntryNames[] = {"init", "train_step", "eval_loss",
                                   "loss_and_grads", "logits",
                                   "fp8_calibration", "sample", ""};
const char *const kOutputNames[] = {"loss", "grad_norm", "lr", "logits",
                                    "extra"};

/// Values of every other JSON type than `old`'s.
json otherType(Rng &rng, const json &old) {
  for (;;) {
    json v;
    switch (rng.pick(9)) {
    case 0: v = nullptr; break;
    case 1: v = rng.percent(50); break;
    case 2: v = 0; break;
    case 3: v = -1; break;
    case 4: v = 1.5; break;
    case 5: v = "7"; break;
    case 6: v = json::array(); break;
    case 7: v = json::array({0, 1}); break;
    default: v = json::object({{"a", 1}}); break;
    }
    if (v.type() != old.type() ||
        (v.is_number() && !old.is_number()))
      return v;
  }
}

/// A boundary value for an integer (or number) field.
json boundary(Rng &rng, const json &old) {
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  const int64_t kMin = std::numeric_limits<int64_t>::min();
  if (old.is_number_integer() && rng.percent(30)) {
    // Near the old value: off by one, doubled, moved by an alignment.
    __int128 x = old.is_number_unsigned()
                     ? static_cast<__int128>(old.get<uint64_t>())
                     : static_cast<__int128>(old.get<int64_t>());
    const __int128 deltas[] = {1, -1, 4, 64, -64, 2, x, -x - 1};
    __int128 y = x + deltas[rng.pick(std::size(deltas))];
    if (y >= kMin && y <= kMax)
      return static_cast<int64_t>(y);
  }
  switch (rng.pick(24)) {
  case 0: return 0;
  case 1: return -1;
  case 2: return 1;
  case 3: return int64_t(1) << 31;
  case 4: return (int64_t(1) << 31) - 1;
  case 5: return int64_t(1) << 32;
  case 6: return int64_t(1) << 53;
  case 7: return (int64_t(1) << 53) + 1;
  case 8: return kMax;
  case 9: return kMin;
  case 10: return std::numeric_limits<uint64_t>::max();
  case 11: return 18446744073709551616.0; // 2^64, as a number
  case 12: return -0.5;
  case 13: return 0.5;
  case 14: return 1e308;
  case 15: return -1e308;
  case 16: return "1";
  case 17: return nullptr;
  case 18: return int64_t(1) << 48;
  case 19: return (int64_t(1) << 48) + 1;
  case 20: return int64_t(1) << 62;
  case 21: return int64_t(1) << 20;
  case 22: return 4.9e-324;
  default: return raw(rng.of(kRawTokens));
  }
}

/// `old` x num / den + delta when `old` is an integer and the result an
/// int64; otherwise a boundary value.
json arith(Rng &rng, const json &old, int64_t delta, int num = 1,
           int den = 1) {
  if (!old.is_number_integer())
    return boundary(rng, old);
  __int128 x = old.is_number_unsigned()
                   ? static_cast<__int128>(old.get<uint64_t>())
                   : static_cast<__int128>(old.get<int64_t>());
  __int128 y = x * num / den + delta;
  if (y < std::numeric_limits<int64_t>::min() ||
      y > std::numeric_limits<int64_t>::max())
    return boundary(rng, old);
  return static_cast<int64_t>(y);
}

/// One node of the tree, with how to reach it (for reports).
struct Slot {
  json *node;
  int parent; // index into the slot list; -1 for the root
  const std::string *key; // member name in an object parent, else null
  size_t index;           // element index in an array parent
};

void collect(json &j, int parent, const std::string *key, size_t index,
             std::vector<Slot> &out) {
  int self = static_cast<int>(out.size());
  out.push_back({&j, parent, key, index});
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it)
      collect(it.value(), self, &it.key(), 0, out);
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i)
      collect(j[i], self, nullptr, i, out);
  }
}

std::string pathOf(const std::vector<Slot> &slots, int at) {
  std::string path;
  for (; at > 0; at = slots[at].parent)
    path = "/" + (slots[at].key ? *slots[at].key
                                : std::to_string(slots[at].index)) +
           path;
  return path.empty() ? "/" : path;
}

std::string shown(const json &j) {
  std::string text = j.dump(-1, ' ', true, json::error_handler_t::replace);
  if (text.rfind(std::string("\"") + "\\u0001raw:", 0) == 0)
    text = text.substr(11, text.size() - 12);
  return text.size() > 40 ? text.substr(0, 37) + "..." : text;
}

struct StepRef {
  json *step;
  std::string entry;
  size_t index;
  std::string path() const {
    return "/entries/" + entry + "/steps/" + std::to_string(index);
  }
};

class Mutator {
public:
  Mutator(json &plan, Rng &rng) : plan(plan), rng(rng) {}

  /// One mutation; its description, or "" when the plan had nothing it
  /// applies to (the caller tries another).
  std::string mutateOnce(bool gentle) {
    if (gentle)
      return nearValid();
    // Weights per family; the ones most likely to reach deep code weigh more.
    static const unsigned kWeights[] = {12, 7, 7, 8, 12, 9, 9, 7,
                                        12, 10, 8, 4, 3, 12};
    unsigned total = 0;
    for (unsigned w : kWeights)
      total += w;
    unsigned r = static_cast<unsigned>(rng.pick(total));
    size_t family = 0;
    while (r >= kWeights[family])
      r -= kWeights[family++];
    switch (family) {
    case 0: return anyNumber();
    case 1: return deleteKey();
    case 2: return retype();
    case 3: return swapOp();
    case 4: return editIdList();
    case 5: return editSteps();
    case 6: return editShape();
    case 7: return editOffset();
    case 8: return editGroup();
    case 9: return editAttrs();
    case 10: return editValue();
    case 11: return editEntry();
    case 12: return editTop();
    default: return nearValid();
    }
  }

private:
  json &plan;
  Rng &rng;

  std::vector<Slot> slots() {
    std::vector<Slot> out;
    out.reserve(4096);
    collect(plan, -1, nullptr, 0, out);
    return out;
  }

  std::vector<StepRef> steps(bool fusedOnly = false) {
    std::vector<StepRef> out;
    json *entries = member(plan, "entries");
    if (!entries || !entries->is_object())
      return out;
    for (auto it = entries->begin(); it != entries->end(); ++it) {
      json *list = member(it.value(), "steps");
      if (!list || !list->is_array())
        continue;
      for (size_t i = 0; i < list->size(); ++i) {
        json &s = (*list)[i];
        if (fusedOnly && !(s.is_object() && s.contains("group") &&
                           s["group"].is_object()))
          continue;
        out.push_back({&s, it.key(), i});
      }
    }
    return out;
  }

  json *values() {
    json *v = member(plan, "values");
    return v && v->is_array() && !v->empty() ? v : nullptr;
  }

  static json *member(json &j, const char *key) {
    if (!j.is_object())
      return nullptr;
    auto it = j.find(key);
    return it == j.end() ? nullptr : &*it;
  }

  int64_t valueCount() {
    json *v = values();
    return v ? static_cast<int64_t>(v->size()) : 0;
  }

  /// An id to write into an operand or result list.
  json someId(const json &old) {
    int64_t n = valueCount();
    switch (rng.pick(8)) {
    case 0:
      return n;
    case 1:
      return -1;
    case 2:
      return arith(rng, old, rng.percent(50) ? 1 : -1);
    case 3: { // a named input
      json *v = values();
      if (v)
        for (size_t i = 0; i < v->size(); ++i)
          if ((*v)[i].is_object() && (*v)[i].value("kind", "") == "input" &&
              rng.percent(40))
            return static_cast<int64_t>(i);
      return 0;
    }
    case 4:
      return boundary(rng, old);
    default:
      return n > 0 ? static_cast<int64_t>(rng.pick(n)) : 0;
    }
  }

  std::string anyNumber() {
    std::vector<Slot> all = slots();
    std::vector<int> numbers;
    for (size_t i = 0; i < all.size(); ++i)
      if (all[i].node->is_number())
        numbers.push_back(static_cast<int>(i));
    if (numbers.empty())
      return "";
    int at = rng.of(numbers);
    json &node = *all[at].node;
    json old = node;
    node = boundary(rng, node);
    return "set " + pathOf(all, at) + " from " + shown(old) + " to " +
           shown(node);
  }

  std::string deleteKey() {
    std::vector<Slot> all = slots();
    std::vector<int> objects;
    for (size_t i = 0; i < all.size(); ++i)
      if (all[i].node->is_object() && !all[i].node->empty())
        objects.push_back(static_cast<int>(i));
    if (objects.empty())
      return "";
    int at = rng.of(objects);
    json &obj = *all[at].node;
    auto it = obj.begin();
    std::advance(it, rng.pick(obj.size()));
    std::string key = it.key();
    obj.erase(it);
    return "deleted " + pathOf(all, at) + "/" + key;
  }

  std::string retype() {
    std::vector<Slot> all = slots();
    if (all.size() < 2)
      return "";
    int at = 1 + static_cast<int>(rng.pick(all.size() - 1));
    json &node = *all[at].node;
    std::string old = shown(node);
    node = otherType(rng, node);
    return "retyped " + pathOf(all, at) + " from " + old + " to " +
           shown(node);
  }

  /// An op name for a step: a library op, an op only groups hold, or none.
  std::string opName() {
    if (rng.percent(8))
      return rng.percent(50) ? "matmul" : "";
    return plan::kOps[rng.pick(std::size(plan::kOps))].name;
  }

  std::string swapOp() {
    std::vector<StepRef> all = steps();
    if (all.empty())
      return "";
    StepRef s = rng.of(all);
    json &step = *s.step;
    if (!step.is_object())
      return "";
    std::string old = step.contains("op") ? shown(step["op"]) : "(none)";
    bool fused = step.value("op", json()) == "fused";
    if (fused && rng.percent(60)) {
      // A fused step relabelled as a library op, its group kept or not.
      std::string op;
      do
        op = opName();
      while (op == "fused");
      step["op"] = op;
      if (rng.percent(30))
        step.erase("group");
    } else if (!fused && rng.percent(50)) {
      // A library op relabelled as a fused step, with a group taken from
      // another step or none.
      step["op"] = "fused";
      std::vector<StepRef> groups = steps(true);
      if (!groups.empty() && rng.percent(70))
        step["group"] = (*rng.of(groups).step)["group"];
    } else {
      step["op"] = opName();
    }
    return "op of " + s.path() + " from " + old + " to " + shown(step["op"]) +
           (step.contains("group") ? " (with a group)" : "");
  }

  std::string editIdList() {
    std::vector<StepRef> all = steps();
    if (all.empty())
      return "";
    StepRef s = rng.of(all);
    json &step = *s.step;
    if (!step.is_object())
      return "";
    const char *key = rng.percent(60) ? "operands" : "results";
    json *list = member(step, key);
    if (!list || !list->is_array())
      return "";
    std::string where = s.path() + "/" + key;
    size_t n = list->size();
    switch (rng.pick(7)) {
    case 0:
    case 1: {
      if (n == 0)
        return "";
      size_t i = rng.pick(n);
      json old = (*list)[i];
      (*list)[i] = someId(old);
      return "replaced " + where + "/" + std::to_string(i) + " " +
             shown(old) + " by " + shown((*list)[i]);
    }
    case 2:
      if (n == 0)
        return "";
      list->erase(rng.pick(n));
      return "removed an element of " + where;
    case 3: {
      if (n == 0)
        return "";
      json e = (*list)[rng.pick(n)];
      list->insert(list->begin() + rng.pick(n + 1), e);
      return "duplicated " + shown(e) + " in " + where;
    }
    case 4:
      list->push_back(someId(json()));
      return "appended " + shown(list->back()) + " to " + where;
    case 5: {
      if (n < 2)
        return "";
      size_t a = rng.pick(n), b = rng.pick(n);
      std::swap((*list)[a], (*list)[b]);
      return "swapped two elements of " + where;
    }
    default:
      if (!step.contains("operands") || !step.contains("results"))
        return "";
      std::swap(step["operands"], step["results"]);
      return "swapped the operands and results of " + s.path();
    }
  }

  std::string editSteps() {
    std::vector<StepRef> all = steps();
    if (all.empty())
      return "";
    StepRef s = rng.of(all);
    json &list = plan["entries"][s.entry]["steps"];
    size_t n = list.size();
    switch (rng.pick(5)) {
    case 0:
      list.erase(s.index);
      return "deleted step " + s.path();
    case 1: {
      json copy = list[s.index];
      size_t to = rng.pick(n + 1);
      list.insert(list.begin() + to, copy);
      return "duplicated " + s.path() + " at " + std::to_string(to);
    }
    case 2: {
      size_t other = rng.pick(n);
      std::swap(list[s.index], list[other]);
      return "swapped " + s.path() + " with step " + std::to_string(other);
    }
    case 3: {
      // Next to its neighbour: a read moved before its write, or after.
      size_t other = s.index + 1 < n ? s.index + 1 : s.index;
      std::swap(list[s.index], list[other]);
      return "swapped " + s.path() + " with the next step";
    }
    default: {
      StepRef to = rng.of(all);
      json copy = list[s.index];
      json &dest = plan["entries"][to.entry]["steps"];
      dest.insert(dest.begin() + rng.pick(dest.size() + 1), copy);
      return "copied " + s.path() + " into entry " + to.entry;
    }
    }
  }

  /// A shape list: of a value, of a shard part, or of nothing at all.
  std::string editShape() {
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
      case 0: shape[d] = arith(rng, shape[d], 1); break;
      case 1: shape[d] = arith(rng, shape[d], -1); break;
      case 2: shape[d] = arith(rng, shape[d], 0, 2); break;
      case 3: shape[d] = arith(rng, shape[d], 0, 1, 2); break;
      case 4: shape[d] = 0; break;
      default: shape[d] = 1; break;
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
      shape = rng.percent(50)
                  ? json::array({1, 1, 1, 1, 1, 1, 1, 1, 1})
                  : json::array({int64_t(1) << 24, int64_t(1) << 25});
      break;
    }
    }
    return "shape " + pathOf(all, at) + " from " + old + " to " + shown(shape);
  }

  std::string editOffset() {
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
      case 0: bytes = arith(rng, bytes, -1); break;
      case 1: bytes = arith(rng, bytes, -64); break;
      case 2: bytes = arith(rng, bytes, 0, 1, 2); break;
      case 3: bytes = arith(rng, bytes, 0, 2); break;
      default: bytes = 0; break;
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

  std::string editGroup() {
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
        const double values[] = {1e308, -1e308, 0.0, -0.0, 4.9e-324, 3.5e38,
                                 1e-45, 448.0, 57344.0, 65504.0};
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

  std::string editAttrs() {
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

  std::string editValue() {
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
        v["name"] = other.is_object() ? other.value("name", json("x"))
                                      : json("x");
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

  std::string editEntry() {
    json *entries = member(plan, "entries");
    if (!entries || !entries->is_object() || entries->empty())
      return "";
    auto it = entries->begin();
    std::advance(it, rng.pick(entries->size()));
    std::string name = it.key();
    json &entry = it.value();
    switch (rng.pick(4)) {
    case 0:
      entries->erase(name);
      return "deleted entry " + name;
    case 1: {
      std::string to = rng.of(kEntryNames);
      json copy = entry;
      entries->erase(name);
      (*entries)[to] = copy;
      return "renamed entry " + name + " to '" + to + "'";
    }
    default: {
      json *outs = member(entry, "outputs");
      if (!outs || !outs->is_object())
        return "";
      std::string out = rng.of(kOutputNames);
      if (rng.percent(30)) {
        outs->erase(out);
        return "deleted output " + out + " of entry " + name;
      }
      int64_t n = valueCount();
      (*outs)[out] = rng.percent(70) && n > 0
                         ? json(static_cast<int64_t>(rng.pick(n)))
                         : boundary(rng, json(0));
      return "output " + out + " of entry " + name + " to " +
             shown((*outs)[out]);
    }
    }
  }

  std::string editTop() {
    const char *keys[] = {"vocab_size", "ranks", "version", "format",
                          "state_bytes", "training"};
    const char *key = rng.of(keys);
    json &v = plan[key];
    std::string old = shown(v);
    if (v.is_object() && !v.empty()) {
      auto it = v.begin();
      std::advance(it, rng.pick(v.size()));
      std::string field = it.key();
      it.value() = boundary(rng, it.value());
      return "/" + std::string(key) + "/" + field + " to " + shown(it.value());
    }
    v = rng.percent(20) ? otherType(rng, v) : boundary(rng, v);
    return "/" + std::string(key) + " from " + old + " to " + shown(v);
  }

  /// Edits that keep the plan well-formed often enough to pass the verifier
  /// and run: an operand replaced by another value of its shape and dtype,
  /// an attribute at the edge of its range, a huge constant or initial
  /// value, a long or odd location.
  std::string nearValid() {
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
        if (static_cast<int64_t>(i) != id && w.value("shape", json()) ==
                                                 v.value("shape", json()) &&
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
      const double edges[] = {0.0, 1.0, 2.2250738585072014e-308, 1e308,
                              1e-30, 1e30, 0.999999};
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
      step["loc"] = rng.percent(20) ? json(std::string(100000, 'L'))
                                    : json(rng.of(locs));
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
      const char *unary[] = {"neg", "exp", "log", "sqrt", "rsqrt", "sigmoid",
                             "convert", "abs", "pow2_floor"};
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
      size_t args = in.contains("args") && in["args"].is_array()
                        ? in["args"].size()
                        : 0;
      in["op"] = isRow       ? rng.of(rows)
                 : args == 2 ? rng.of(binary)
                             : rng.of(unary);
      return at + " op from " + op + " to " + shown(in["op"]);
    }
    }
  }
};

/// Writes the plan, then puts the raw tokens in place of their markers.
std::string render(const json &plan) {
  std::string text = plan.dump(-1, ' ', false, json::error_handler_t::replace);
  const std::string mark = "\"\\u0001raw:";
  for (size_t at = text.find(mark); at != std::string::npos;
       at = text.find(mark, at)) {
    size_t end = text.find('"', at + mark.size());
    std::string token = text.substr(at + mark.size(), end - at - mark.size());
    text.replace(at, end + 1 - at, token);
    at += token.size();
  }
  return text;
}

/// Byte-level edits: what a truncated or corrupted file looks like.
std::string editText(Rng &rng, std::string &text) {
  if (text.empty())
    return "";
  size_t at = rng.pick(text.size());
  switch (rng.pick(4)) {
  case 0:
    text.resize(at);
    return "truncated the text at byte " + std::to_string(at);
  case 1: {
    char old = text[at];
    text[at] = static_cast<char>(rng.pick(256));
    return "byte " + std::to_string(at) + " from " +
           std::to_string(static_cast<unsigned char>(old)) + " to " +
           std::to_string(static_cast<unsigned char>(text[at]));
  }
  case 2: {
    size_t n = std::min<size_t>(1 + rng.pick(64), text.size() - at);
    text.erase(at, n);
    return "deleted bytes " + std::to_string(at) + " to " +
           std::to_string(at + n);
  }
  default: {
    const char *tokens[] = {"{", "}", "[", "]", ",", ":", "\"", "\\",
                            "null", "1e999", "\xff", "\x00"};
    std::string token = rng.of(tokens);
    if (token.empty())
      token = std::string(1, '\0');
    text.insert(at, token);
    return "inserted a token at byte " + std::to_string(at);
  }
  }
}

/// Makes `work` equal to `orig` again, copying only the subtrees that
/// differ in shape or value.
void restore(json &work, const json &orig) {
  if (work.type() != orig.type() || work.size() != orig.size()) {
    work = orig;
    return;
  }
  if (work.is_object()) {
    auto w = work.begin();
    for (auto o = orig.begin(); o != orig.end(); ++o, ++w)
      if (w.key() != o.key()) {
        work = orig;
        return;
      }
    w = work.begin();
    for (auto o = orig.begin(); o != orig.end(); ++o, ++w)
      restore(w.value(), o.value());
  } else if (work.is_array()) {
    for (size_t i = 0; i < orig.size(); ++i)
      restore(work[i], orig[i]);
  } else if (work != orig) {
    work = orig;
  }
}

} // namespace

PlanMutator::PlanMutator(std::vector<nlohmann::json> seeds)
    : pristine(seeds), work(std::move(seeds)) {}

Mutant PlanMutator::make(uint64_t seed, uint64_t index) {
  // One generator per mutant, from (seed, index) alone.
  Rng rng(Rng(seed).next() ^ Rng(~index).next());
  Mutant m;
  m.seedPlan = rng.pick(work.size());
  json &plan = work[m.seedPlan];
  Mutator mutator(plan, rng);
  const unsigned stack[] = {1, 1, 1, 1, 2, 2, 2, 3, 3, 4};
  unsigned count = rng.of(stack);
  // A third of the mutants get only edits that keep a plan well-formed
  // often enough for it to be accepted and run.
  bool gentle = rng.percent(33);
  for (unsigned i = 0; i < count; ++i) {
    std::string applied;
    for (int tries = 0; applied.empty() && tries < 8; ++tries) {
      try {
        applied = mutator.mutateOnce(gentle);
      } catch (const json::exception &e) {
        // A node an earlier mutation retyped: what was edited stays.
        applied = std::string("(an edit stopped: ") + e.what() + ")";
      }
    }
    if (!applied.empty())
      m.applied.push_back(applied);
  }
  m.text = render(plan);
  restore(plan, pristine[m.seedPlan]);
  if (rng.percent(4)) {
    std::string applied = editText(rng, m.text);
    if (!applied.empty())
      m.applied.push_back(applied);
  }
  return m;
}

} // namespace kiln::fuzz
