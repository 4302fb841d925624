// Reading plans: a valid one, and each way a plan file can be wrong gives an
// error line instead of a crash.
#include "kiln/Runtime/Plan.h"

#include <gtest/gtest.h>

using namespace kiln::runtime;

namespace {
const char *kValid = R"({
  "format": "kiln-plan", "version": 2, "vocab_size": 16,
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
  EXPECT_EQ(errorOf(replace(kValid, "\"version\": 2", "\"version\": 1")),
            "plan version 1 is not supported by this runtime (it reads "
            "version 2)");
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

namespace {
// value 3 (bf16 [2, 4]) = convert(value 1 reshaped): a fused step.
std::string withGroup(const std::string &group) {
  return replace(kValid,
                 "\"steps\": [{\"op\": \"cast\", \"operands\": [1]",
                 "\"steps\": [{\"op\": \"fused\", \"group\": " + group +
                     ", \"operands\": [1]");
}
const char *kGroup = R"({"rows": 2, "cols": 4, "body": [
    {"op": "load", "operand": 0, "kind": "elem", "type": "f32"},
    {"op": "convert", "args": [0], "type": "bf16"}],
  "outputs": [{"value": 1}]})";
} // namespace

TEST(Plan, ReadsAFusedGroup) {
  // w [4, 4] f32 as 2 x 8 points, summed over rows into value 3 (8 bf16).
  std::string valid = replace(replace(kGroup, "\"cols\": 4", "\"cols\": 8"),
                              "{\"value\": 1}",
                              "{\"value\": 1, \"store\": \"col_sum\"}");
  std::string error;
  std::optional<Plan> plan = parsePlan(withGroup(valid), error);
  ASSERT_TRUE(plan) << error;
  const PlanStep &step = plan->entry("eval_loss")->steps[0];
  ASSERT_TRUE(step.group);
  EXPECT_EQ(step.group->rows, 2);
  EXPECT_EQ(step.group->cols, 8);
  ASSERT_EQ(step.group->body.size(), 2u);
  EXPECT_EQ(step.group->body[1].op, GroupInstr::Op::Convert);
  EXPECT_EQ(step.group->body[1].kind, GroupKind::Elem); // inferred
  EXPECT_EQ(step.group->outputs[0].store, GroupOutput::Store::ColSum);

  // 2 x 4 points, but w has 16 elements.
  EXPECT_EQ(errorOf(withGroup(kGroup)),
            "eval_loss step 0: instruction 0 (load) loads 16 elements as a "
            "elem value of 8");
  // 4 x 4 points stored whole, but the result has 8 elements.
  EXPECT_EQ(errorOf(withGroup(replace(kGroup, "\"rows\": 2", "\"rows\": 4"))),
            "eval_loss step 0: output 0 (elem) writes 16 elements to value 3, "
            "which has 8");
}

TEST(Plan, RejectsMalformedGroups) {
  std::string g = R"({"rows": 4, "cols": 4, "body": [
      {"op": "load", "operand": 0, "kind": "elem", "type": "f32"},
      {"op": "row_sum", "args": [0]},
      {"op": "mul", "args": [0, 1], "type": "bf16"}],
    "outputs": [{"value": 2, "store": "col_sum"}]})";
  // value 3 has 8 elements; col_sum writes 4.
  EXPECT_NE(errorOf(withGroup(g)).find("col_sum) writes 4 elements"),
            std::string::npos);
  EXPECT_EQ(errorOf(withGroup(replace(g, "\"args\": [0, 1]", "\"args\": [0, 2]"))),
            "eval_loss step 0: instruction 2 (mul) reads instruction 2, which "
            "does not come before it");
  EXPECT_EQ(errorOf(withGroup(replace(g, "\"row_sum\", \"args\": [0]",
                                      "\"row_sum\", \"args\": [0, 0]"))),
            "eval_loss step 0: instruction 1 (row_sum) has 2 arguments, not 1");
  EXPECT_EQ(errorOf(withGroup(replace(g, "\"row_sum\"", "\"cube\""))),
            "eval_loss step 0: unknown group instruction 'cube'");
  EXPECT_EQ(errorOf(withGroup(replace(g, "\"col_sum\"", "\"sideways\""))),
            "eval_loss step 0: unknown store 'sideways'");
  EXPECT_EQ(errorOf(withGroup(replace(g, "\"operand\": 0", "\"operand\": 3"))),
            "eval_loss step 0: instruction 0 (load) loads operand 3 of 1");
  EXPECT_EQ(errorOf(withGroup(replace(g, "\"type\": \"f32\"}", "\"type\": \"bf16\"}"))),
            "eval_loss step 0: instruction 0 (load) loads a f32 tensor as bf16");
  EXPECT_EQ(errorOf(withGroup(replace(g, "\"store\": \"col_sum\"", "\"store\": \"row\""))),
            "eval_loss step 0: output 0 (row) stores a elem value");
}

TEST(Plan, MissingFileIsAnError) {
  std::string error;
  EXPECT_FALSE(loadPlan("/nonexistent/step.kplan", error));
  EXPECT_EQ(error, "cannot open plan '/nonexistent/step.kplan'");
}

TEST(Plan, ChecksTheShardOpsWeights) {
  // shard_amax of the 16-element state, one weight per amax (value 2 has
  // one element): offsets and sizes must be there, one each per weight, and
  // inside the flat buffer of `ranks` shards.
  std::string amax = replace(kValid, "\"op\": \"cast\", \"operands\": [1], \"results\": [3]",
                             "\"op\": \"shard_amax\", \"operands\": [1], \"results\": [2]");
  std::string error;
  EXPECT_TRUE(parsePlan(replace(amax, "\"warmup_steps\": 10",
                                "\"offsets\": [0], \"sizes\": [16], \"ranks\": 1"),
                        error)
                  .has_value())
      << error;
  std::string want = "eval_loss step 0: shard_amax needs one offset and one "
                     "size per weight, inside the flat buffer of `ranks` "
                     "shards";
  EXPECT_EQ(errorOf(amax), want);
  EXPECT_EQ(errorOf(replace(amax, "\"warmup_steps\": 10",
                            "\"offsets\": [0], \"sizes\": [17], \"ranks\": 1")),
            want);
  EXPECT_EQ(errorOf(replace(amax, "\"warmup_steps\": 10",
                            "\"offsets\": [0, 4], \"sizes\": [4, 4], \"ranks\": 1")),
            want);
}
