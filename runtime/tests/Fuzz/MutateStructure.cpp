//===- MutateStructure.cpp - Mutations of a plan's structure -------------===//
//
// Numbers anywhere in the tree, deleted keys, changed types, swapped ops,
// edited operand and result lists, deleted, duplicated or moved steps,
// entries and the top level.
//
//===----------------------------------------------------------------------===//

#include "Mutation.h"

#include "kiln/Runtime/Plan/Format.h"

#include <algorithm>
#include <limits>

namespace kiln::fuzz::detail {

std::string Mutator::anyNumber() {
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

std::string Mutator::deleteKey() {
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

std::string Mutator::retype() {
  std::vector<Slot> all = slots();
  if (all.size() < 2)
    return "";
  int at = 1 + static_cast<int>(rng.pick(all.size() - 1));
  json &node = *all[at].node;
  std::string old = shown(node);
  node = otherType(rng, node);
  return "retyped " + pathOf(all, at) + " from " + old + " to " + shown(node);
}

/// An op name for a step: a library op, an op only groups hold, or none.
std::string Mutator::opName() {
  if (rng.percent(8))
    return rng.percent(50) ? "matmul" : "";
  return plan::kOps[rng.pick(std::size(plan::kOps))].name;
}

std::string Mutator::swapOp() {
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

std::string Mutator::editIdList() {
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
    return "replaced " + where + "/" + std::to_string(i) + " " + shown(old) +
           " by " + shown((*list)[i]);
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

std::string Mutator::editSteps() {
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

std::string Mutator::editEntry() {
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
    return "output " + out + " of entry " + name + " to " + shown((*outs)[out]);
  }
  }
}

std::string Mutator::editTop() {
  const char *keys[] = {"vocab_size", "ranks",       "version",
                        "format",     "state_bytes", "training"};
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

} // namespace kiln::fuzz::detail
