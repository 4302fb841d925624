//===- Train.cpp - `kiln train`: compile, then run training steps ---------===//
//
// The compiled plan comes from the on-disk cache
// (ModelSession::cachedRuntimePlan).
// The loop itself (data, steps,
// validation, checkpoints, the loss curve) is the runtime's
// (kiln/Runtime/Train/Trainer.h), the same that `kiln-run PLAN` runs.
//
//===----------------------------------------------------------------------===//

#include "kiln/Driver/Driver.h"
#include "kiln/Driver/PerfModel.h"
#include "kiln/Driver/Predict.h"
#include "kiln/Driver/Session.h"
#include "kiln/Frontend/ConfigParser.h"
#include "kiln/Frontend/ConfigSchema.h"
#include "kiln/Plan/PlanEmitter.h"
#include "kiln/Runtime/Comm/Communicator.h"
#include "kiln/Runtime/Devices.h"
#include "kiln/Runtime/Train/Signals.h"
#include "kiln/Runtime/Train/Trainer.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <map>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <unistd.h>

using namespace kiln;
using namespace kiln::runtime;


namespace {
/// `section.key` -> value, from a rendered model file.
std::map<std::string, std::string> renderedKeys(const std::string &toml) {
  std::map<std::string, std::string> keys;
  std::istringstream lines(toml);
  std::string line, section;
  while (std::getline(lines, line)) {
    if (line.size() > 2 && line.front() == '[' && line.back() == ']')
      section = line.substr(1, line.size() - 2);
    size_t eq = line.find(" = ");
    if (!line.empty() && line[0] != '#' && eq != std::string::npos)
      keys[section + "." + line.substr(0, eq)] = line.substr(eq + 3);
  }
  return keys;
}

/// Why the checkpoint `resume` names was trained with another model than
/// `configText` describes (the keys mustMatchOnResume lists), or nothing;
/// nothing too when it has no config.toml (a kiln-run checkpoint), which the
/// runtime's shape check then covers alone.
Error resumeMismatch(const std::string &resume, const std::string &folder,
                     const std::string &configText) {
  Expected<std::string> dir = findCheckpoint(resume, folder);
  if (!dir || !llvm::sys::fs::exists(*dir + "/config.toml"))
    return Error::success();
  ModelSession saved;
  if (!saved.load(*dir + "/config.toml", {}))
    return Error("cannot resume: " + *dir + "/config.toml does not load");
  std::map<std::string, std::string> was =
      renderedKeys(renderConfigToml(*saved.config));
  std::map<std::string, std::string> now = renderedKeys(configText);
  std::string differences;
  for (const KeySpec &spec : configSchema()) {
    if (!mustMatchOnResume(spec))
      continue;
    std::string key = std::string(spec.section) + "." + spec.key;
    std::string a = was.count(key) ? was[key] : "unset";
    std::string b = now.count(key) ? now[key] : "unset";
    if (a != b)
      differences += (differences.empty() ? "" : ", ") + key + " " + a +
                     " in the checkpoint, " + b + " now";
  }
  if (differences.empty())
    return Error::success();
  return Error("cannot resume from " + *dir +
               ": it was trained with another "
               "model (" +
               differences +
               "); resume with the model it was trained "
               "with, or start a new run");
}
} // namespace

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
  Expected<std::unique_ptr<comm::Communicator>> created =
      comm::createCommunicator();
  if (!created)
    return commandError(created.error().message());
  std::unique_ptr<comm::Communicator> ranks = *std::move(created);
  ModelSession session;
  if (!session.load(command.model, overrides, ranks->size(), ranks->rank()))
    return 1;
  // As written: checkpoints say "all ranks", not this run's count (the
  // mesh is Config::mesh, never written back into the keys).
  std::string configText = renderConfigToml(*session.config);
  if (!command.resume.empty())
    if (Error why = resumeMismatch(
            command.resume, session.config->checkpoint.folder, configText))
      return commandError(why.message());

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
  const CheckpointConfig &checkpoint = session.config->checkpoint;
  options.initialLoad = checkpoint.initial_load_path;
  options.initialLoadModelOnly = checkpoint.initial_load_model_only;
  options.overwrite = command.overwrite;
  options.configText = configText;
  options.threads = command.threads;
  options.cpuGemm = command.cpuGemm;
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
  const MetricsConfig &metrics = session.config->metrics;
  options.modelFlopsPerToken = modelFlopsPerToken(*session.config);
  if (metrics.peak_tflops > 0) {
    options.peakTflops = metrics.peak_tflops;
    options.peakSource = "metrics.peak_tflops";
  } else if (command.backend == "cuda") {
    // Every GPU of a node is taken to be the first one's kind.
    DeviceReport devices = queryDevices();
    if (!devices.cudaDevices.empty())
      if (std::optional<perf::Hardware> hw =
              perf::hardwareOfCudaDevice(devices.cudaDevices[0].name)) {
        options.peakTflops = hw->bf16Tflops;
        options.peakSource = hw->name + "'s dense BF16 peak";
      }
  }
  if (metrics.enable_tensorboard)
    options.tensorBoardDir =
        llvm::sys::path::is_absolute(metrics.save_tb_folder)
            ? metrics.save_tb_folder
            : options.outDir + "/" + metrics.save_tb_folder;
  return runTrainingOnRanks(*plan, options, *ranks);
}
