//===- Signals.cpp - SIGINT and SIGTERM: stop, save, exit -----------------===//
//
// The handler runs on whichever thread the kernel picks (the compute
// thread, an OpenBLAS worker, the MPI communication thread), so it does
// only what is async-signal-safe: atomics, write(2) of a line prepared in
// advance, _exit(2).
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Train/Signals.h"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <fcntl.h>
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
/// Who sent the first signal (0 when the kernel does not say).
std::atomic<pid_t> sentBy{0};
/// A second signal within this of the first is the same request delivered
/// twice (GNU timeout signals the process and then its process group).
constexpr int64_t kSameRequestNs = 1000000000;
/// Whether this process prints the Immediate phase's line: rank 0 of an MPI
/// launch, or a process started alone.
bool speaks = true;
/// Whether an MPI launcher started this process.
bool launched = false;

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

/// Open MPI's mpirun gives rank 0 a terminal for stdout and, once it has
/// decided to kill the job, stops reading it: a full terminal would then
/// block the rank in a progress line until the SIGKILL, before it could
/// save. Writes that cannot complete fail instead (the lost lines are
/// mpirun's to drop anyway). Only under a launcher, whose terminal nobody
/// else shares: a user's terminal stays as it is.
void unblockStdout() {
  int flags = fcntl(STDOUT_FILENO, F_GETFL);
  if (flags >= 0 && !(flags & O_NONBLOCK))
    fcntl(STDOUT_FILENO, F_SETFL, flags | O_NONBLOCK);
}

void onStopSignal(int signal, siginfo_t *info, void *) {
  int first = 0;
  bool again = !received.compare_exchange_strong(first, signal);
  if (!again) {
    receivedAt.store(monotonicNs());
    sentBy.store(info ? info->si_pid : 0);
  }
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
    if (launched)
      unblockStdout();
    return;
  case StopPhase::Saving:
    return;
  }
}

/// This process's rank as the launcher announces it, or -1 without one.
int launcherRank() {
  for (const char *name :
       {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char *value = std::getenv(name); value && *value)
      return std::atoi(value);
  return -1;
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

std::string launcherGraceNote(int seconds) {
  // Only when mpirun itself (this rank's parent) sent the signal.
  if (!std::getenv("OMPI_COMM_WORLD_SIZE") || sentBy.load() != getppid())
    return "";
  const char *set = std::getenv("OMPI_MCA_odls_base_sigkill_timeout");
  int grace = set && *set ? std::atoi(set) : 1;
  if (grace >= seconds)
    return "";
  return "\nnote: mpirun kills the ranks " + std::to_string(grace) +
         " s after its SIGTERM; should the checkpoint not appear below, give "
         "them longer: mpirun --mca odls_base_sigkill_timeout " +
         std::to_string(seconds);
}

void installStopHandlers() {
  int rank = launcherRank();
  speaks = rank <= 0;
  launched = rank >= 0;
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
  action.sa_sigaction = onStopSignal;
  sigemptyset(&action.sa_mask);
  // Interrupted reads, writes and waits resume: the loop, not EINTR,
  // decides when to stop.
  action.sa_flags = SA_RESTART | SA_SIGINFO;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

StopPhase setStopPhase(StopPhase next) {
  return static_cast<StopPhase>(phase.exchange(static_cast<int>(next)));
}

int stopSignal() { return received.load(); }

void clearStopSignal() { received.store(0); }

} // namespace kiln::runtime
