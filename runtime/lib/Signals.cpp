//===- Signals.cpp - SIGINT and SIGTERM: stop, save, exit -----------------===//
//
// The handler runs on whichever thread the kernel picks (the compute
// thread, an OpenBLAS worker, the MPI communication thread), so it does
// only what is async-signal-safe: atomics, write(2) of a line prepared in
// advance, _exit(2).
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Signals.h"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <initializer_list>
#include <unistd.h>

namespace kiln::runtime {

namespace {

static_assert(std::atomic<int>::is_always_lock_free,
              "the signal handler needs lock-free atomics");

std::atomic<int> phase{static_cast<int>(StopPhase::Immediate)};
std::atomic<int> received{0};
/// When the first signal came (CLOCK_MONOTONIC, ns).
std::atomic<int64_t> receivedAt{0};
/// A second signal within this of the first is the same request delivered
/// twice (GNU timeout signals the process and then its process group).
constexpr int64_t kSameRequestNs = 1000000000;
/// Whether this process prints the Immediate phase's line: rank 0 of an MPI
/// launch, or a process started alone.
bool speaks = true;

/// The lines the handler writes, prepared outside it.
char beforeTraining[2][96], secondSignal[2][96];

int slot(int signal) { return signal == SIGTERM ? 1 : 0; }

void say(const char *line) {
  ssize_t ignored = write(STDERR_FILENO, line, std::strlen(line));
  (void)ignored;
}

int64_t monotonicNs() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now); // async-signal-safe
  return int64_t(now.tv_sec) * 1000000000 + now.tv_nsec;
}

void onStopSignal(int signal) {
  int first = 0;
  bool again = !received.compare_exchange_strong(first, signal);
  if (!again)
    receivedAt.store(monotonicNs());
  switch (static_cast<StopPhase>(phase.load())) {
  case StopPhase::Immediate:
    // The first handler to run speaks and exits; another thread's copy of
    // the same request stays quiet.
    if (again)
      return;
    if (speaks)
      say(beforeTraining[slot(signal)]);
    _exit(128 + signal);
  case StopPhase::Deferred:
    if (again && monotonicNs() - receivedAt.load() >= kSameRequestNs) {
      say(secondSignal[slot(signal)]);
      _exit(128 + signal);
    }
    return;
  case StopPhase::Saving:
    return;
  }
}

/// This process's rank as the launcher announces it, or 0.
int launcherRank() {
  for (const char *name :
       {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char *value = std::getenv(name); value && *value)
      return std::atoi(value);
  return 0;
}

} // namespace

const char *signalName(int signal) {
  switch (signal) {
  case SIGINT:
    return "SIGINT";
  case SIGTERM:
    return "SIGTERM";
  default:
    return "a signal";
  }
}

void installStopHandlers() {
  speaks = launcherRank() == 0;
  for (int signal : {SIGINT, SIGTERM}) {
    std::snprintf(beforeTraining[slot(signal)], sizeof beforeTraining[0],
                  "interrupted by %s before training began; nothing to "
                  "save\n",
                  signalName(signal));
    std::snprintf(secondSignal[slot(signal)], sizeof secondSignal[0],
                  "\ninterrupted again by %s: exiting without a checkpoint\n",
                  signalName(signal));
  }
  struct sigaction action;
  std::memset(&action, 0, sizeof action);
  action.sa_handler = onStopSignal;
  sigemptyset(&action.sa_mask);
  // Interrupted reads, writes and waits resume: the loop, not EINTR,
  // decides when to stop.
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

StopPhase setStopPhase(StopPhase next) {
  return static_cast<StopPhase>(phase.exchange(static_cast<int>(next)));
}

int stopSignal() { return received.load(); }

void clearStopSignal() { received.store(0); }

} // namespace kiln::runtime
