//===- Train.cpp - `kiln train`: compile, then run training steps ---------===//
//
// The compiled plan comes from the on-disk cache
// (ModelSession::cachedRuntimePlan).
// The loop itself (data, steps,
// validation, checkpoints, the loss curve) is the runtime's
// (kiln/Runtime/Trainer.h), the same that `kiln-run PLAN` runs.
//
//===----------------------------------------------------------------------===//

#include "kiln/Compiler/Driver.h"
#include "kiln/Compiler/Session.h"
#include "kiln/Plan/PlanEmitter.h"
#include "kiln/Frontend/ConfigParser.h"
#include "kiln/Runtime/Comm/Communicator.h"
#include "kiln/Runtime/Signals.h"
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
  // Ctrl-C while compiling ends the process with a line; in the training
  // loop it saves a checkpoint first.
  installStopHandlers();
  std::vector<std::string> overrides = command.overrides;
  if (command.steps > 0)
    overrides.push_back("training.steps=" + std::to_string(command.steps));
  if (!command.data.empty())
    overrides.push_back("training.data=\"" + command.data + "\"");
  // Under mpirun, one rank of an FSDP run over every rank.
  std::string error;
  std::unique_ptr<comm::Communicator> ranks = comm::createCommunicator(error);
  if (!ranks)
    return commandError(error);
  ModelSession session;
  if (!session.load(command.model, overrides))
    return 1;
  // As written: checkpoints say "all ranks", not this run's count.
  std::string configText = renderConfigToml(*session.config);
  if (!session.setRanks(ranks->size()))
    return 1;

  bool hit = false;
  auto start = std::chrono::steady_clock::now();
  std::optional<Plan> plan = session.cachedRuntimePlan(overrides, hit);
  if (!plan)
    return 1;
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
  options.overwrite = command.overwrite;
  options.configText = configText;
  options.threads = command.threads;
  options.checkNumerics = command.checkNumerics;
  options.progressBar = isatty(STDOUT_FILENO);
  char title[256];
  std::snprintf(title, sizeof title, "kiln train: %s, plan %s in %.2f s, ",
                session.source->name.c_str(), hit ? "from cache" : "compiled",
                compileSeconds);
  options.title = title;
  options.tracePath = command.trace;
  options.backend = command.backend;
  options.cudaGraphs = command.cudaGraphs;
  return runTrainingOnRanks(*plan, options, *ranks);
}
