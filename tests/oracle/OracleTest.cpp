// Kiln against LibTorch: the same model, weights and batch. Kiln runs its
// compiled plan on the CPU backend in fp32; the reference is an independent
// torch implementation in float64 (TorchLlama.cpp).
#include "TorchLlama.h"

#include "kiln/Driver/Session.h"
#include "kiln/Runtime/Cpu/CpuExecutor.h"
#include "kiln/Runtime/Cpu/CpuOps.h"
#include "kiln/Runtime/Train/Data.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace kiln;
using namespace kiln::runtime;

namespace {
struct Compiled {
  Config config;
  Plan plan;
};

Compiled compile(const std::string &model, std::vector<std::string> sets) {
  ModelSession session;
  EXPECT_TRUE(session.load(model, sets));
  std::optional<std::string> text = session.compilePlan();
  EXPECT_TRUE(text);
  Expected<Plan> plan = parsePlan(*text);
  EXPECT_TRUE(plan) << plan.error().message();
  return {*session.config, std::move(*plan)};
}

template <typename T>
double relativeError(const std::vector<T> &kiln,
                     const std::vector<double> &ref) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    diff += (kiln[i] - ref[i]) * (kiln[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  return std::sqrt(diff / norm);
}

/// One loss_and_grads run of Kiln's compiled plan on a fixed batch, with
/// what the reference needs to repeat it.
struct KilnRun {
  float loss = 0;
  std::map<std::string, std::vector<float>> grads; // by parameter name
  oracle::LlamaShape shape{};
  oracle::Tensors weights;
  std::vector<int32_t> tokens, targets;
  int64_t batch = 0, seq = 0;
};

KilnRun runKiln(const std::string &model, const std::vector<std::string> &sets) {
  KilnRun run;
  Compiled c = compile(model, sets);
  Expected<std::unique_ptr<CpuExecutor>> created = CpuExecutor::create(c.plan);
  EXPECT_TRUE(created) << created.error();
  if (!created)
    return run;
  CpuExecutor *exec = created->get();
  EXPECT_FALSE(exec->initialize(1234));

  run.batch = c.config.training.global_batch_size;
  run.seq = c.config.training.seq_len;
  Expected<std::vector<uint32_t>> tokens = loadTokens(kDefaultData, 256);
  EXPECT_TRUE(tokens) << tokens.error();
  if (!tokens)
    return run;
  run.tokens.resize(run.batch * run.seq);
  run.targets.resize(run.batch * run.seq);
  fillBatch(*tokens, 0, tokens->size(), run.batch, run.seq, 7, 0,
            run.tokens.data(), run.targets.data());

  Expected<EntryOutputs> out =
      exec->run("loss_and_grads", run.tokens, run.targets, 1);
  EXPECT_TRUE(out) << out.error();
  if (!out)
    return run;
  run.loss = out->at("loss")[0];
  for (auto &[name, values] : *out)
    if (name.rfind("grad:", 0) == 0)
      run.grads[name.substr(5)] = values;

  const ModelConfig &m = c.config.model;
  run.shape = {m.dim,        m.n_layers,  m.n_heads,
               m.kvHeads(),  m.vocab_size, m.ffnHiddenDim(),
               m.norm_eps,   m.rope_theta, m.tie_embeddings};
  for (const PlanValue &v : c.plan.values)
    if (v.kind == PlanValue::State && v.init.kind != InitSpec::Zeros) {
      std::vector<float> *w = exec->state(v.name);
      run.weights[v.name].assign(w->begin(), w->end());
    }
  return run;
}

oracle::LossAndGrads reference(const KilnRun &run,
                               oracle::Precision precision) {
  return oracle::lossAndGrads(run.shape, run.weights, run.tokens, run.targets,
                              run.batch, run.seq, precision);
}

/// The largest relative gradient error of `kiln` against `ref` (norm-wise,
/// per tensor), checking each tensor against `bound`.
double worstGradientError(const KilnRun &kiln, const oracle::LossAndGrads &ref,
                          double bound) {
  double worst = 0;
  EXPECT_EQ(kiln.grads.size(), ref.grads.size());
  for (const auto &[name, grad] : ref.grads) {
    auto it = kiln.grads.find(name);
    EXPECT_TRUE(it != kiln.grads.end()) << name;
    if (it == kiln.grads.end())
      continue;
    double e = relativeError(it->second, grad);
    worst = std::max(worst, e);
    EXPECT_LE(e, bound) << name;
  }
  return worst;
}

/// Loss and every gradient of Kiln fp32 against torch float64.
void checkAgainstTorch(const std::string &label, const std::string &model,
                       std::vector<std::string> sets) {
  sets.push_back("mixed_precision.param=\"float32\"");
  KilnRun kiln = runKiln(model, sets);
  ASSERT_FALSE(kiln.grads.empty());
  oracle::LossAndGrads ref = reference(kiln, oracle::Precision::Float64);
  double lossError = std::fabs(kiln.loss - ref.loss) / ref.loss;
  EXPECT_LE(lossError, 1e-5) << "loss " << kiln.loss << " vs " << ref.loss;
  double worst = worstGradientError(kiln, ref, 1e-5);
  std::printf("%s fp32 vs torch float64: loss %.6f (torch %.6f), worst "
              "gradient error %.2e over %zu tensors\n",
              label.c_str(), kiln.loss, ref.loss, worst, ref.grads.size());
}
} // namespace

TEST(Oracle, Llama3DebugMatchesTorchFloat64) {
  checkAgainstTorch("llama3-debug", "llama3-debug", {});
}

TEST(Oracle, SmallGqaTiedModelMatchesTorchFloat64) {
  checkAgainstTorch("small GQA tied", "llama3-debug",
                    {"model.dim=64", "model.n_layers=2", "model.n_heads=8",
                     "model.n_kv_heads=2", "model.tie_embeddings=true",
                     "training.seq_len=32", "training.global_batch_size=3"});
}

// The default policy (bf16 compute, f32 gradients and master weights)
// against torch in fp32 rounding to bf16 at the same cast points, and
// against Kiln fp32 (it must differ, or no rounding happened).
//
// Bounds: a value that rounds differently (a last-bit difference before
// the rounding) moves by one bf16 ulp, 2^-8 relative, and the flips feed
// every later rounding. So two correct fp32 implementations of the policy
// agree to a few 1e-3, not to the bit, and the test measures that floor:
// torch fp32 against the same cast points with float64 arithmetic between
// them. Measured on this model: torch fp32 is 2.4e-3 from that run (worst
// gradient tensor), Kiln 2.4e-3 from it and 2.6e-3 from torch fp32; loss
// within 2e-6; every tensor about 2x closer to the rounding reference than
// to Kiln fp32 and at least 3.8e-3 away from Kiln fp32. Asserted: Kiln
// within 4e-3 of torch fp32, and no further from the float64-arithmetic run
// than 1.5x torch fp32 is.
//
// The embedding's gradient is summed in f32 from the bf16 incoming gradient
// and not rounded after (embedding_grad writes the f32 gradient; a tied
// output projection's bf16 gradient is added in f32). Measured: Kiln 4.3e-4
// from the float64-arithmetic run, torch fp32 3.9e-4; rounding Kiln's to
// bf16, as the policy did before, puts it 1.7e-3 away (4.5x), and against
// the float64 gradient with no rounding anywhere Kiln's is 4.31e-3 away
// where the rounded one is 4.62e-3. Asserted: within 2x torch fp32's
// distance.
TEST(Oracle, Bf16PolicyMatchesTorchRoundingAtTheSameCastPoints) {
  KilnRun bf16 = runKiln("llama3-debug", {});
  KilnRun fp32 = runKiln("llama3-debug", {"mixed_precision.param=\"float32\""});
  ASSERT_FALSE(bf16.grads.empty());
  ASSERT_FALSE(fp32.grads.empty());
  oracle::LossAndGrads ref =
      reference(bf16, oracle::Precision::Float32RoundedToBf16);
  EXPECT_LE(std::fabs(bf16.loss - ref.loss) / ref.loss, 1e-5);
  double worst = worstGradientError(bf16, ref, 4e-3);

  // The noise floor: torch's own fp32 run against the same cast points with
  // float64 arithmetic between them, next to Kiln against the latter.
  oracle::LossAndGrads exact =
      reference(bf16, oracle::Precision::Float64RoundedToBf16);
  double torchFloor = 0, kilnFromExact = 0;
  for (const auto &[name, grad] : exact.grads) {
    torchFloor = std::max(torchFloor, relativeError(ref.grads.at(name), grad));
    kilnFromExact =
        std::max(kilnFromExact, relativeError(bf16.grads.at(name), grad));
  }
  std::printf("against float64 arithmetic rounded at the cast points: torch "
              "fp32 %.2e, Kiln %.2e (worst gradient tensors)\n",
              torchFloor, kilnFromExact);
  EXPECT_LE(kilnFromExact, 1.5 * torchFloor);
  const std::string embed = "model.embed_tokens.weight";
  double embedTorch = relativeError(ref.grads.at(embed), exact.grads.at(embed));
  double embedKiln = relativeError(bf16.grads.at(embed), exact.grads.at(embed));
  std::printf("the embedding's gradient against the same: torch fp32 %.2e, "
              "Kiln %.2e\n",
              embedTorch, embedKiln);
  EXPECT_LE(embedKiln, 2 * embedTorch);

  double closest = INFINITY, worstRatio = INFINITY;
  for (const auto &[name, grad] : fp32.grads) {
    std::vector<double> asDouble(grad.begin(), grad.end());
    double fromFp32 = relativeError(bf16.grads.at(name), asDouble);
    double fromRef = relativeError(bf16.grads.at(name), ref.grads.at(name));
    EXPECT_GT(fromFp32, 1.5 * fromRef)
        << name << ": Kiln bf16 is not closer to the bf16 reference than to "
        << "Kiln fp32";
    EXPECT_GT(fromFp32, 2e-3) << name << ": bf16 and fp32 gradients are too "
                              << "close; is the rounding applied?";
    closest = std::min(closest, fromFp32);
    worstRatio = std::min(worstRatio, fromFp32 / fromRef);
  }
  std::printf("llama3-debug bf16 vs torch fp32 rounding at the cast points: "
              "loss %.6f (torch %.6f), worst gradient error %.2e; distance "
              "from Kiln fp32 at least %.2e and %.1fx the error\n",
              bf16.loss, ref.loss, worst, closest, worstRatio);
}

// The default policy on a tied model: the embedding's gradient is the
// output projection's (a GEMM result, bf16) plus the lookup's (f32), added
// in f32 and not rounded after. Against torch rounding at the same cast
// points, as above. Measured: Kiln's embedding gradient 4.7e-4 from the
// float64-arithmetic run, torch fp32 3.2e-4 (1.5x); Kiln's rounded to bf16
// would be 1.7e-3 away (5.4x). Asserted: within 2x torch fp32's distance.
TEST(Oracle, Bf16PolicyTiedEmbeddingMatchesTorchRounding) {
  KilnRun bf16 = runKiln(
      "llama3-debug", {"model.dim=64", "model.n_layers=2", "model.n_heads=8",
                       "model.n_kv_heads=2", "model.tie_embeddings=true",
                       "training.seq_len=32", "training.global_batch_size=3"});
  ASSERT_FALSE(bf16.grads.empty());
  oracle::LossAndGrads ref =
      reference(bf16, oracle::Precision::Float32RoundedToBf16);
  oracle::LossAndGrads exact =
      reference(bf16, oracle::Precision::Float64RoundedToBf16);
  EXPECT_LE(std::fabs(bf16.loss - ref.loss) / ref.loss, 1e-5);
  const std::string embed = "model.embed_tokens.weight";
  double embedTorch = relativeError(ref.grads.at(embed), exact.grads.at(embed));
  double embedKiln = relativeError(bf16.grads.at(embed), exact.grads.at(embed));
  std::printf("tied embedding gradient against float64 arithmetic rounded at "
              "the cast points: torch fp32 %.2e, Kiln %.2e\n",
              embedTorch, embedKiln);
  EXPECT_LE(embedKiln, 2 * embedTorch);
}

// AdamW with clipping and warm-up: Kiln's ops against torch::optim::AdamW
// after clip_grad_norm_, fed the same gradients for 5 steps.
TEST(Oracle, AdamWWithClippingMatchesTorch) {
  const int64_t n = 1000;
  std::vector<float> param(n), m(n, 0.0f), v(n, 0.0f);
  oracle::Tensors start;
  for (int64_t i = 0; i < n; ++i)
    param[i] = std::sin(0.37 * i);
  start["w"].assign(param.begin(), param.end());

  PlanStep adamw{"adamw", plan::Op::AdamW};
  adamw.attrs = {{"beta1", 0.9},        {"beta2", 0.95},
                 {"eps", 1e-8},         {"weight_decay", 0.1},
                 {"max_norm", 1.0}};
  PlanStep norm{"grad_norm", plan::Op::GradNorm};
  PlanStep schedule{"lr_schedule", plan::Op::LrSchedule};
  schedule.attrs = {{"peak", 1e-2},
                    {"min_lr", 1e-3},
                    {"warmup_steps", int64_t(3)},
                    {"total_steps", int64_t(5)},
                    {"decay", std::string("cosine")}};

  std::vector<oracle::Tensors> grads;
  std::vector<double> rates;
  std::vector<std::vector<float>> kilnAfter;
  for (int64_t t = 1; t <= 5; ++t) {
    // Gradients large enough that clipping acts on some steps only.
    std::vector<float> g(n);
    for (int64_t i = 0; i < n; ++i)
      g[i] = (t % 2 ? 0.2f : 0.01f) * std::cos(0.11 * i * t);
    grads.push_back({{"w", std::vector<double>(g.begin(), g.end())}});

    float normValue = 0, lr = 0;
    int64_t stepValue = t;
    View gv{g.data(), DType::F32, {n}};
    View normView{&normValue, DType::F32, {}};
    View lrView{&lr, DType::F32, {}};
    View stepView{&stepValue, DType::I64, {}};
    ASSERT_FALSE(findCpuOp(plan::Op::GradNorm)(norm, {gv}, {normView}));
    ASSERT_FALSE(
        findCpuOp(plan::Op::LrSchedule)(schedule, {stepView}, {lrView}));
    // Linear warm-up over 3 steps, then cosine from the peak to min_lr at
    // step 5, in fp64 here.
    double expected = t <= 3 ? 1e-2 * t / 3.0
                             : 1e-3 + (1e-2 - 1e-3) * 0.5 *
                                          (1.0 + std::cos(M_PI * (t - 3) / 2.0));
    ASSERT_NEAR(lr, expected, 1e-9) << "learning rate at step " << t;
    rates.push_back(lr);
    View p{param.data(), DType::F32, {n}}, mv{m.data(), DType::F32, {n}},
        vv{v.data(), DType::F32, {n}};
    ASSERT_FALSE(findCpuOp(plan::Op::AdamW)(
        adamw, {p, gv, mv, vv, normView, lrView, stepView}, {p, mv, vv}));
    kilnAfter.push_back(param);
  }
  std::vector<oracle::Tensors> torchAfter = oracle::adamw(
      start, grads, rates, {0.9, 0.95, 1e-8, 0.1, 1.0});
  for (int t = 0; t < 5; ++t)
    for (int64_t i = 0; i < n; ++i)
      ASSERT_NEAR(kilnAfter[t][i], torchAfter[t].at("w")[i],
                  1e-8 + 1e-6 * std::fabs(torchAfter[t].at("w")[i]))
          << "step " << t + 1 << " element " << i;
}
