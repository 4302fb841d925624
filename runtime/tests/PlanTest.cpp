// Reading plans: a valid one, and each way a plan file can be wrong gives an
// error line instead of a crash.
#include "kiln/Runtime/Plan.h"

#include <gtest/gtest.h>

using namespace kiln::runtime;

namespace {
const char *kValid = R"({
  "format": "kiln-plan", "version": 1, "vocab_size": 16,
  "training": {"steps": 2, "seed": 0, "eval_interval": 0, "eval_steps": 1,
               "checkpoint_interval": 0, "data": "fortunes",
               "checkpoint_folder": "checkpoints"},
  "arena_bytes": 128, "state_bytes": 64,
  "values": [
    {"id": 0, "kind": "input", "name": "tokens", "shape": [2, 4], "dtype": "i32"},
    {"id": 1, "kind": "state", "name": "w", "shape": [4, 4], "dtype": "f32",
     "init": {"kind": "trunc_normal", "std": 0.02, "a": -2, "b": 2}},
    {"id": 2, "kind": "const", "shape": [], "dtype": "f32", "value": 1.0},
    {"id": 3, "kind": "arena", "shape": [2, 4], "dtype": "bf16", "offset": 64}
  ],
  "entries": {"eval_loss": {"arena_bytes": 128, "outputs": {"loss": 3},
    "steps": [{"op": "cast", "operands": [1], "results": [3], "loc": "x",
               "attrs": {"eps": 1e-5, "role": "wq", "causal": true,
                         "permutation": [1, 0], "warmup_steps": 10}}]}}
})";

std::string errorOf(const std::string &text) {
  std::string error;
  EXPECT_FALSE(parsePlan(text, error).has_value());
  return error;
}

std::string replace(std::string s, const std::string &from,
                    const std::string &to) {
  size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return s.replace(at, from.size(), to);
}
} // namespace

TEST(Plan, ReadsAValidPlan) {
  std::string error;
  std::optional<Plan> plan = parsePlan(kValid, error);
  ASSERT_TRUE(plan) << error;
  EXPECT_EQ(plan->values.size(), 4u);
  EXPECT_EQ(plan->values[1].init.kind, InitSpec::TruncNormal);
  EXPECT_EQ(plan->values[3].bytes(), 16);
  const PlanStep &step = plan->entry("eval_loss")->steps[0];
  EXPECT_EQ(step.op, "cast");
  EXPECT_DOUBLE_EQ(step.f64("eps"), 1e-5);
  EXPECT_EQ(step.str("role"), "wq");
  EXPECT_TRUE(step.flag("causal"));
  EXPECT_FALSE(step.flag("absent"));
  EXPECT_EQ(step.i64("warmup_steps"), 10);
  EXPECT_DOUBLE_EQ(step.f64("warmup_steps"), 10.0);
  EXPECT_EQ(plan->named(PlanValue::Input, "tokens")->id, 0);
}

TEST(Plan, RejectsWhatIsNotAPlan) {
  EXPECT_EQ(errorOf("{\"format\": \"other\"}"),
            "not a Kiln plan (no \"format\": \"kiln-plan\")");
  EXPECT_NE(errorOf("{ truncated").find("malformed plan"), std::string::npos);
  EXPECT_NE(errorOf("").find("malformed plan"), std::string::npos);
}

TEST(Plan, RejectsAnotherVersion) {
  EXPECT_EQ(errorOf(replace(kValid, "\"version\": 1", "\"version\": 2")),
            "plan version 2 is not supported by this runtime (it reads "
            "version 1)");
}

TEST(Plan, RejectsDanglingIds) {
  EXPECT_EQ(errorOf(replace(kValid, "\"operands\": [1]", "\"operands\": [9]")),
            "eval_loss step 0 refers to value 9, which does not exist");
}

TEST(Plan, RejectsBuffersOutsideTheArena) {
  EXPECT_EQ(errorOf(replace(kValid, "\"offset\": 64", "\"offset\": 120")),
            "value 3 lies outside the arena");
}

TEST(Plan, RejectsUnknownDtypesAndInitialisers) {
  EXPECT_EQ(errorOf(replace(kValid, "\"dtype\": \"bf16\"", "\"dtype\": \"q7\"")),
            "unknown dtype 'q7'");
  EXPECT_EQ(errorOf(replace(kValid, "\"trunc_normal\"", "\"uniform\"")),
            "unknown initialiser 'uniform'");
}

TEST(Plan, RejectsMissingAndMistypedFields) {
  EXPECT_NE(errorOf(replace(kValid, "\"vocab_size\": 16,", "")).find("vocab_size"),
            std::string::npos);
  EXPECT_NE(errorOf(replace(kValid, "\"arena_bytes\": 128, \"state",
                            "\"arena_bytes\": \"x\", \"state"))
                .find("malformed plan"),
            std::string::npos);
}

TEST(Plan, MissingFileIsAnError) {
  std::string error;
  EXPECT_FALSE(loadPlan("/nonexistent/step.kplan", error));
  EXPECT_EQ(error, "cannot open plan '/nonexistent/step.kplan'");
}
