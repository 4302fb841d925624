//===- PlanFuzz.cpp - Structured fuzzing of plans -------------------------===//
//
// The plan is untrusted input (docs/plan.md): this feeds the runtime
// mutants of compiled plans (PlanMutator.h) and checks that every one is
// either refused with one error line or accepted and then run on the CPU
// backend without a crash, a sanitizer report or a hang:
//
//   - parsePlan returns a plan, or an error that is one non-empty line;
//   - an accepted plan gets a CPU executor (or one error line), runs `init`
//     and every other entry it has on in-range tokens (a multi-rank plan as
//     one rank of a MirrorCommunicator), and round-trips its state through
//     the unsharded layout (what checkpoints do). Errors are fine; crashes
//     are not.
//
// Mutants run in a worker process that the parent watches: a worker that
// dies is a crash, one that spends more than --timeout seconds on one
// mutant is killed as a hang; both are reported with the seed and the
// mutant's index, and the parent starts a new worker at the next mutant.
// `--only I` runs mutant I alone in this process (with a watchdog thread),
// printing what was done to it; `--save FILE` writes it out.
//
//   kiln-plan-fuzz [--count N] [--seed S] [--only I [--save FILE]]
//                  [--jobs N] [--timeout SECONDS] [--max-bytes B] PLAN...
//
//===----------------------------------------------------------------------===//

#include "MirrorCommunicator.h"
#include "PlanMutator.h"

#include "kiln/Runtime/Cpu/Common.h"
#include "kiln/Runtime/Executor.h"
#include "kiln/Runtime/MemoryCheck.h"
#include "kiln/Runtime/Plan.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define KILN_FUZZ_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#include <sanitizer/common_interface_defs.h>
#define KILN_FUZZ_ASAN 1
#endif
#endif

using namespace kiln;
using namespace kiln::runtime;

namespace {

struct Options {
  int64_t count = 10000;
  uint64_t seed = 1;
  int64_t only = -1;
  std::string save;
  double timeout = 10;
  int64_t maxBytes = int64_t(256) << 20;
  int64_t jobs = 1; // workers at once: mutants i, i + jobs, ... each
  // Test hooks: the harness itself must report a crash and a hang.
  int64_t injectCrash = -1, injectHang = -1;
  std::vector<std::string> plans;
};

constexpr const char *kUsage =
    "usage: kiln-plan-fuzz [--count N] [--seed S] [--only I [--save FILE]]\n"
    "                      [--jobs N] [--timeout SECONDS] [--max-bytes B]\n"
    "                      PLAN...\n";

/// What the worker tells the parent, in memory both share. Each mutant is
/// counted once it is done, so one that crashes is counted only as that.
constexpr int kMaxJobs = 64;
struct Tally {
  struct Worker {
    std::atomic<int64_t> current{-1}; // the mutant being run, or -1
    std::atomic<int64_t> startedNs{0};
  } workers[kMaxJobs];
  std::atomic<int64_t> accepted{0}, rejected{0}, badErrors{0};
  std::atomic<int64_t> ran{0}, runErrors{0}, refused{0}, notRun{0};
};

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool oneLine(const std::string &error) {
  return !error.empty() && error.find('\n') == std::string::npos &&
         error.find('\r') == std::string::npos;
}

std::string excerpt(const std::string &text) {
  std::string out = text.size() > 300 ? text.substr(0, 300) + "..." : text;
  for (char &c : out)
    if (c == '\n' || c == '\r')
      c = '|';
  return out;
}

class Fuzzer {
public:
  Fuzzer(const Options &options, Tally &tally)
      : opt(options), tally(tally) {}

  /// Reads the seed plans; each must be a plan the runtime accepts.
  bool loadSeeds() {
    for (const std::string &path : opt.plans) {
      std::ifstream in(path, std::ios::binary);
      if (!in) {
        std::fprintf(stderr, "error: cannot open seed plan '%s'\n",
                     path.c_str());
        return false;
      }
      std::stringstream text;
      text << in.rdbuf();
      if (Expected<Plan> plan = parsePlan(text.str()); !plan) {
        std::fprintf(stderr, "error: %s: the seed plan is refused: %s\n",
                     path.c_str(), plan.error().message().c_str());
        return false;
      }
      seeds.push_back(nlohmann::json::parse(text.str()));
    }
    mutator = std::make_unique<fuzz::PlanMutator>(std::move(seeds));
    return true;
  }

  /// Mutant `index`, with what was done to it, for reports.
  fuzz::Mutant mutant(int64_t index) {
    return mutator->make(opt.seed, static_cast<uint64_t>(index));
  }

  std::string describe(int64_t index) {
    fuzz::Mutant m = mutant(index);
    std::string text = opt.plans[m.seedPlan];
    for (const std::string &a : m.applied)
      text += "; " + excerpt(a);
    return text;
  }

  /// Runs one mutant in worker slot `worker` and counts it.
  void run(int64_t index, int worker, bool verbose) {
    Tally::Worker &slot = tally.workers[worker];
    slot.startedNs = nowNs();
    slot.current = index;
    if (index == opt.injectCrash)
      std::raise(SIGSEGV);
    while (index == opt.injectHang)
      std::this_thread::sleep_for(std::chrono::seconds(1));
    fuzz::Mutant m = mutant(index);
    if (verbose) {
      std::printf("mutant %lld of seed %llu, from %s:\n",
                  static_cast<long long>(index),
                  static_cast<unsigned long long>(opt.seed),
                  opt.plans[m.seedPlan].c_str());
      for (const std::string &a : m.applied)
        std::printf("  %s\n", excerpt(a).c_str());
    }
    if (!opt.save.empty()) {
      std::ofstream out(opt.save, std::ios::binary);
      out << m.text;
    }
    std::string error;
    Expected<Plan> plan = parsePlan(m.text);
    if (!plan) {
      if (verbose)
        std::printf("refused: %s\n", excerpt(plan.error().message()).c_str());
      if (oneLine(plan.error().message())) {
        ++tally.rejected;
      } else {
        badError(index, "parsePlan", plan.error().message());
        ++tally.badErrors;
      }
    } else {
      if (verbose)
        std::printf("accepted\n");
      if (execute(*plan, index, verbose))
        ++tally.accepted;
      else
        ++tally.badErrors;
    }
    slot.current = -1;
  }

private:
  const Options &opt;
  Tally &tally;
  std::vector<nlohmann::json> seeds;
  std::unique_ptr<fuzz::PlanMutator> mutator;

  void badError(int64_t index, const char *what, const std::string &error) {
    std::printf("plan fuzz: mutant %lld of seed %llu: %s gave no one-line "
                "error: \"%s\" (%s)\n",
                static_cast<long long>(index),
                static_cast<unsigned long long>(opt.seed), what,
                excerpt(error).c_str(), describe(index).c_str());
    std::fflush(stdout);
  }

  /// Runs an accepted plan's entries; false if an error was not one line.
  bool execute(const Plan &plan, int64_t index, bool verbose) {
    const PlanValue *tokens = plan.named(PlanValue::Input, "tokens");
    // Plans the verifier accepts may still ask for more memory than this
    // machine has (the executor's memory check is to refuse those); the
    // fuzzer runs only what fits in --max-bytes.
    if (predictedDeviceBytes(plan, 0) > opt.maxBytes ||
        tokens->numElements() > (int64_t(1) << 20) || plan.ranks > 8) {
      ++tally.notRun;
      if (verbose)
        std::printf("not run: over --max-bytes, 2^20 tokens or 8 ranks\n");
      return true;
    }
    auto check = [&](const char *what, const std::string &e) {
      if (verbose)
        std::printf("%s: %s\n", what, excerpt(e).c_str());
      if (oneLine(e))
        return true;
      badError(index, what, e);
      return false;
    };
    Expected<std::unique_ptr<Executor>> created = createExecutor(plan, "cpu");
    if (!created) {
      ++tally.refused;
      return check("createExecutor", created.error().message());
    }
    std::unique_ptr<Executor> exec = std::move(*created);
    std::unique_ptr<comm::Communicator> communicator;
    if (plan.ranks > 1)
      communicator = fuzz::createMirrorCommunicator(
          static_cast<int>(index % plan.ranks), static_cast<int>(plan.ranks));
    if (Error e = exec->setCommunicator(communicator.get())) {
      ++tally.refused;
      return check("setCommunicator", e.message());
    }
    exec->setCheckNumerics(index % 2 == 0);
    bool failed = false, good = true;
    if (Error e = exec->initialize(static_cast<uint64_t>(index))) {
      failed = true;
      good &= check("initialize", e.message());
    }
    // In-range tokens; targets the next tokens, as the data loader gives.
    std::vector<int32_t> ids(tokens->numElements() + 1);
    uint64_t x = static_cast<uint64_t>(index) * 0x9E3779B97F4A7C15ull + 1;
    for (int32_t &id : ids) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      id = static_cast<int32_t>(x % static_cast<uint64_t>(plan.vocabSize));
    }
    std::vector<int32_t> in(ids.begin(), ids.end() - 1);
    std::vector<int32_t> targets(ids.begin() + 1, ids.end());
    struct Call {
      const char *entry;
      int64_t step;
    };
    const Call calls[] = {{"fp8_calibration", 1}, {"train_step", 1},
                          {"train_step", 2},      {"eval_loss", 2},
                          {"loss_and_grads", 3},  {"logits", 3}};
    for (const Call &c : calls) {
      if (failed || !plan.entry(c.entry))
        continue;
      if (Expected<EntryOutputs> out = exec->run(c.entry, in, targets, c.step);
          !out) {
        failed = true;
        good &= check(c.entry, out.error().message());
      } else if (verbose) {
        std::printf("%s: ran\n", c.entry);
      }
    }
    if (!failed) {
      // The checkpoint path: every state out in the unsharded layout and
      // back in.
      Expected<std::vector<FloatTensor>> all = exec->unshardedState();
      if (!all) {
        failed = true;
        good &= check("unshardedState", all.error().message());
      } else {
        std::map<std::string, const FloatTensor *> byName;
        for (const FloatTensor &t : *all)
          byName[t.name] = &t;
        if (Error e = exec->setUnshardedState(byName)) {
          failed = true;
          good &= check("setUnshardedState", e.message());
        }
      }
    }
    ++tally.ran;
    if (failed)
      ++tally.runErrors;
    return good;
  }
};

// --- Reporting crashes and hangs --------------------------------------------

/// The line printed when this process dies in a mutant (in-process mode).
char crashLine[512];

void writeCrashLine() {
  ssize_t ignored = write(STDERR_FILENO, crashLine, std::strlen(crashLine));
  (void)ignored;
}

extern "C" void onFatalSignal(int sig) {
  writeCrashLine();
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void installCrashReport(const Options &opt) {
  std::snprintf(crashLine, sizeof crashLine,
                "plan fuzz: crash in mutant %lld of seed %llu\n",
                static_cast<long long>(opt.only),
                static_cast<unsigned long long>(opt.seed));
#ifdef KILN_FUZZ_ASAN
  // AddressSanitizer reports SIGSEGV and friends itself, then calls this.
  __sanitizer_set_death_callback(writeCrashLine);
  std::signal(SIGABRT, onFatalSignal);
#else
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT})
    std::signal(sig, onFatalSignal);
#endif
}

std::string reproduce(const Options &opt, int64_t index) {
  std::string text = "kiln-plan-fuzz --seed " + std::to_string(opt.seed) +
                     " --only " + std::to_string(index);
  for (const std::string &p : opt.plans)
    text += " " + p;
  return text;
}

/// The parent: runs mutants [0, count) in `jobs` workers, worker k taking
/// k, k + jobs, ...; after a crash or a hang it reports the mutant and
/// starts the worker again at its next one. Returns the exit code.
int runAll(const Options &opt, Fuzzer &fuzzer, Tally &tally) {
  int64_t crashes = 0, hangs = 0;
  bool workerFailed = false;
  auto started = std::chrono::steady_clock::now();
  std::fflush(stdout);
  int jobs = static_cast<int>(opt.jobs);
  std::vector<pid_t> pids(jobs, -1);
  // Starts worker k at mutant `from`; false if fork failed.
  auto start = [&](int k, int64_t from) {
    pids[k] = -1;
    if (from >= opt.count)
      return true;
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("kiln-plan-fuzz: fork");
      return false;
    }
    if (pid == 0) {
      for (int64_t i = from; i < opt.count; i += jobs)
        fuzzer.run(i, k, false);
      std::fflush(stdout);
      std::exit(0);
    }
    pids[k] = pid;
    return true;
  };
  for (int k = 0; k < jobs; ++k)
    if (!start(k, k))
      return 2;
  auto running = [&] {
    return std::any_of(pids.begin(), pids.end(), [](pid_t p) { return p > 0; });
  };
  while (running()) {
    for (int k = 0; k < jobs; ++k) {
      if (pids[k] <= 0)
        continue;
      Tally::Worker &slot = tally.workers[k];
      int status = 0;
      bool hung = false;
      int64_t at = -1;
      if (waitpid(pids[k], &status, WNOHANG) == pids[k]) {
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
          pids[k] = -1; // its mutants are done
          continue;
        }
        at = slot.current;
      } else {
        int64_t current = slot.current;
        double seconds = (nowNs() - slot.startedNs) * 1e-9;
        if (current < 0 || seconds <= opt.timeout)
          continue;
        kill(pids[k], SIGKILL);
        waitpid(pids[k], &status, 0);
        hung = true;
        at = current;
      }
      if (at < 0) {
        // The worker failed between mutants (a leak report at its exit?).
        std::printf("plan fuzz: a worker %s after its last mutant\n",
                    WIFSIGNALED(status)
                        ? ("died of signal " +
                           std::to_string(WTERMSIG(status)))
                              .c_str()
                        : ("exited with code " +
                           std::to_string(WEXITSTATUS(status)))
                              .c_str());
        workerFailed = true;
        pids[k] = -1;
        continue;
      }
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%g", opt.timeout);
      std::string how =
          hung ? std::string("hang (no result after ") + seconds + " s)"
          : WIFSIGNALED(status)
              ? "crash (signal " + std::to_string(WTERMSIG(status)) + ")"
              : "crash (exit code " + std::to_string(WEXITSTATUS(status)) +
                    ", a sanitizer report above?)";
      std::printf("plan fuzz: %s in mutant %lld of seed %llu (%s)\n"
                  "plan fuzz:   reproduce: %s\n",
                  how.c_str(), static_cast<long long>(at),
                  static_cast<unsigned long long>(opt.seed),
                  fuzzer.describe(at).c_str(), reproduce(opt, at).c_str());
      std::fflush(stdout);
      (hung ? hangs : crashes) += 1;
      slot.current = -1;
      if (!start(k, at + jobs))
        return 2;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  double seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - started)
                       .count();
  std::printf("plan fuzz: %lld mutants, %lld accepted, %lld rejected with an "
              "error line, %lld crashes, %lld hangs",
              static_cast<long long>(opt.count),
              static_cast<long long>(tally.accepted.load()),
              static_cast<long long>(tally.rejected.load()),
              static_cast<long long>(crashes),
              static_cast<long long>(hangs));
  if (tally.badErrors)
    std::printf(", %lld without a one-line error",
                static_cast<long long>(tally.badErrors.load()));
  std::printf("\nplan fuzz: seed %llu, %zu seed plans, %lld jobs, %.1f s; "
              "of the accepted: %lld ran (%lld stopped at an error), %lld "
              "refused by the executor, %lld not run (over --max-bytes)\n",
              static_cast<unsigned long long>(opt.seed), opt.plans.size(),
              static_cast<long long>(opt.jobs), seconds, static_cast<long long>(tally.ran.load()),
              static_cast<long long>(tally.runErrors.load()),
              static_cast<long long>(tally.refused.load()),
              static_cast<long long>(tally.notRun.load()));
  return crashes || hangs || tally.badErrors || workerFailed ? 1 : 0;
}

/// One mutant in this process, with a watchdog thread for hangs.
int runOnly(const Options &opt, Fuzzer &fuzzer, Tally &tally) {
  installCrashReport(opt);
  std::thread([&] {
    std::this_thread::sleep_for(std::chrono::duration<double>(opt.timeout));
    std::printf("plan fuzz: hang (no result after %g s) in mutant %lld of "
                "seed %llu\n",
                opt.timeout, static_cast<long long>(opt.only),
                static_cast<unsigned long long>(opt.seed));
    std::fflush(stdout);
    std::_Exit(1);
  }).detach();
  fuzzer.run(opt.only, 0, true);
  std::fflush(stdout);
  return tally.badErrors ? 1 : 0;
}

bool integerArg(const char *flag, const char *text, int64_t min,
                int64_t &out) {
  char *end = nullptr;
  errno = 0;
  long long v = std::strtoll(text, &end, 10);
  if (!*text || *end || errno || v < min) {
    std::fprintf(stderr, "error: %s expects an integer >= %lld, got '%s'\n",
                 flag, static_cast<long long>(min), text);
    return false;
  }
  out = v;
  return true;
}

} // namespace

int main(int argc, char **argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    bool hasValue = i + 1 < argc;
    int64_t v = 0;
    if (a == "--count" && hasValue) {
      if (!integerArg("--count", argv[++i], 0, opt.count))
        return 1;
    } else if (a == "--seed" && hasValue) {
      if (!integerArg("--seed", argv[++i], 0, v))
        return 1;
      opt.seed = static_cast<uint64_t>(v);
    } else if (a == "--only" && hasValue) {
      if (!integerArg("--only", argv[++i], 0, opt.only))
        return 1;
    } else if (a == "--save" && hasValue) {
      opt.save = argv[++i];
    } else if (a == "--timeout" && hasValue) {
      if (!integerArg("--timeout", argv[++i], 1, v))
        return 1;
      opt.timeout = static_cast<double>(v);
    } else if (a == "--jobs" && hasValue) {
      if (!integerArg("--jobs", argv[++i], 1, opt.jobs))
        return 1;
      if (opt.jobs > kMaxJobs) {
        std::fprintf(stderr, "error: --jobs is at most %d\n", kMaxJobs);
        return 1;
      }
    } else if (a == "--max-bytes" && hasValue) {
      if (!integerArg("--max-bytes", argv[++i], 0, opt.maxBytes))
        return 1;
    } else if (a == "--inject-crash" && hasValue) {
      if (!integerArg("--inject-crash", argv[++i], 0, opt.injectCrash))
        return 1;
    } else if (a == "--inject-hang" && hasValue) {
      if (!integerArg("--inject-hang", argv[++i], 0, opt.injectHang))
        return 1;
    } else if (a == "--help" || a == "-h") {
      std::printf("%s", kUsage);
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "error: unknown option '%s'\n%s", a.c_str(),
                   kUsage);
      return 1;
    } else {
      opt.plans.push_back(a);
    }
  }
  if (opt.plans.empty()) {
    std::fprintf(stderr, "error: no seed plans given\n%s", kUsage);
    return 1;
  }
  if (!opt.save.empty() && opt.only < 0) {
    std::fprintf(stderr, "error: --save needs --only\n");
    return 1;
  }
  // One thread: mutants run one after another, and the worker is forked.
  cpu::setCpuThreads(1);

  // The tally lives in memory the workers share with this process.
  void *shared = mmap(nullptr, sizeof(Tally), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) {
    std::perror("kiln-plan-fuzz: mmap");
    return 2;
  }
  Tally *tally = new (shared) Tally;
  Fuzzer fuzzer(opt, *tally);
  if (!fuzzer.loadSeeds())
    return 1;
  return opt.only >= 0 ? runOnly(opt, fuzzer, *tally)
                       : runAll(opt, fuzzer, *tally);
}
