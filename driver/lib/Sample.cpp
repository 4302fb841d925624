//===- Sample.cpp - `kiln sample`: text from a checkpoint -----------------===//
//
// The model comes back from the checkpoint's config.toml, compiled (cached)
// for a batch of one; the weights from its model.safetensors. The prompt is
// encoded as bytes (a byte-level model, vocabulary 256), or with
// --tokenizer by the tokenizer the model was trained with, after its
// document separator as kiln tokenize puts one before each document.
//
//===----------------------------------------------------------------------===//

#include "kiln/Driver/Driver.h"
#include "kiln/Driver/Session.h"
#include "kiln/Driver/Tokenizer.h"
#include "kiln/Runtime/Cpu/Common.h"
#include "kiln/Runtime/Cpu/CpuExecutor.h"
#include "kiln/Runtime/Train/Checkpoint.h"
#include "kiln/Runtime/Train/Sampler.h"
#include "kiln/Runtime/Train/Trainer.h"

#include <cmath>

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>

using namespace kiln;
using namespace kiln::runtime;


int kiln::runSample(const SampleCommand &command) {
  if (command.prompt.empty())
    return commandError("--prompt must not be empty");
  if (!(command.temperature >= 0) || !std::isfinite(command.temperature))
    return commandError("--temperature must be a finite number of 0 or more "
                        "(0 picks the likeliest byte)");

  // A checkpoint folder, a folder of step-N checkpoints, or a run folder.
  // Only complete folders count, with the config.toml the model comes from.
  Expected<std::string> dir = findCheckpoint(
      command.checkpoint, "checkpoints", {kModelCheckpointFile, "config.toml"});
  if (!dir)
    return commandError(dir.error().message());
  std::string configPath = *dir + "/config.toml";
  if (!llvm::sys::fs::exists(configPath))
    return commandError(*dir + " has no config.toml (the model to sample from)");

  std::vector<std::string> overrides = {"training.global_batch_size=1",
                                        "training.local_batch_size=1"};
  ModelSession session;
  if (!session.load(configPath, overrides))
    return 1;
  bool hit = false;
  std::optional<Plan> plan = session.cachedRuntimePlan(overrides, hit);
  if (!plan)
    return 1;
  if (Error problem = checkSamplingPlan(*plan))
    return commandError(problem.message());
  std::unique_ptr<Tokenizer> tokenizer;
  if (!command.tokenizer.empty()) {
    Expected<std::unique_ptr<Tokenizer>> opened =
        Tokenizer::open(command.tokenizer);
    if (!opened)
      return commandError(opened.error().message());
    tokenizer = std::move(*opened);
    if (tokenizer->vocabSize() > plan->vocabSize)
      return commandError("the tokenizer has " +
                          std::to_string(tokenizer->vocabSize()) +
                          " tokens, more than the model's vocabulary of " +
                          std::to_string(plan->vocabSize) +
                          ": not the tokenizer it was "
                          "trained with");
  } else if (plan->vocabSize != 256) {
    return commandError("kiln sample encodes the prompt as bytes, but this "
                        "model's vocabulary has " +
                        std::to_string(plan->vocabSize) +
                        " tokens, not 256; name its tokenizer with "
                        "--tokenizer");
  }
  if (command.threads > 0)
    cpu::setCpuThreads(command.threads);
  Expected<std::unique_ptr<CpuExecutor>> created = CpuExecutor::create(*plan);
  if (!created)
    return commandError(created.error().message());
  CpuExecutor *exec = created->get();
  // A NaN or an infinity stops sampling at the op that made it, as in
  // training, instead of printing junk.
  exec->setCheckNumerics(true);
  if (Error problem = loadWeightsForSampling(*exec, *dir))
    return commandError(problem.message());

  std::vector<int32_t> prompt;
  if (tokenizer) {
    if (firstInvalidUtf8(command.prompt))
      return commandError("--prompt is not UTF-8 text");
    std::string name;
    Expected<std::optional<uint32_t>> separator =
        tokenizer->documentSeparator(std::nullopt, name);
    if (!separator)
      return commandError(command.tokenizer + ": " +
                          separator.error().message());
    Expected<std::vector<std::vector<uint32_t>>> ids =
        tokenizer->encode({command.prompt}, false);
    if (!ids)
      return commandError(command.tokenizer + ": " + ids.error().message());
    if (*separator)
      prompt.push_back(static_cast<int32_t>(**separator));
    prompt.insert(prompt.end(), ids->front().begin(), ids->front().end());
  } else {
    for (unsigned char c : command.prompt)
      prompt.push_back(c);
  }
  SampleOptions options;
  options.tokens = command.tokens;
  options.temperature = command.temperature;
  options.topK = command.topK;
  options.seed = command.seed;
  std::fwrite(command.prompt.data(), 1, command.prompt.size(), stdout);
  std::fflush(stdout);
  // With a tokenizer the new tokens are decoded together and what is new
  // printed, once it no longer ends in an incomplete character (U+FFFD).
  std::vector<uint32_t> drawnIds;
  std::string printed;
  Error decodeFailure;
  auto flushText = [&](bool last) {
    Expected<std::string> text = tokenizer->decode(drawnIds);
    if (!text) {
      decodeFailure = text.takeError();
      return;
    }
    static const std::string replacement = "\xef\xbf\xbd";
    bool partial = text->size() >= 3 &&
                   text->compare(text->size() - 3, 3, replacement) == 0;
    if ((partial && !last) || text->compare(0, printed.size(), printed) != 0)
      return;
    std::fwrite(text->data() + printed.size(), 1, text->size() - printed.size(),
                stdout);
    printed = *text;
  };
  auto print = [&](int32_t token) {
    if (tokenizer) {
      drawnIds.push_back(static_cast<uint32_t>(token));
      if (!decodeFailure)
        flushText(false);
    } else {
      std::fputc(token, stdout);
    }
    std::fflush(stdout);
  };
  if (Expected<std::vector<int32_t>> drawn =
          sampleTokens(*exec, prompt, options, print);
      !drawn) {
    std::fputc('\n', stdout);
    std::fflush(stdout);
    return commandError(drawn.error().message());
  }
  if (tokenizer && !decodeFailure)
    flushText(true);
  std::fputc('\n', stdout);
  if (decodeFailure)
    return commandError(command.tokenizer + ": " + decodeFailure.message());
  return 0;
}
