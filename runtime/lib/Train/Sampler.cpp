//===- Sampler.cpp - Text from a trained model ----------------------------===//

#include "kiln/Runtime/Train/Sampler.h"
#include "kiln/Runtime/Train/Checkpoint.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>

namespace kiln::runtime {

namespace {
/// [batch, seq] of the entry's tokens input.
std::vector<int64_t> windowShape(const Plan &plan) {
  const PlanValue *tokens = plan.named(PlanValue::Input, "tokens");
  return tokens ? tokens->shape : std::vector<int64_t>{};
}
} // namespace

Error checkSamplingPlan(const Plan &plan) {
  const PlanEntry *entry = plan.entry("logits");
  if (!entry || !entry->outputs.count("logits"))
    return Error("the plan has no 'logits' entry (compile it with this kiln)");
  std::vector<int64_t> window = windowShape(plan);
  if (window.size() != 2 || window[0] != 1)
    return Error(
        "sampling needs a plan for batch 1 (training.global_batch_size "
        "= 1)");
  return Error::success();
}

Error loadWeightsForSampling(Executor &exec, const std::string &dir) {
  Expected<Checkpoint> c = loadModelWeights(dir);
  if (!c)
    return c.takeError();
  std::map<std::string, const CheckpointTensor *> byName;
  for (const CheckpointTensor &t : c->model)
    byName[t.name] = &t;
  for (const PlanValue &v : exec.plan().values) {
    if (v.kind != PlanValue::State || isOptimizerState(v.name))
      continue;
    auto it = byName.find(v.name);
    if (it == byName.end())
      return Error(dir + ": the checkpoint has no tensor '" + v.name + "'");
    const CheckpointTensor &t = *it->second;
    if (t.shape != v.shape)
      return Error(dir + ": tensor '" + v.name +
                   "' has another shape than the "
                   "model in config.toml");
    for (size_t e = 0; e < t.data.size(); ++e)
      if (!std::isfinite(t.data[e]))
        return Error(dir + ": tensor '" + v.name +
                     "' holds a non-finite value at "
                     "element " +
                     std::to_string(e));
  }
  // The other states (the optimizer's) keep what they hold; the logits
  // entry reads none of them.
  Expected<std::vector<FloatTensor>> current = exec.unshardedState();
  if (!current)
    return current.takeError();
  std::map<std::string, const FloatTensor *> all;
  for (const FloatTensor &t : *current)
    all[t.name] = byName.count(t.name) ? byName[t.name] : &t;
  if (Error problem = exec.setUnshardedState(all))
    return Error(dir + ": " + problem.message());
  return Error::success();
}

Expected<std::vector<int32_t>>
sampleTokens(Executor &exec, const std::vector<int32_t> &prompt,
             const SampleOptions &options,
             const std::function<void(int32_t)> &onToken) {
  const Plan &plan = exec.plan();
  if (Error problem = checkSamplingPlan(plan))
    return problem;
  if (prompt.empty()) {
    return Error("the prompt is empty");
  }
  const int64_t seq = windowShape(plan)[1];
  const int64_t vocab = plan.vocabSize;
  std::vector<int32_t> context = prompt, generated;
  std::mt19937_64 rng(options.seed);
  std::vector<int32_t> window(seq, 0), unused;
  std::vector<double> weights(vocab);
  std::vector<int32_t> order(vocab);
  for (int64_t n = 0; n < options.tokens; ++n) {
    int64_t len = std::min<int64_t>(context.size(), seq);
    std::copy(context.end() - len, context.end(), window.begin());
    std::fill(window.begin() + len, window.end(), 0);
    Expected<EntryOutputs> out = exec.run("logits", window, unused, 0);
    if (!out)
      return out.takeError();
    const float *logits = out->at("logits").data() + (len - 1) * vocab;

    int32_t next = 0;
    if (options.temperature <= 0) {
      next = static_cast<int32_t>(std::max_element(logits, logits + vocab) -
                                  logits);
    } else {
      std::iota(order.begin(), order.end(), 0);
      int64_t k = options.topK > 0 ? std::min(options.topK, vocab) : vocab;
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int32_t a, int32_t b) {
                          return logits[a] > logits[b] ||
                                 (logits[a] == logits[b] && a < b);
                        });
      double top = logits[order[0]];
      for (int64_t i = 0; i < k; ++i)
        weights[i] = std::exp((logits[order[i]] - top) / options.temperature);
      std::discrete_distribution<int64_t> pick(weights.begin(),
                                               weights.begin() + k);
      next = order[pick(rng)];
    }
    context.push_back(next);
    generated.push_back(next);
    if (onToken)
      onToken(next);
  }
  return generated;
}

} // namespace kiln::runtime
