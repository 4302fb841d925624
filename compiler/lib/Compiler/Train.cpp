//===- Train.cpp - `kiln train`: compile, then run training steps ---------===//
//
// The compiled plan is cached on disk, keyed by the model text, the
// overrides and the build's git hash. The loop itself (data, steps,
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

#ifndef KILN_GIT_HASH
#define KILN_GIT_HASH "unknown"
#endif

using namespace kiln;
using namespace kiln::runtime;

namespace {
int fail(const std::string &message) {
  llvm::errs() << "error: " << message << "\n";
  return 1;
}

uint64_t fnv1a(const std::string &text, uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string cacheDir() {
  if (const char *dir = std::getenv("KILN_CACHE_DIR"))
    return dir;
  if (const char *xdg = std::getenv("XDG_CACHE_HOME"))
    return std::string(xdg) + "/kiln";
  if (const char *home = std::getenv("HOME"))
    return std::string(home) + "/.cache/kiln";
  return "/tmp/kiln-cache";
}

/// The plan for the session's model, from the cache or compiled (and then
/// cached; a cache that cannot be written is only a missed speed-up).
std::optional<std::string> cachedPlan(ModelSession &session,
                                      const std::vector<std::string> &overrides,
                                      bool &hit) {
  std::string key = session.source->text;
  for (const std::string &o : overrides)
    key += "\n--set " + o;
  key += "\n" KILN_GIT_HASH "\nplan " + std::to_string(kPlanVersion);
  char name[32];
  std::snprintf(name, sizeof name, "%016llx.kplan",
                static_cast<unsigned long long>(fnv1a(key)));
  std::string path = cacheDir() + "/" + name;
  std::ifstream in(path);
  if (in) {
    std::stringstream text;
    text << in.rdbuf();
    hit = true;
    return text.str();
  }
  hit = false;
  std::optional<std::string> plan = session.compilePlan();
  if (plan && !llvm::sys::fs::create_directories(cacheDir())) {
    std::string tmp = path + ".tmp" + std::to_string(getpid());
    std::ofstream(tmp) << *plan;
    std::rename(tmp.c_str(), path.c_str());
  }
  return plan;
}

} // namespace

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
  std::optional<std::string> planText = cachedPlan(session, overrides, hit);
  if (!planText)
    return 1;
  std::string error;
  std::optional<Plan> plan = parsePlan(*planText, error);
  if (!plan)
    return fail("internal: the compiled plan does not load: " + error);
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
