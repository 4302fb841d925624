//===- Mutation.cpp - The mutator: families, targets, hostile values -----===//
//
// Which family a mutation comes from, how it finds its targets (nodes,
// steps, values, ids), and the values written where the loader is most
// likely to get them wrong.
//
//===----------------------------------------------------------------------===//

#include "Mutation.h"

#include "kiln/Runtime/Plan/Format.h"

#include <algorithm>
#include <limits>

namespace kiln::fuzz::detail {

/// Values of every other JSON type than `old`'s.
json otherType(Rng &rng, const json &old) {
  for (;;) {
    json v;
    switch (rng.pick(9)) {
    case 0:
      v = nullptr;
      break;
    case 1:
      v = rng.percent(50);
      break;
    case 2:
      v = 0;
      break;
    case 3:
      v = -1;
      break;
    case 4:
      v = 1.5;
      break;
    case 5:
      v = "7";
      break;
    case 6:
      v = json::array();
      break;
    case 7:
      v = json::array({0, 1});
      break;
    default:
      v = json::object({{"a", 1}});
      break;
    }
    if (v.type() != old.type() || (v.is_number() && !old.is_number()))
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
  case 0:
    return 0;
  case 1:
    return -1;
  case 2:
    return 1;
  case 3:
    return int64_t(1) << 31;
  case 4:
    return (int64_t(1) << 31) - 1;
  case 5:
    return int64_t(1) << 32;
  case 6:
    return int64_t(1) << 53;
  case 7:
    return (int64_t(1) << 53) + 1;
  case 8:
    return kMax;
  case 9:
    return kMin;
  case 10:
    return std::numeric_limits<uint64_t>::max();
  case 11:
    return 18446744073709551616.0; // 2^64, as a number
  case 12:
    return -0.5;
  case 13:
    return 0.5;
  case 14:
    return 1e308;
  case 15:
    return -1e308;
  case 16:
    return "1";
  case 17:
    return nullptr;
  case 18:
    return int64_t(1) << 48;
  case 19:
    return (int64_t(1) << 48) + 1;
  case 20:
    return int64_t(1) << 62;
  case 21:
    return int64_t(1) << 20;
  case 22:
    return 4.9e-324;
  default:
    return raw(rng.of(kRawTokens));
  }
}

/// `old` x num / den + delta when `old` is an integer and the result an
/// int64; otherwise a boundary value.
json arith(Rng &rng, const json &old, int64_t delta, int num, int den) {
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
    path = "/" +
           (slots[at].key ? *slots[at].key : std::to_string(slots[at].index)) +
           path;
  return path.empty() ? "/" : path;
}

std::string shown(const json &j) {
  std::string text = j.dump(-1, ' ', true, json::error_handler_t::replace);
  if (text.rfind(std::string("\"") + "\\u0001raw:", 0) == 0)
    text = text.substr(11, text.size() - 12);
  return text.size() > 40 ? text.substr(0, 37) + "..." : text;
}

/// One mutation; its description, or "" when the plan had nothing it
/// applies to (the caller tries another).
std::string Mutator::mutateOnce(bool gentle) {
  if (gentle)
    return nearValid();
  // Weights per family; the ones most likely to reach deep code weigh more.
  static const unsigned kWeights[] = {12, 7,  7,  8, 12, 9, 9,
                                      7,  12, 10, 8, 4,  3, 12};
  unsigned total = 0;
  for (unsigned w : kWeights)
    total += w;
  unsigned r = static_cast<unsigned>(rng.pick(total));
  size_t family = 0;
  while (r >= kWeights[family])
    r -= kWeights[family++];
  switch (family) {
  case 0:
    return anyNumber();
  case 1:
    return deleteKey();
  case 2:
    return retype();
  case 3:
    return swapOp();
  case 4:
    return editIdList();
  case 5:
    return editSteps();
  case 6:
    return editShape();
  case 7:
    return editOffset();
  case 8:
    return editGroup();
  case 9:
    return editAttrs();
  case 10:
    return editValue();
  case 11:
    return editEntry();
  case 12:
    return editTop();
  default:
    return nearValid();
  }
}

std::vector<Slot> Mutator::slots() {
  std::vector<Slot> out;
  out.reserve(4096);
  collect(plan, -1, nullptr, 0, out);
  return out;
}

std::vector<StepRef> Mutator::steps(bool fusedOnly) {
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
      if (fusedOnly &&
          !(s.is_object() && s.contains("group") && s["group"].is_object()))
        continue;
      out.push_back({&s, it.key(), i});
    }
  }
  return out;
}

json *Mutator::values() {
  json *v = member(plan, "values");
  return v && v->is_array() && !v->empty() ? v : nullptr;
}

json *Mutator::member(json &j, const char *key) {
  if (!j.is_object())
    return nullptr;
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

int64_t Mutator::valueCount() {
  json *v = values();
  return v ? static_cast<int64_t>(v->size()) : 0;
}

/// An id to write into an operand or result list.
json Mutator::someId(const json &old) {
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

} // namespace kiln::fuzz::detail
