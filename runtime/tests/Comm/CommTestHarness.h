//===- CommTestHarness.h - What both conformance mains share ----*- C++ -*-===//
//
// The process-level harness of kiln-comm-tests (CommTestMain.cpp) and
// kiln-comm-nccl-tests (NcclCommTestMain.cpp): a watchdog that ends a
// stuck rank, a gtest listener that prints another rank's failures with
// its number, and the `--name=N` option parser.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_TESTS_COMM_COMMTESTHARNESS_H
#define KILN_RUNTIME_TESTS_COMM_COMMTESTHARNESS_H

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

namespace kiln::runtime::comm::harness {

/// This process's rank once known (-1 before), for the watchdog's line.
inline std::atomic<int> currentRank{-1};

/// Ends the process with exit code 3 if it is not destroyed within
/// `seconds`, printing "[rank R] PROGRAM: watchdog: not finished after S s
/// (WHY); exiting".
class Watchdog {
public:
  Watchdog(const char *program, int seconds, const char *why) {
    thread_ = std::thread([this, program, seconds, why] {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, std::chrono::seconds(seconds),
                       [this] { return done_; }))
        return;
      std::fprintf(stderr,
                   "[rank %d] %s: watchdog: not finished after %d s (%s); "
                   "exiting\n",
                   currentRank.load(), program, seconds, why);
      std::fflush(stderr);
      std::fflush(stdout);
      std::_Exit(3);
    });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

/// Failures of a rank other than 0, with its number.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult &result) override {
    if (result.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                   result.file_name() ? result.file_name() : "?",
                   result.line_number(), result.message());
  }
  void OnTestEnd(const ::testing::TestInfo &info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_,
                   info.test_suite_name(), info.name());
  }

private:
  int rank_;
};

/// Reads `arg` as `NAME=N` into `value`; false if it is not that option.
inline bool intOption(const char *arg, const char *name, int &value) {
  size_t n = std::strlen(name);
  if (std::strncmp(arg, name, n) != 0 || arg[n] != '=')
    return false;
  value = std::atoi(arg + n + 1);
  return true;
}

} // namespace kiln::runtime::comm::harness

#endif // KILN_RUNTIME_TESTS_COMM_COMMTESTHARNESS_H
