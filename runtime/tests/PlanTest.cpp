// Reading plans: a valid one, and each way a plan file can be wrong gives
// one error line naming the entry, the step and the field, never a crash.
// tests/Plan/hostile-plans.test does the same to compiled plans through
// kiln-run, and tests/Fuzz/PlanFuzz.cpp mutates them by the thousand.
#include "kiln/Runtime/Plan.h"

#include <gtest/gtest.h>

using namespace kiln::runtime;

namespace {
// A whole plan, small: an embedding, the loss, the gradient of the table,
// AdamW, and a fused cast whose result nobody reads. Arena: x [0, 512),
// loss 512, g [576, 1600), norm 1600, lr 1664, xb [1728, 1984).
const char *kValid = R"({
  "format": "kiln-plan", "version": 8, "vocab_size": 16,
  "mesh": {"dp_shard": 1, "tp": 1},
  "training": {"steps": 2, "seed": 0, "eval_interval": 0, "eval_steps": 1,
               "checkpoint_interval": 0, "data": "fortunes",
               "checkpoint_folder": "checkpoints"},
  "arena_bytes": 1984, "state_bytes": 3072,
  "values": [
    {"id": 0, "kind": "input", "name": "tokens", "shape": [2, 4], "dtype": "i32"},
    {"id": 1, "kind": "input", "name": "targets", "shape": [2, 4], "dtype": "i32"},
    {"id": 2, "kind": "input", "name": "step", "shape": [], "dtype": "i64"},
    {"id": 3, "kind": "input", "name": "seed", "shape": [], "dtype": "i64"},
    {"id": 4, "kind": "state", "name": "w", "shape": [16, 16], "dtype": "f32",
     "init": {"kind": "trunc_normal", "std": 0.02, "a": -2, "b": 2}},
    {"id": 5, "kind": "state", "name": "exp_avg.w", "shape": [16, 16],
     "dtype": "f32", "init": {"kind": "zeros"}},
    {"id": 6, "kind": "state", "name": "exp_avg_sq.w", "shape": [16, 16],
     "dtype": "f32", "init": {"kind": "zeros"}},
    {"id": 7, "kind": "arena", "shape": [2, 4, 16], "dtype": "f32", "offset": 0},
    {"id": 8, "kind": "arena", "shape": [], "dtype": "f32", "offset": 512},
    {"id": 9, "kind": "arena", "shape": [16, 16], "dtype": "f32", "offset": 576},
    {"id": 10, "kind": "arena", "shape": [], "dtype": "f32", "offset": 1600},
    {"id": 11, "kind": "arena", "shape": [], "dtype": "f32", "offset": 1664},
    {"id": 12, "kind": "arena", "shape": [8, 16], "dtype": "bf16", "offset": 1728}
  ],
  "entries": {
    "init": {"arena_bytes": 0, "outputs": {}, "steps": [
      {"op": "init", "operands": [3], "results": [4], "attrs": {}},
      {"op": "init", "operands": [3], "results": [5], "attrs": {}},
      {"op": "init", "operands": [3], "results": [6], "attrs": {}}]},
    "train_step": {"arena_bytes": 1984,
      "outputs": {"loss": 8, "grad_norm": 10, "lr": 11}, "steps": [
      {"op": "embedding", "operands": [4, 0], "results": [7],
       "attrs": {"param": "w"}, "loc": "model.tok_embeddings at m.toml:2:1"},
      {"op": "fused", "operands": [7], "results": [12], "attrs": {"ops": "cast"},
       "group": {"rows": 8, "cols": 16, "body": [
         {"op": "load", "operand": 0, "kind": "elem", "type": "f32"},
         {"op": "convert", "args": [0], "type": "bf16"}],
         "outputs": [{"value": 1}]}},
      {"op": "cross_entropy", "operands": [7, 1], "results": [8], "attrs": {}},
      {"op": "embedding_grad", "operands": [7, 0], "results": [9],
       "attrs": {"param": "w"}},
      {"op": "grad_norm", "operands": [9], "results": [10], "attrs": {}},
      {"op": "lr_schedule", "operands": [2], "results": [11],
       "attrs": {"peak": 0.01, "min_lr": 0, "warmup_steps": 1,
                 "total_steps": 2, "decay": "cosine"}},
      {"op": "adamw", "operands": [4, 9, 5, 6, 10, 11, 2], "results": [4, 5, 6],
       "attrs": {"beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
                 "weight_decay": 0.1, "max_norm": 1}}]},
    "eval_loss": {"arena_bytes": 576, "outputs": {"loss": 8}, "steps": [
      {"op": "embedding", "operands": [4, 0], "results": [7],
       "attrs": {"param": "w"}},
      {"op": "cross_entropy", "operands": [7, 1], "results": [8], "attrs": {}}]}
  }
})";

std::string errorOf(const std::string &text) {
  Expected<Plan> plan = parsePlan(text);
  EXPECT_FALSE(plan);
  return plan.error().message();
}

std::string replace(std::string s, const std::string &from,
                    const std::string &to) {
  size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? s : s.replace(at, from.size(), to);
}

/// The plan with the fused step's group replaced.
std::string withGroup(const std::string &group) {
  size_t at = std::string(kValid).find("\"group\": ");
  size_t end = std::string(kValid).find("\"outputs\": [{\"value\": 1}]}}", at);
  std::string s = kValid;
  return s.replace(at + 9, end + 26 - (at + 9), group);
}

const std::string kStep1 = "train_step step 1 (fused) group: ";
} // namespace

TEST(Plan, ReadsAValidPlan) {
  Expected<Plan> plan = parsePlan(kValid);
  ASSERT_TRUE(plan) << plan.error().message();
  EXPECT_EQ(plan->values.size(), 13u);
  EXPECT_EQ(plan->values[4].init.kind, InitSpec::TruncNormal);
  EXPECT_EQ(plan->values[12].bytes(), 256);
  const PlanStep &lr = plan->entry("train_step")->steps[5];
  EXPECT_EQ(lr.kind, kiln::plan::Op::LrSchedule);
  EXPECT_EQ(lr.str("decay"), "cosine");
  EXPECT_EQ(lr.i64("warmup_steps"), 1);
  EXPECT_DOUBLE_EQ(lr.f64("min_lr"), 0.0); // an integer read as a number
  EXPECT_FALSE(lr.flag("absent"));
  const PlanStep &cast = plan->entry("train_step")->steps[1];
  ASSERT_TRUE(cast.group);
  EXPECT_EQ(cast.group->body[1].kind, GroupKind::Elem); // inferred
  EXPECT_EQ(plan->named(PlanValue::Input, "tokens")->id, 0);
}

TEST(Plan, RejectsWhatIsNotAPlan) {
  EXPECT_EQ(errorOf("{\"format\": \"other\"}"),
            "not a Kiln plan (no \"format\": \"kiln-plan\")");
  EXPECT_NE(errorOf("{ truncated").find("malformed plan"), std::string::npos);
  EXPECT_NE(errorOf("").find("malformed plan"), std::string::npos);
  EXPECT_NE(errorOf("[1, 2]").find("not a Kiln plan"), std::string::npos);
}

// Tensor-parallel slices (tp_shard): one plan is one tp position's; its
// slices' dims are their shapes'; tokens and targets are sequence slices.
TEST(Plan, ChecksTpSlices) {
  const std::string w = R"("name": "w", "shape": [16, 16],)";
  auto slice = [](int dim, int index) {
    return "\"tp_shard\": {\"dim\": " + std::to_string(dim) +
           ", \"index\": " + std::to_string(index) + "},";
  };
  auto tp2 = [&](const std::string &tokens, const std::string &weight) {
    std::string text =
        replace(kValid, R"("mesh": {"dp_shard": 1, "tp": 1},)",
                R"("ranks": 2, "mesh": {"dp_shard": 1, "tp": 2},)");
    text =
        replace(text, R"("name": "tokens",)", tokens + R"( "name": "tokens",)");
    text = replace(text, R"("name": "targets",)",
                   tokens + R"( "name": "targets",)");
    return replace(text, w, weight + " " + w);
  };
  Expected<Plan> plan = parsePlan(tp2(slice(1, 1), slice(0, 1)));
  ASSERT_TRUE(plan) << plan.error().message();
  EXPECT_EQ(plan->tpIndex, 1);
  EXPECT_EQ(wholeShape(*plan, plan->values[4].shape, plan->values[4].tp),
            (std::vector<int64_t>{32, 16}));
  EXPECT_EQ(wholeShape(*plan, plan->values[0].shape, plan->values[0].tp),
            (std::vector<int64_t>{2, 8}));

  EXPECT_EQ(errorOf(replace(kValid, w, slice(0, 0) + " " + w)),
            "value 4: 'w' is a tp slice (tp_shard), but the mesh has tp 1");
  EXPECT_EQ(errorOf(tp2("", slice(0, 1))),
            "value 0: input 'tokens' must be a sequence slice (tp_shard dim "
            "1, no pad) on a mesh with tp > 1");
  EXPECT_EQ(errorOf(tp2(slice(1, 1), slice(2, 1))),
            "value 4: 'w' tp_shard dim 2 is not a dim of its rank-2 shape");
  EXPECT_EQ(errorOf(tp2(slice(1, 1), slice(0, 0))),
            "value 0: 'tokens' is tp slice 1 in a plan for tp position 0 (a "
            "plan holds one position's slices)");
  EXPECT_NE(
      errorOf(tp2(slice(1, 1), R"("tp_shard": {"dim": 0},)")).find("tp_shard"),
      std::string::npos);

  // A padded slice (a vocabulary tp does not divide): the whole tensor is
  // pad entries short; a pad of a whole slice, or on the tokens, is refused.
  auto padded = [](int pad) {
    return "\"tp_shard\": {\"dim\": 0, \"index\": 1, \"pad\": " +
           std::to_string(pad) + "},";
  };
  plan = parsePlan(tp2(slice(1, 1), padded(3)));
  ASSERT_TRUE(plan) << plan.error().message();
  EXPECT_EQ(plan->values[4].tp->pad, 3);
  EXPECT_EQ(wholeShape(*plan, plan->values[4].shape, plan->values[4].tp),
            (std::vector<int64_t>{29, 16}));
  EXPECT_EQ(errorOf(tp2(slice(1, 1), padded(16))),
            "value 4: 'w' tp_shard pad 16 is not below the slice's 16 entries "
            "along dim 0 (a slice would be padding only)");
  EXPECT_EQ(errorOf(tp2(R"("tp_shard": {"dim": 1, "index": 1, "pad": 1},)",
                        slice(0, 1))),
            "value 0: input 'tokens' must be a sequence slice (tp_shard dim "
            "1, no pad) on a mesh with tp > 1");
}

TEST(Plan, RejectsAnotherVersion) {
  EXPECT_EQ(errorOf(replace(kValid, "\"version\": 8", "\"version\": 7")),
            "plan version 7 is not supported by this runtime (it reads "
            "version 8); compile the model again with this build's kiln "
            "(kiln compile MODEL -o PLAN)");
}

// Pipeline parallel (version 6): the mesh's pp axis and the plan's
// position on it, which the ranks must multiply out and the position lie
// on.
TEST(Plan, ReadsThePipelineAxis) {
  const std::string mesh = R"("mesh": {"dp_shard": 1, "tp": 1},)";
  Expected<Plan> piped = parsePlan(replace(
      kValid, mesh,
      R"("ranks": 2, "mesh": {"dp_shard": 1, "pp": 2, "pp_index": 1, "tp": 1},)"));
  ASSERT_TRUE(piped) << piped.error().message();
  EXPECT_EQ(piped->mesh.pp, 2);
  EXPECT_EQ(piped->ppIndex, 1);
  EXPECT_EQ(piped->mesh.axisIndex(kiln::plan::Axis::Pp, 1), 1);
  EXPECT_EQ(
      errorOf(replace(
          kValid, mesh,
          R"("ranks": 2, "mesh": {"dp_shard": 1, "pp": 2, "pp_index": 2, "tp": 1},)")),
      "the plan's mesh pp_index is 2, outside [0, 1]");
  EXPECT_EQ(
      errorOf(replace(
          kValid, mesh,
          R"("mesh": {"dp_shard": 1, "pp": 2, "pp_index": 0, "tp": 1},)")),
      "the plan's mesh (pp 2 x dp_shard 1 x tp 1) is not its 1 ranks");
}

// Integers are integers, in range: a result id of -0.5 is not 0, an offset
// of 2^63 - 1 does not overflow the bounds check.
TEST(Plan, IntegersAreIntegersInRange) {
  EXPECT_EQ(errorOf(replace(kValid, "\"results\": [8], \"attrs\": {}}",
                            "\"results\": [-0.5], \"attrs\": {}}")),
            "train_step step 2 (cross_entropy) results element must be an "
            "integer, not -0.5");
  EXPECT_EQ(errorOf(replace(kValid, "\"offset\": 512",
                            "\"offset\": 9223372036854775807")),
            "value 8 offset is 9223372036854775807, outside [0, "
            "4611686018427387904]");
  EXPECT_EQ(errorOf(replace(kValid, "\"offset\": 512",
                            "\"offset\": 18446744073709551615")),
            "value 8 offset is 18446744073709551615, past "
            "4611686018427387904");
  EXPECT_EQ(errorOf(replace(kValid, "\"vocab_size\": 16", "\"vocab_size\": 16.0")),
            "the plan vocab_size must be an integer, not 16.0");
  EXPECT_EQ(errorOf(replace(kValid, "\"operands\": [9], \"results\": [10]",
                            "\"operands\": [99], \"results\": [10]")),
            "train_step step 4 (grad_norm) operands element is 99, outside "
            "[0, 12]");
  EXPECT_EQ(errorOf(replace(kValid, "\"shape\": [2, 4, 16]",
                            "\"shape\": [16777216, 16777216, 16777216]")),
            "value 7 shape has more than 2^48 elements");
}

TEST(Plan, RejectsUnboundedTraining) {
  // 2^32 validation batches would never end.
  EXPECT_EQ(errorOf(replace(kValid, "\"eval_steps\": 1",
                            "\"eval_steps\": 4294967296")),
            "the training section eval_steps is 4294967296, outside [1, "
            "100000]");
  EXPECT_EQ(errorOf(replace(kValid, "\"steps\": 2,", "\"steps\": -1,")),
            "the training section steps is -1, outside [0, 1000000000]");
}

TEST(Plan, RejectsMissingAndMistypedAttributes) {
  EXPECT_EQ(errorOf(replace(kValid, "\"attrs\": {\"param\": \"w\"}, \"loc\"",
                            "\"attrs\": {}, \"loc\"")),
            "train_step step 0 (embedding at model.tok_embeddings at "
            "m.toml:2:1): attribute 'param' is missing");
  EXPECT_EQ(errorOf(replace(kValid, "\"attrs\": {\"param\": \"w\"}, \"loc\"",
                            "\"attrs\": {\"param\": 3}, \"loc\"")),
            "train_step step 0 (embedding at model.tok_embeddings at "
            "m.toml:2:1): attribute 'param' must be a string");
  EXPECT_EQ(errorOf(replace(kValid, "\"decay\": \"cosine\"",
                            "\"decay\": \"linear\"")),
            "train_step step 5 (lr_schedule): attribute 'decay' is 'linear'; "
            "it must be one of cosine|constant");
  EXPECT_EQ(errorOf(replace(kValid, "\"beta1\": 0.9", "\"beta1\": 1.5")),
            "train_step step 6 (adamw): attribute 'beta1' holds 1.500000, "
            "outside [0.000000, 1.000000]");
  EXPECT_EQ(errorOf(replace(kValid, "\"beta1\": 0.9", "\"beta1\": true")),
            "train_step step 6 (adamw): attribute 'beta1' must be a number");
  EXPECT_EQ(errorOf(replace(kValid, "\"beta1\": 0.9", "\"betta\": 0.9")),
            "train_step step 6 (adamw): attribute 'betta' is not one adamw "
            "takes");
}

// A tp rank's embedding holds a slice of the vocabulary's rows
// (vocab_start, vocab_size): both or neither, the slice the plan's tp
// position's, the slices covering the vocabulary, and the vocabulary the
// plan's. (The tp > 1 cases: tests/Train/tp-vocab-pad.test and the plan
// fuzzer's mutants of tp plans.)
TEST(Plan, ChecksTheEmbeddingsVocabularySlice) {
  auto withAttrs = [](const std::string &attrs) {
    return replace(kValid, "\"attrs\": {\"param\": \"w\"}, \"loc\"",
                   "\"attrs\": {\"param\": \"w\", " + attrs + "}, \"loc\"");
  };
  // The error each attribute set gets, after the step's name.
  auto errorWith = [&](const std::string &attrs) {
    const std::string step = "train_step step 0 (embedding at "
                             "model.tok_embeddings at m.toml:2:1): ";
    std::string error = errorOf(withAttrs(attrs));
    EXPECT_EQ(error.rfind(step, 0), 0u) << error;
    return error.substr(std::min(error.size(), step.size()));
  };
  Expected<Plan> whole =
      parsePlan(withAttrs("\"vocab_start\": 0, \"vocab_size\": 16"));
  ASSERT_TRUE(whole) << whole.error().message();
  EXPECT_EQ(errorWith("\"vocab_start\": 8"),
            "attributes 'vocab_start' and 'vocab_size' must be given together");
  EXPECT_EQ(errorWith("\"vocab_start\": 16, \"vocab_size\": 16"),
            "attribute 'vocab_start' is 16; tp position 0's slice of 16 "
            "starts at 0");
  EXPECT_EQ(errorWith("\"vocab_start\": 0, \"vocab_size\": 32"),
            "attribute 'vocab_size' is 32; 1 slices of 16 must cover it with "
            "less than a slice to spare");
  EXPECT_EQ(errorWith("\"vocab_start\": 0, \"vocab_size\": 15"),
            "has a vocabulary of 15 but the plan's vocab_size is 16");
}

TEST(Plan, RejectsWrongArityAndUnknownOps) {
  EXPECT_EQ(errorOf(replace(kValid, "\"operands\": [7, 0], \"results\": [9]",
                            "\"operands\": [7], \"results\": [9]")),
            "train_step step 3 (embedding_grad): has 1 operands; "
            "embedding_grad takes 2");
  EXPECT_EQ(errorOf(replace(kValid, "\"results\": [4, 5, 6]",
                            "\"results\": [4, 5]")),
            "train_step step 6 (adamw): has 2 results; adamw gives 3");
  EXPECT_EQ(errorOf(replace(kValid, "\"op\": \"grad_norm\"", "\"op\": \"norm\"")),
            "train_step step 4 has an unknown op 'norm'");
}

// A fused group relabelled as a library op, or a lone elementwise op.
TEST(Plan, RejectsRelabelledGroups) {
  EXPECT_EQ(errorOf(replace(kValid, "\"op\": \"fused\"", "\"op\": \"linear\"")),
            "train_step step 1 (linear) has a group, but only \"fused\" "
            "steps have one");
  EXPECT_EQ(errorOf(replace(kValid, "\"op\": \"fused\"", "\"op\": \"cast\"")),
            "train_step step 1 (cast) is an op that only appears inside "
            "fused groups (as a \"fused\" step)");
  EXPECT_EQ(errorOf(replace(kValid, "\"op\": \"embedding_grad\"",
                            "\"op\": \"fused\"")),
            "train_step step 3 (fused) has no 'group'");
}

TEST(Plan, RejectsShapesTheKernelsWouldOverrun) {
  // A state smaller than the AdamW update that writes it.
  EXPECT_EQ(errorOf(replace(replace(kValid,
                                    "\"name\": \"exp_avg_sq.w\", \"shape\": [16, 16]",
                                    "\"name\": \"exp_avg_sq.w\", \"shape\": [16, 8]"),
                            "\"state_bytes\": 3072", "\"state_bytes\": 2560")),
            "train_step step 6 (adamw): operand 3 (exp_avg_sq) has 128 "
            "elements; it must have 256");
  // The gradient of the table has another row width than the tokens give.
  EXPECT_EQ(errorOf(replace(kValid, "\"shape\": [16, 16], \"dtype\": \"f32\", \"offset\": 576",
                            "\"shape\": [16, 8], \"dtype\": \"f32\", \"offset\": 576")),
            "train_step step 3 (embedding_grad): operand 0's last dimension "
            "is 16; it must be 8");
  // Tokens read as floats.
  EXPECT_EQ(errorOf(replace(kValid, "\"operands\": [9], \"results\": [10]",
                            "\"operands\": [0], \"results\": [10]")),
            "train_step step 4 (grad_norm): operand 0 is i32; it must be f32 "
            "or bf16");
}

TEST(Plan, RejectsValuesTheRuntimeCannotFeed) {
  EXPECT_EQ(errorOf(replace(kValid, "\"name\": \"targets\", \"shape\": [2, 4]",
                            "\"name\": \"targets\", \"shape\": [2, 8]")),
            "value 1: input 'targets' must have the shape of 'tokens'");
  EXPECT_EQ(errorOf(replace(kValid, "\"name\": \"step\"", "\"name\": \"epoch\"")),
            "value 2: is an unknown input 'epoch' (inputs are tokens, "
            "targets, step and seed)");
  EXPECT_EQ(errorOf(replace(kValid, "\"state_bytes\": 3072",
                            "\"state_bytes\": 3000")),
            "the plan: state_bytes is 3000 but its states hold 3072");
  EXPECT_EQ(errorOf(replace(kValid, "\"offset\": 1728", "\"offset\": 1792")),
            "value 12: bytes [1792, 2048) lie outside the arena of 1984 "
            "bytes");
  // Found by the plan fuzzer: an f32 buffer at an odd offset is a
  // misaligned load on every backend.
  EXPECT_EQ(errorOf(replace(kValid, "\"offset\": 1728", "\"offset\": 1729")),
            "value 12: arena offset 1729 is not a multiple of 64");
}

// Found by the plan fuzzer: the memory check sums the plan's byte counts
// (MemoryCheck.h), each at most 2^62 alone; together they must not
// overflow either.
TEST(Plan, RejectsByteCountsWhoseSumsOverflow) {
  EXPECT_EQ(errorOf(replace(kValid, "\"arena_bytes\": 1984, \"state_bytes\"",
                            "\"arena_bytes\": 4611686018427387904, "
                            "\"state_bytes\"")),
            "the plan: state_bytes and arena_bytes together pass 2^62");
  std::string peak = "\"arena_bytes\": 576, \"live_at_peak\": {\"peak_step\": 1, "
                     "\"parameter_copies\": 0, \"gradients\": %G, "
                     "\"activations\": %A},";
  auto withPeak = [&](const std::string &g, const std::string &a) {
    return replace(kValid, "\"arena_bytes\": 576,",
                   replace(replace(peak, "%G", g), "%A", a));
  };
  EXPECT_EQ(parsePlan(withPeak("64", "512")).error().message(), "");
  EXPECT_EQ(errorOf(withPeak("4611686018427387904", "4611686018427387904")),
            "entry eval_loss live_at_peak: holds more bytes than the entry's "
            "arena of 576");
  EXPECT_EQ(errorOf(withPeak("64", "513")),
            "entry eval_loss live_at_peak: holds more bytes than the entry's "
            "arena of 576");
  // peak_step counts the compiler's ops (constants too), not steps: any
  // value is informative only.
  EXPECT_EQ(parsePlan(replace(withPeak("0", "0"), "\"peak_step\": 1",
                              "\"peak_step\": 9"))
                .error()
                .message(),
            "");
}

// Found by the plan fuzzer (with the standard library's assertions on):
// a truncated normal over an empty interval ends in std::clamp(x, a, b)
// with a > b, which is undefined.
TEST(Plan, RejectsAnEmptyTruncationInterval) {
  EXPECT_EQ(errorOf(replace(kValid, "\"a\": -2, \"b\": 2", "\"a\": 2, \"b\": -2")),
            "value 4 init has an empty truncation interval: a (2.000000) is "
            "greater than b (-2.000000)");
}

// Found by the plan fuzzer: every string a plan holds may end up in a
// message, which must stay one line.
TEST(Plan, RejectsControlCharactersInStrings) {
  EXPECT_EQ(errorOf(replace(kValid, "\"loc\": \"model.tok_embeddings at",
                            "\"loc\": \"model.tok_embeddings\\nat")),
            "train_step step 0 (embedding) loc \"model.tok_embeddings\\nat "
            "m.toml:2:1\" holds a control character");
  EXPECT_EQ(errorOf(replace(kValid, "\"decay\": \"cosine\"",
                            "\"decay\": \"cos\\rine\"")),
            "train_step step 5 (lr_schedule) attribute 'decay' \"cos\\rine\" "
            "holds a control character");
  EXPECT_EQ(errorOf(replace(kValid, "\"weight_decay\"", "\"weight\\tdecay\"")),
            "train_step step 6 (adamw) attribute name \"weight\\tdecay\" holds "
            "a control character");
  EXPECT_EQ(errorOf(replace(kValid, "\"eval_loss\": {", "\"eval\\u001bloss\": {")),
            "an entry name \"eval\\u001bloss\" holds a control character");
  EXPECT_EQ(errorOf(replace(kValid, "{\"loss\": 8}", "{\"lo\\nss\": 8}")),
            "entry eval_loss output name \"lo\\nss\" holds a control "
            "character");
}

TEST(Plan, RejectsResultsThatAreNotTheStepsToWrite) {
  EXPECT_EQ(errorOf(replace(kValid, "\"operands\": [9], \"results\": [10]",
                            "\"operands\": [9], \"results\": [5]")),
            "train_step step 4 (grad_norm): result 0 (value 5) is a state, "
            "which grad_norm cannot write");
  EXPECT_EQ(errorOf(replace(kValid, "\"operands\": [9], \"results\": [10]",
                            "\"operands\": [9], \"results\": [9]")),
            "train_step step 4 (grad_norm): result 0 (value 9) shares "
            "storage with operand 0 (value 9)");
}

// A deleted step whose result is then read: nothing wrote it.
TEST(Plan, RejectsReadsBeforeWrites) {
  EXPECT_EQ(errorOf(replace(kValid,
                            "{\"op\": \"grad_norm\", \"operands\": [9], "
                            "\"results\": [10], \"attrs\": {}},",
                            "")),
            "train_step step 5 (adamw): operand 4 (value 10) is read before "
            "any step of train_step writes it");
}

// Two values live at the same time in one arena byte: the loss (live from
// step 2 to the end, an output) and the gradient norm.
TEST(Plan, RejectsOverlappingLiveBuffers) {
  EXPECT_EQ(errorOf(replace(kValid, "\"offset\": 1600", "\"offset\": 512")),
            "train_step step 4 (grad_norm): value 10 (arena bytes 512 to "
            "516) overlaps value 8, live from step 2 to 7");
  // The same bytes reused once the first value is dead are fine: x (steps
  // 0 to 3) is dead when the norm is written at step 4.
  EXPECT_EQ(parsePlan(replace(kValid, "\"offset\": 1600", "\"offset\": 0"))
                .error()
                .message(),
            "");
}

// A view (version 7): an earlier arena buffer's bytes under another
// shape, written by no step; reading it reads its buffer. Here the
// gradient norm reads g (value 9) as a flat view.
TEST(Plan, ReadsViewsAsTheirBuffers) {
  std::string view = replace(replace(kValid, R"("offset": 1728})",
                                     R"("offset": 1728},
    {"id": 13, "kind": "arena", "shape": [256], "dtype": "f32",
     "offset": 576, "view_of": 9})"),
                             "\"operands\": [9], \"results\": [10]",
                             "\"operands\": [13], \"results\": [10]");
  Expected<Plan> plan = parsePlan(view);
  ASSERT_TRUE(plan) << plan.error().message();
  EXPECT_EQ(plan->values[13].storage(), 9);
  // Its buffer not written first.
  EXPECT_EQ(errorOf(replace(view,
                            "{\"op\": \"embedding_grad\", \"operands\": "
                            "[7, 0], \"results\": [9],\n       \"attrs\": "
                            "{\"param\": \"w\"}},",
                            "")),
            "train_step step 3 (grad_norm): operand 0 (value 13) is read "
            "before any step of train_step writes it");
  // A step writing it.
  EXPECT_EQ(errorOf(replace(view, "\"operands\": [13], \"results\": [10]",
                            "\"operands\": [9], \"results\": [13]")),
            "train_step step 4 (grad_norm): result 0 (value 13) is a view of "
            "value 9, which no step writes");
  // Not its buffer's bytes, or a view of what is no arena buffer.
  EXPECT_EQ(errorOf(replace(view, R"("offset": 576, "view_of")",
                            R"("offset": 640, "view_of")")),
            "value 13 is a view of value 9 but not of its offset, dtype and "
            "size");
  EXPECT_EQ(errorOf(replace(view, R"("view_of": 9)", R"("view_of": 4)")),
            "value 13 is a view of value 4, which is not an arena buffer of "
            "its own");
  EXPECT_EQ(errorOf(replace(view, R"("view_of": 9)", R"("view_of": 13)")),
            "value 13 view_of is 13, outside [0, 12]");
}

TEST(Plan, RejectsAVocabularyTheEmbeddingDisagreesWith) {
  EXPECT_EQ(errorOf(replace(kValid, "\"vocab_size\": 16", "\"vocab_size\": 17")),
            "eval_loss step 0 (embedding): has a vocabulary of 16 but the "
            "plan's vocab_size is 17");
}

TEST(Plan, RejectsMissingEntriesAndOutputs) {
  EXPECT_EQ(errorOf(replace(kValid, "\"grad_norm\": 10, ", "")),
            "entry train_step: has no output 'grad_norm'");
  EXPECT_EQ(errorOf(replace(kValid, "\"eval_loss\": {", "\"eval\": {")),
            "entry eval: is not an entry the runtime knows");
  EXPECT_EQ(errorOf(replace(kValid,
                            "      {\"op\": \"init\", \"operands\": [3], "
                            "\"results\": [6], \"attrs\": {}}]},",
                            "      {\"op\": \"init\", \"operands\": [3], "
                            "\"results\": [5], \"attrs\": {}}]},")),
            "init step 2 (init): state 'exp_avg.w' is initialised twice");
}

TEST(Plan, ChecksFusedGroupsAgainstTheirValues) {
  const char *group = R"({"rows": 8, "cols": 16, "body": [
      {"op": "load", "operand": 0, "kind": "elem", "type": "f32"},
      {"op": "convert", "args": [0], "type": "bf16"}],
    "outputs": [{"value": 1}]})";
  EXPECT_EQ(parsePlan(withGroup(group)).error().message(), "");
  // 4 x 16 points, but x has 128 elements.
  EXPECT_EQ(errorOf(withGroup(replace(group, "\"rows\": 8", "\"rows\": 4"))),
            kStep1 + "instruction 0 (load) loads 128 elements as a "
                     "elem value of 64");
  EXPECT_EQ(errorOf(withGroup(replace(group, "\"args\": [0]", "\"args\": [1]"))),
            kStep1 + "instruction 1 (convert) reads instruction 1, "
                     "which does not come before it");
  EXPECT_EQ(errorOf(withGroup(replace(group, "\"args\": [0]", "\"args\": [0, 0]"))),
            kStep1 + "instruction 1 (convert) has 2 arguments, not 1");
  EXPECT_EQ(errorOf(withGroup(replace(group, "\"convert\"", "\"cube\""))),
            "train_step step 1 (fused) group instruction 1 is an unknown "
            "group instruction 'cube'");
  EXPECT_EQ(errorOf(withGroup(replace(group, "{\"value\": 1}",
                                      "{\"value\": 1, \"store\": \"sideways\"}"))),
            "train_step step 1 (fused) group output 0 has an unknown store "
            "'sideways'");
  EXPECT_EQ(errorOf(withGroup(replace(group, "\"operand\": 0", "\"operand\": 3"))),
            kStep1 + "instruction 0 (load) loads operand 3 of 1");
  EXPECT_EQ(errorOf(withGroup(replace(group, "\"type\": \"f32\"", "\"type\": \"bf16\""))),
            kStep1 + "instruction 0 (load) loads a f32 tensor as bf16");
  EXPECT_EQ(errorOf(withGroup(replace(group, "{\"value\": 1}",
                                      "{\"value\": 1, \"store\": \"row\"}"))),
            kStep1 + "output 0 (row) stores a elem value");
  EXPECT_EQ(errorOf(withGroup(replace(group, "\"rows\": 8",
                                      "\"rows\": 281474976710656"))),
            "train_step step 1 (fused) group has more than 2^48 points");
}

TEST(Plan, MissingFileIsAnError) {
  Expected<Plan> plan = loadPlan("/nonexistent/step.kplan");
  EXPECT_FALSE(plan);
  EXPECT_NE(plan.error().message().find("/nonexistent/step.kplan"),
            std::string::npos);
}
