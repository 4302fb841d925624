//===- HfOracle.cpp - Kiln's loss and logits from given weights -----------===//
//
// kiln-hf-oracle MODEL WEIGHTS TOKENS [--set KEY=VALUE]...
//
// Compiles MODEL, starts from WEIGHTS as `[checkpoint] initial_load_path`
// does (startFromPretrained: a Hugging Face model folder or a .safetensors
// file) and prints, as one JSON object, the eval entry's loss and the
// logits entry's logits on TOKENS (a text file of seq_len + 1 token ids:
// the inputs and, shifted by one, the targets). tests/CLI/hf-oracle.test
// compares them with transformers' on the same weights and tokens.
//
//===----------------------------------------------------------------------===//

#include "kiln/Driver/Session.h"
#include "kiln/Runtime/Cpu/CpuExecutor.h"
#include "kiln/Runtime/Train/Trainer.h"

#include <cstdio>
#include <cstring>
#include <fstream>

using namespace kiln;
using namespace kiln::runtime;

namespace {
int fail(const std::string &why) {
  std::fprintf(stderr, "error: %s\n", why.c_str());
  return 1;
}
} // namespace

int main(int argc, char **argv) {
  if (argc < 4)
    return fail("usage: kiln-hf-oracle MODEL WEIGHTS TOKENS [--set K=V]...");
  std::vector<std::string> sets;
  for (int i = 4; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--set") != 0)
      return fail(std::string("unknown argument '") + argv[i] + "'");
    sets.push_back(argv[i + 1]);
  }
  ModelSession session;
  if (!session.load(argv[1], sets))
    return 1;
  std::optional<std::string> text = session.compilePlan();
  if (!text)
    return 1;
  Expected<Plan> plan = parsePlan(*text);
  if (!plan)
    return fail(plan.error().message());
  int64_t seq = session.config->training.seq_len;
  if (session.config->training.global_batch_size != 1)
    return fail("the model must train on one sequence a step");

  std::ifstream in(argv[3]);
  std::vector<int32_t> ids;
  for (int32_t id; in >> id;)
    ids.push_back(id);
  if (int64_t(ids.size()) != seq + 1)
    return fail(std::string(argv[3]) + ": expected " + std::to_string(seq + 1) +
                " token ids");
  std::vector<int32_t> tokens(ids.begin(), ids.end() - 1),
      targets(ids.begin() + 1, ids.end()), none;

  Expected<std::unique_ptr<CpuExecutor>> exec = CpuExecutor::create(*plan);
  if (!exec)
    return fail(exec.error().message());
  if (Error e = (*exec)->initialize(0))
    return fail(e.message());
  if (Error e = startFromPretrained(*plan, **exec, nullptr, argv[2]))
    return fail(e.message());
  Expected<EntryOutputs> loss = (*exec)->run("eval_loss", tokens, targets, 1);
  if (!loss)
    return fail(loss.error().message());
  Expected<EntryOutputs> logits = (*exec)->run("logits", tokens, none, 0);
  if (!logits)
    return fail(logits.error().message());
  std::printf("{\"loss\": %.9g, \"logits\": [", loss->at("loss")[0]);
  const std::vector<float> &l = logits->at("logits");
  for (size_t i = 0; i < l.size(); ++i)
    std::printf("%s%.9g", i ? ", " : "", l[i]);
  std::printf("]}\n");
  return 0;
}
