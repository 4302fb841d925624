//===- kiln-run.cpp - The runtime alone, without the compiler -------------===//
//
//   kiln-run --devices            the devices this build can run plans on
//   kiln-run PLAN --describe      what a plan holds
//   kiln-run PLAN [options]       train with the plan (kiln/Runtime/Train/Trainer.h)
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Comm/Communicator.h"
#include "kiln/Runtime/Cpu/CpuExecutor.h"
#include "kiln/Runtime/Devices.h"
#include "kiln/Runtime/Executor.h"
#include "kiln/Runtime/Plan.h"
#include "kiln/Runtime/Train/Signals.h"
#include "kiln/Runtime/Train/Trainer.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <iomanip>
#include <iostream>
#include <algorithm>
#include <map>
#include <optional>
#include <vector>

using namespace kiln::runtime;

namespace {
void describe(const Plan &plan) {
  auto mib = [](int64_t bytes) { return bytes / (1024.0 * 1024.0); };
  int64_t states = 0, params = 0;
  for (const PlanValue &v : plan.values)
    if (v.kind == PlanValue::State) {
      ++states;
      params += v.init.kind != InitSpec::Zeros ? v.numElements() : 0;
    }
  std::cout << std::fixed << std::setprecision(1) << "plan version "
            << plan.version << ", vocab " << plan.vocabSize << ", mesh ";
  if (plan.mesh.pp > 1)
    std::cout << plan.mesh.pp << " x ";
  std::cout << plan.mesh.dpShard << " x " << plan.mesh.tp
            << (plan.mesh.pp > 1 ? " (pp x dp_shard x tp; pp position " +
                                       std::to_string(plan.ppIndex) + ")"
                                 : std::string(" (dp_shard x tp)"))
            << "\n"
            << "state: " << states << " tensors, " << mib(plan.stateBytes)
            << " MiB (" << params << " parameters)\n"
            << "arena: " << mib(plan.arenaBytes) << " MiB\n";
  for (const auto &[name, entry] : plan.entries) {
    std::map<std::string, int> ops;
    for (const PlanStep &step : entry.steps)
      ++ops[step.op];
    std::cout << name << ": " << entry.steps.size() << " steps, arena "
              << mib(entry.arenaBytes) << " MiB;";
    for (const auto &[op, count] : ops)
      std::cout << " " << op << " " << count;
    std::cout << "\n";
  }
  // What the CPU backend really allocates for this plan.
  if (Expected<std::unique_ptr<CpuExecutor>> exec = CpuExecutor::create(plan))
    std::cout << "allocated by the CPU executor: " << (*exec)->allocatedBytes()
              << " bytes\n";
  else
    std::cout << "the CPU executor cannot run it: " << exec.error().message()
              << "\n";
}

constexpr const char *kUsage =
    "usage: kiln-run --devices          list the devices this build can run "
    "plans on\n"
    "       kiln-run PLAN --describe    what a plan holds\n"
    "       kiln-run PLAN [--steps N] [--data PATH] [--out DIR] [--resume "
    "DIR]\n"
    "                     [--threads N] [--seed N] [--trace FILE]\n"
    "                     [--no-check-numerics] [--backend cpu|cuda]\n"
    "                     [--overwrite] (replace an earlier run in --out)\n"
    "                     [--no-final-checkpoint] (for benchmarks)\n"
    "                     [--no-cuda-graphs] [--comm-timeout SECONDS]\n"
    "                                   train with a compiled plan (defaults: "
    "the\n"
    "                                   plan's training section; --out "
    "runs/plan)\n";

/// An integer option value in [lo, hi], or nothing after printing why
/// (digits only: no sign games, no wrap past int64).
std::optional<int64_t> count(const char *flag, const char *text, int64_t lo,
                             int64_t hi) {
  char *end = nullptr;
  errno = 0;
  long long v = std::strtoll(text, &end, 10);
  if (!*text || *end || errno == ERANGE || v < lo || v > hi) {
    std::cerr << "error: " << flag << " expects an integer in [" << lo << ", "
              << hi << "], got '" << text << "'\n";
    return std::nullopt;
  }
  return v;
}

int train(const Plan &plan, int argc, char **argv) {
  installStopHandlers();
  TrainOptions options;
  options.training = plan.training;
  options.outDir = "runs/plan";
  options.title = std::string("kiln-run: ") + argv[1] + ", ";
  options.progressBar = isatty(STDOUT_FILENO);
  for (int i = 2; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--no-check-numerics") {
      options.checkNumerics = false;
      continue;
    }
    if (flag == "--no-cuda-graphs") {
      options.cudaGraphs = false;
      continue;
    }
    if (flag == "--overwrite") {
      options.overwrite = true;
      continue;
    }
    if (flag == "--no-final-checkpoint") {
      options.finalCheckpoint = false;
      continue;
    }
    static const char *withValue[] = {"--steps",   "--data", "--out",
                                      "--resume",  "--threads", "--seed",
                                      "--trace", "--backend",
                                      "--comm-timeout"};
    if (std::find(std::begin(withValue), std::end(withValue), flag) ==
        std::end(withValue)) {
      std::cerr << "error: unknown option '" << flag << "' (see kiln-run --help)\n";
      return 1;
    }
    if (i + 1 >= argc) {
      std::cerr << "error: " << flag << " needs a value\n";
      return 1;
    }
    const char *value = argv[++i];
    if (flag == "--data") {
      options.training.data = value;
    } else if (flag == "--out") {
      options.outDir = value;
    } else if (flag == "--resume") {
      options.resume = value;
    } else if (flag == "--trace") {
      options.tracePath = value;
    } else if (flag == "--backend") {
      std::vector<std::string> built = executorBackends();
      if (std::find(built.begin(), built.end(), value) == built.end()) {
        std::cerr << "error: --backend expects "
                  << (built.size() > 1 ? "cpu or cuda" : "cpu (this build has "
                                                        "no CUDA backend)")
                  << ", got '" << value << "'\n";
        return 1;
      }
      options.backend = value;
    } else {
      // The ranges of the model file's keys (plan/Format.h).
      using namespace kiln::plan;
      int64_t lo = flag == "--seed" || flag == "--comm-timeout" ? 0 : 1;
      int64_t hi = flag == "--steps"          ? kMaxTrainingSteps
                   : flag == "--seed"         ? int64_t(1) << 53
                   : flag == "--comm-timeout" ? kMaxTimeoutSeconds
                                              : 1024;
      std::optional<int64_t> n = count(flag.c_str(), value, lo, hi);
      if (!n)
        return 1;
      if (flag == "--steps")
        options.training.steps = *n;
      else if (flag == "--seed")
        options.training.seed = *n;
      else if (flag == "--comm-timeout")
        options.training.commTimeoutSeconds = *n;
      else
        options.threads = static_cast<int>(*n);
    }
  }
  // Under mpirun: one rank of the run (the plan says how many there are).
  Expected<std::unique_ptr<comm::Communicator>> ranks =
      comm::createCommunicator();
  if (!ranks) {
    std::cerr << "error: " << ranks.error().message() << "\n";
    return 1;
  }
  return runTrainingOnRanks(plan, options, **ranks);
}

int usage() {
  std::cerr << "error: expected --devices, PLAN or PLAN --describe (see "
               "kiln-run --help)\n";
  return 1;
}
} // namespace

int main(int argc, char **argv) {
  if (argc == 2 && !std::strcmp(argv[1], "--devices")) {
    std::cout << formatDeviceReport(queryDevices());
    return 0;
  }
  if (argc == 2 && (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h"))) {
    std::cout << kUsage;
    return 0;
  }
  if (argc < 2 || argv[1][0] == '-')
    return usage();
  std::string error;
  Expected<Plan> plan = loadPlan(argv[1]);
  if (!plan) {
    std::cerr << "error: " << plan.error().message() << "\n";
    return 1;
  }
  if (argc == 3 && !std::strcmp(argv[2], "--describe")) {
    describe(*plan);
    return 0;
  }
  return train(*plan, argc, argv);
}
