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
#include "Mutation.h"

#include <algorithm>

namespace kiln::fuzz {

namespace {

using namespace detail;

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
    const char *tokens[] = {"{",  "}",  "[",    "]",     ",",    ":",
                            "\"", "\\", "null", "1e999", "\xff", "\x00"};
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
