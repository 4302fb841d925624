//===- Train.cpp - `kiln train`: compile, then run training steps ---------===//
//
// The compiled plan comes from the on-disk cache (ModelSession::cachedPlan).
// The loop itself (data, steps,
// validation, checkpoints, the loss curve) is the runtime's
// (kiln/Runtime/Trainer.h), the same that `kiln-run PLAN` runs.
//
//===----------------------------------------------------------------------===//

#include "kiln/Compiler/Driver.h"
#include "kiln/Compiler/Session.h"
#include "kiln/Plan/PlanEmitter.h"
#include "kiln/Frontend/ConfigParser.h"
#include "kiln/Runtime/Trainer.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <unistd.h>

using namespace kiln;
using namespace kiln::runtime;


int kiln::runTrain(const TrainCommand &command) {
  std::vector<std::string> overrides = command.overrides;
  if (command.steps > 0)
    overrides.push_back("training.steps=" + std::to_string(command.steps));
  if (!command.data.empty())
    overrides.push_back("training.data=\"" + command.data + "\"");
  ModelSession session;
  if (!session.load(command.model, overrides))
    return 1;
  const Config &config = *session.config;

  bool hit = false;
  auto start = std::chrono::steady_clock::now();
  std::optional<std::string> planText = session.cachedPlan(overrides, hit);
  if (!planText)
    return 1;
  std::string error;
  std::optional<Plan> plan = parsePlan(*planText, error);
  if (!plan)
    return commandError("internal: the compiled plan does not load: " + error);
  double compileSeconds = std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - start)
                              .count();

  TrainOptions options;
  options.training = plan->training;
  options.outDir =
      command.out.empty()
          ? "runs/" + llvm::sys::path::stem(session.source->name).str()
          : command.out;
  options.resume = command.resume;
  options.configText = renderConfigToml(config);
  options.threads = command.threads;
  options.checkNumerics = command.checkNumerics;
  options.progressBar = isatty(STDOUT_FILENO);
  char title[256];
  std::snprintf(title, sizeof title, "kiln train: %s, plan %s in %.2f s, ",
                session.source->name.c_str(), hit ? "from cache" : "compiled",
                compileSeconds);
  options.title = title;
  return runTraining(*plan, options);
}
