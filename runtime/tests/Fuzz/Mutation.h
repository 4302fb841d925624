//===- Mutation.h - The plan mutator's vocabulary and families -*- C++ -*-===//
//
// Shared by the mutator's parts (not installed; PlanMutator.h is the
// fuzzer's interface): the generator, the hostile values the mutations
// write, the walk over the JSON tree, and the Mutator, whose families are
// defined by concern: Mutation.cpp picks a family and finds targets,
// MutateStructure.cpp edits the plan's structure (numbers anywhere, keys,
// types, ops, id lists, steps, entries, the top level), MutateValues.cpp
// edits what the structure holds (shapes, arena offsets, fused groups,
// attributes, value rows) and makes the near-valid edits.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_TESTS_FUZZ_MUTATION_H
#define KILN_RUNTIME_TESTS_FUZZ_MUTATION_H

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::fuzz::detail {

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
inline constexpr char kRawMark[] = "\x01raw:";
inline json raw(const char *token) { return std::string(kRawMark) + token; }

inline constexpr const char *kRawTokens[] = {"18446744073709551616",
                                             "18446744073709551615",
                                             "9223372036854775808",
                                             "-9223372036854775809",
                                             "1e999",
                                             "-1e999",
                                             "1.0",
                                             "3.0",
                                             "1e3",
                                             "-0",
                                             "-0.0",
                                             "0.0",
                                             "1E2",
                                             "4.9e-324",
                                             "2.2250738585072014e-308"};

inline constexpr const char *kDTypes[] = {
    "f32", "bf16", "f16", "f64", "i32", "i64", "f8e4m3", "f8e5m2", "f4", "F32"};
inline constexpr const char *kGroupOps[] = {
    "load",    "const",   "neg",     "exp", "log",        "sqrt", "rsqrt",
    "sigmoid", "convert", "add",     "sub", "mul",        "div",  "max",
    "min",     "row_sum", "row_max", "abs", "pow2_floor", "fma"};
inline constexpr const char *kStores[] = {
    "elem", "transpose", "row", "col_sum", "amax", "scalar", "rows", ""};
inline constexpr const char *kLoadKinds[] = {"scalar", "row", "col", "elem",
                                             "diag"};
inline constexpr const char *kValueKinds[] = {"state", "input", "const",
                                              "arena", "temp"};
inline constexpr const char *kInits[] = {"zeros", "ones", "normal",
                                         "trunc_normal", "uniform"};
inline constexpr const char *kNames[] = {"tokens",
                                         "targets",
                                         "step",
                                         "seed",
                                         "model.norm.weight",
                                         "exp_avg.model.norm.weight",
                                         "fp8_amax_history.x.y",
                                         "",
                                         "a\nb",
                                         "model.layers.0.attention.wq.weight"};
inline constexpr const char *kStrings[] = {
    "wq",  "w2",     "output",      "sum",         "mean",
    "max", "cosine", "constant",    "most_recent", "grad_weight",
    "",    "x",      "line\nbreak", "\t",          "\xc3\xa9"};
inline constexpr const char *kEntryNames[] = {
    "init",   "train_step",      "eval_loss", "loss_and_grads",
    "logits", "fp8_calibration", "sample",    ""};
inline constexpr const char *kOutputNames[] = {"loss", "grad_norm", "lr",
                                               "logits", "extra"};

/// Values of every other JSON type than `old`'s.
json otherType(Rng &rng, const json &old);
/// A value at or past the edge of what the loader takes: int64 and uint64
/// limits, 2^53 and 2^64, fractions, huge and tiny doubles, raw tokens.
json boundary(Rng &rng, const json &old);
/// `old` x num / den + delta when `old` is an integer and the result an
/// int64; otherwise a boundary value.
json arith(Rng &rng, const json &old, int64_t delta, int num = 1, int den = 1);

/// One node of the tree, with how to reach it (for reports).
struct Slot {
  json *node;
  int parent;             // index into the slot list; -1 for the root
  const std::string *key; // member name in an object parent, else null
  size_t index;           // element index in an array parent
};

/// Every node of `j`'s tree into `out`, parents before children.
void collect(json &j, int parent, const std::string *key, size_t index,
             std::vector<Slot> &out);
/// The JSON pointer of slot `at`, for reports.
std::string pathOf(const std::vector<Slot> &slots, int at);
/// A node as a short text, for reports.
std::string shown(const json &j);

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
  std::string mutateOnce(bool gentle);

private:
  json &plan;
  Rng &rng;
  std::vector<Slot> slots();
  std::vector<StepRef> steps(bool fusedOnly = false);
  json *values();
  static json *member(json &j, const char *key);
  int64_t valueCount();

  /// An id to write into an operand or result list.
  json someId(const json &old);
  std::string anyNumber();
  std::string deleteKey();
  std::string retype();

  /// An op name for a step: a library op, an op only groups hold, or none.
  std::string opName();
  std::string swapOp();
  std::string editIdList();
  std::string editSteps();

  /// A shape list: of a value, of a shard part, or of nothing at all.
  std::string editShape();
  std::string editOffset();
  std::string editGroup();
  std::string editAttrs();
  std::string editValue();
  std::string editEntry();
  std::string editTop();

  /// Edits that keep the plan well-formed often enough to pass the verifier
  /// and run: an operand replaced by another value of its shape and dtype,
  /// an attribute at the edge of its range, a huge constant or initial
  /// value, a long or odd location.
  std::string nearValid();
};

} // namespace kiln::fuzz::detail

#endif // KILN_RUNTIME_TESTS_FUZZ_MUTATION_H
