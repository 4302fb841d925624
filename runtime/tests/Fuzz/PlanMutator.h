//===- PlanMutator.h - Structured mutations of a plan's JSON ----*- C++ -*-===//
//
// The plan fuzzer's mutations (kiln-plan-fuzz, PlanFuzz.cpp). Each edits the
// parsed JSON of a compiled plan the way a corrupted, truncated or
// hand-edited file would differ from a good one: numbers set to boundary
// values, keys deleted, types changed, ops swapped (a fused step relabelled
// as a library op and back), operand and result lists edited, steps
// deleted, duplicated, swapped or moved, shapes and arena offsets changed,
// fused-group instructions and outputs edited, attributes removed, retyped
// or set out of range; a few mutants are byte-level edits of the text.
// Everything is a function of (seed, mutant index), so one mutant is
// reproduced alone.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_TESTS_FUZZ_PLANMUTATOR_H
#define KILN_RUNTIME_TESTS_FUZZ_PLANMUTATOR_H

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::fuzz {

struct Mutant {
  size_t seedPlan = 0;               // index into the seed plans
  std::vector<std::string> applied;  // one line per mutation, for reports
  std::string text;                  // the plan as the runtime reads it
};

/// Makes mutants of seed plans. The mutations are made on a working copy
/// of the seed, which is then put back as it was (only the parts that
/// differ are copied back): a whole copy per mutant would cost as much as
/// the loader does.
class PlanMutator {
public:
  explicit PlanMutator(std::vector<nlohmann::json> seeds);

  /// Mutant `index` of the run with `seed`: one to four stacked mutations
  /// of one of the seeds.
  Mutant make(uint64_t seed, uint64_t index);

private:
  std::vector<nlohmann::json> pristine, work;
};

} // namespace kiln::fuzz

#endif // KILN_RUNTIME_TESTS_FUZZ_PLANMUTATOR_H
