// Properties of a compiled training step on the CPU backend that the
// oracle tests do not cover: the op a NaN comes from, and determinism for
// a given thread count.
#include "kiln/Driver/Session.h"
#include "kiln/Runtime/Cpu/Common.h"
#include "kiln/Runtime/Cpu/CpuExecutor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

using namespace kiln;
using namespace kiln::runtime;

namespace {
Plan compileTiny(const std::vector<std::string> &extra = {}) {
  std::vector<std::string> sets = {
      "model.dim=64",          "model.n_layers=2",
      "model.n_heads=4",       "model.n_kv_heads=2",
      "training.seq_len=16",   "training.global_batch_size=2",
      "mixed_precision.param=\"float32\""};
  sets.insert(sets.end(), extra.begin(), extra.end());
  ModelSession session;
  EXPECT_TRUE(session.load("llama3-debug", sets));
  std::optional<std::string> text = session.compilePlan();
  EXPECT_TRUE(text);
  Expected<Plan> plan = parsePlan(text ? *text : "");
  EXPECT_TRUE(plan) << plan.error().message();
  return plan ? *plan : Plan{};
}

std::vector<int32_t> someTokens(size_t n, int salt) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i)
    t[i] = static_cast<int32_t>((i * 37 + salt) % 256);
  return t;
}
} // namespace

TEST(TrainingStep, NonFiniteValueNamesTheOpThatProducedIt) {
  Plan plan = compileTiny();
  Expected<std::unique_ptr<CpuExecutor>> created = CpuExecutor::create(plan);
  ASSERT_TRUE(created) << created.error();
  CpuExecutor *exec = created->get();
  ASSERT_FALSE(exec->initialize(0));
  (*exec->state("model.layers.1.mlp.down_proj.weight"))[5] = INFINITY;
  std::vector<int32_t> tokens = someTokens(32, 1), targets = someTokens(32, 2);

  exec->setCheckNumerics(true);
  Expected<EntryOutputs> failed = exec->run("train_step", tokens, targets, 1);
  ASSERT_FALSE(failed);
  const std::string &error = failed.error().message();
  EXPECT_NE(error.find("linear of model.layers.1.mlp.down_proj.weight at "
                       "model.layers.1.mlp.down_proj"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("in its result 0"), std::string::npos) << error;

  // Unchecked, the step runs and only the loss shows it.
  ASSERT_FALSE(exec->initialize(0));
  (*exec->state("model.layers.1.mlp.down_proj.weight"))[5] = INFINITY;
  exec->setCheckNumerics(false);
  Expected<EntryOutputs> out = exec->run("train_step", tokens, targets, 1);
  ASSERT_TRUE(out) << out.error();
  EXPECT_FALSE(std::isfinite(out->at("loss")[0]));
}

TEST(TrainingStep, SameThreadCountSameBits) {
  Plan plan = compileTiny();
  std::vector<int32_t> tokens = someTokens(32, 3), targets = someTokens(32, 4);
  cpu::setCpuThreads(2);
  std::vector<std::vector<float>> weights;
  for (int run = 0; run < 2; ++run) {
    Expected<std::unique_ptr<CpuExecutor>> created = CpuExecutor::create(plan);
    ASSERT_TRUE(created) << created.error();
    CpuExecutor *exec = created->get();
    ASSERT_FALSE(exec->initialize(7));
    for (int64_t step = 1; step <= 3; ++step) {
      Expected<EntryOutputs> out =
          exec->run("train_step", tokens, targets, step);
      ASSERT_TRUE(out) << out.error();
    }
    weights.push_back(*exec->state("model.layers.0.self_attn.q_proj.weight"));
  }
  cpu::setCpuThreads(1);
  EXPECT_EQ(0, std::memcmp(weights[0].data(), weights[1].data(),
                           weights[0].size() * sizeof(float)));
}

TEST(TrainingStep, LogitsEntryGivesTheEvalLoss) {
  // The loss recomputed in double from the `logits` entry's output equals
  // the `eval_loss` entry's loss: sampling sees the model that is trained.
  for (const char *policy : {"\"float32\"", "\"bfloat16\""}) {
    Plan plan = compileTiny({std::string("mixed_precision.param=") + policy});
    Expected<std::unique_ptr<CpuExecutor>> created = CpuExecutor::create(plan);
    ASSERT_TRUE(created) << created.error();
    CpuExecutor *exec = created->get();
    ASSERT_FALSE(exec->initialize(3));
    std::vector<int32_t> tokens = someTokens(32, 5), targets = someTokens(32, 9);
    Expected<EntryOutputs> loss = exec->run("eval_loss", tokens, targets, 1);
    ASSERT_TRUE(loss) << loss.error();
    Expected<EntryOutputs> logits = exec->run("logits", tokens, {}, 1);
    ASSERT_TRUE(logits) << logits.error();
    const std::vector<float> &z = logits->at("logits");
    const size_t vocab = 256;
    ASSERT_EQ(z.size(), tokens.size() * vocab);
    double total = 0;
    for (size_t t = 0; t < tokens.size(); ++t) {
      const float *row = z.data() + t * vocab;
      double top = *std::max_element(row, row + vocab), sum = 0;
      for (size_t v = 0; v < vocab; ++v)
        sum += std::exp(double(row[v]) - top);
      total += top + std::log(sum) - row[targets[t]];
    }
    EXPECT_NEAR(loss->at("loss")[0], total / tokens.size(), 2e-6) << policy;
  }
}
