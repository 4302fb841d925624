//===- Train.cpp - `kiln train`: compile, then run training steps ---------===//
//
// The compiled plan is cached on disk, keyed by the model text, the
// overrides and the build's git hash. Training runs on the CPU backend;
// progress goes to the terminal (a bar) or as plain lines, metrics as JSON
// lines in OUT/metrics.jsonl.
//
//===----------------------------------------------------------------------===//

#include "kiln/Compiler/Driver.h"
#include "kiln/Compiler/Session.h"
#include "kiln/Plan/PlanEmitter.h"
#include "kiln/Runtime/CpuExecutor.h"
#include "kiln/Runtime/Data.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cmath>
#include <csignal>
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
volatile std::sig_atomic_t interrupted = 0;
void onInterrupt(int) { interrupted = 1; }

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

std::string formatDuration(double seconds) {
  char buf[32];
  int s = static_cast<int>(seconds + 0.5);
  std::snprintf(buf, sizeof buf, "%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
  return buf;
}

/// Mean loss over `batches` fixed validation batches.
std::optional<double> validationLoss(CpuExecutor &exec,
                                     const std::vector<uint32_t> &tokens,
                                     const Split &split, int64_t batch,
                                     int64_t seq, uint64_t seed,
                                     int64_t batches, std::string &error) {
  std::vector<int32_t> in(batch * seq), tg(batch * seq);
  double sum = 0;
  for (int64_t i = 0; i < batches; ++i) {
    fillBatch(tokens, split.validBegin, split.validEnd, batch, seq, seed,
              (uint64_t(1) << 40) + i, in.data(), tg.data());
    auto out = exec.run("eval_loss", in, tg, 1, error);
    if (!out)
      return std::nullopt;
    sum += out->at("loss")[0];
  }
  return sum / batches;
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

  std::optional<std::vector<uint32_t>> tokens =
      loadTokens(config.training.data, plan->vocabSize, error);
  if (!tokens)
    return fail(error);
  int64_t batch = config.training.global_batch_size;
  int64_t seq = config.training.seq_len;
  std::optional<Split> split = splitTokens(tokens->size(), seq, error);
  if (!split)
    return fail(error);

  std::unique_ptr<CpuExecutor> exec = CpuExecutor::create(*plan, error);
  if (!exec)
    return fail(error);
  exec->setCheckNumerics(command.checkNumerics);
  uint64_t seed = static_cast<uint64_t>(config.training.seed);
  exec->initialize(seed);

  std::string out = command.out.empty()
                        ? "runs/" + llvm::sys::path::stem(session.source->name).str()
                        : command.out;
  if (std::error_code ec = llvm::sys::fs::create_directories(out))
    return fail("cannot create '" + out + "': " + ec.message());
  std::ofstream metrics(out + "/metrics.jsonl");
  if (!metrics)
    return fail("cannot write '" + out + "/metrics.jsonl'");

  bool terminal = isatty(STDOUT_FILENO);
  int64_t steps = config.training.steps;
  llvm::outs() << "kiln train: " << session.source->name << ", "
               << steps << " steps of " << batch << "x" << seq
               << " tokens, plan " << (hit ? "from cache" : "compiled")
               << " in " << llvm::format("%.2f", compileSeconds) << " s, "
               << tokens->size() << " tokens of data, output in " << out
               << "\n";
  llvm::outs().flush();

  std::signal(SIGINT, onInterrupt);
  std::vector<int32_t> in(batch * seq), tg(batch * seq);
  auto began = std::chrono::steady_clock::now();
  int64_t step = 1;
  for (; step <= steps && !interrupted; ++step) {
    fillBatch(*tokens, split->trainBegin, split->trainEnd, batch, seq, seed,
              step, in.data(), tg.data());
    auto t0 = std::chrono::steady_clock::now();
    auto result = exec->run("train_step", in, tg, step, error);
    if (!result)
      return fail("step " + std::to_string(step) + ": " + error);
    double loss = result->at("loss")[0];
    double norm = result->at("grad_norm")[0];
    double lr = result->at("lr")[0];
    if (!std::isfinite(loss) || !std::isfinite(norm))
      return fail("step " + std::to_string(step) + ": the " +
                  (std::isfinite(loss) ? "gradient norm" : "loss") +
                  " is not finite; run with --check-numerics to find the op "
                  "that produced it");
    double seconds = std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - t0)
                         .count();
    double tokensPerSecond = batch * seq / seconds;
    metrics << "{\"step\": " << step << ", \"loss\": " << loss
            << ", \"lr\": " << lr << ", \"grad_norm\": " << norm
            << ", \"tokens_per_s\": " << tokensPerSecond << "}\n";

    std::optional<double> valid;
    bool evalNow = config.training.eval_interval > 0 &&
                   (step % config.training.eval_interval == 0 || step == steps);
    if (evalNow) {
      valid = validationLoss(*exec, *tokens, *split, batch, seq, seed,
                             config.training.eval_steps, error);
      if (!valid)
        return fail("validation at step " + std::to_string(step) + ": " +
                    error);
      metrics << "{\"step\": " << step << ", \"val_loss\": " << *valid
              << "}\n";
    }
    metrics.flush();

    double elapsed = std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - began)
                         .count();
    double eta = elapsed / step * (steps - step);
    if (terminal) {
      int width = 30, done = static_cast<int>(width * step / steps);
      llvm::outs() << "\r[" << std::string(done, '#')
                   << std::string(width - done, ' ') << "] step " << step
                   << "/" << steps << " loss "
                   << llvm::format("%.4f", loss) << " "
                   << llvm::format("%.0f", tokensPerSecond) << " tok/s ETA "
                   << formatDuration(eta) << "   ";
      if (valid || step == steps)
        llvm::outs() << "\n";
    }
    if (!terminal || valid) {
      llvm::outs() << "step " << step << " loss "
                   << llvm::format("%.4f", loss) << " lr "
                   << llvm::format("%.2e", lr) << " grad_norm "
                   << llvm::format("%.3f", norm) << " "
                   << llvm::format("%.0f", tokensPerSecond) << " tok/s";
      if (valid)
        llvm::outs() << " val_loss " << llvm::format("%.4f", *valid);
      llvm::outs() << "\n";
    }
    llvm::outs().flush();
  }
  if (interrupted) {
    llvm::outs() << "\ninterrupted after step " << step - 1 << "\n";
    return 130;
  }
  return 0;
}
