//===- Sampler.h - Text from a trained model --------------------*- C++ -*-===//
//
// Autoregressive sampling with the plan's `logits` entry. The entry takes a
// fixed [1, seq] window: the context sits at its start (the last seq tokens
// when longer), the rest is padding that causal attention keeps from
// influencing the positions before it, and the next token is drawn from the
// logits of the context's last position.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_TRAIN_SAMPLER_H
#define KILN_RUNTIME_TRAIN_SAMPLER_H

#include "kiln/Runtime/Executor.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kiln::runtime {

struct SampleOptions {
  int64_t tokens = 200;     // how many to generate
  double temperature = 0.8; // 0: always the most likely token
  int64_t topK = 0;         // draw among the k most likely; 0: all
  uint64_t seed = 0;
};

/// Checks that `plan` has a `logits` entry over a [1, seq] window and that
/// the executor holds weights; fails saying what is wrong.
Error checkSamplingPlan(const Plan &plan);

/// Loads the model weights of the checkpoint in `dir` into `exec` (any
/// backend), checking that every parameter of the plan is there with its
/// shape and finite. The plan's parameters must be unsharded.
Error loadWeightsForSampling(Executor &exec, const std::string &dir);

/// Draws `options.tokens` tokens after `prompt` (not empty, every id below
/// the vocabulary size), calling `onToken` with each as soon as it is
/// drawn. Returns the new tokens, or the error that stopped the drawing.
Expected<std::vector<int32_t>>
sampleTokens(Executor &exec, const std::vector<int32_t> &prompt,
             const SampleOptions &options,
             const std::function<void(int32_t)> &onToken);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_TRAIN_SAMPLER_H
