//===- CommTestMain.cpp - The conformance suite on MPI or local -----------===//
//
// kiln-comm-tests runs the conformance suite on the communicator that
// createCommunicator picks: local without a launcher, MPI under
// `mpirun -np N`. Each rank runs every test. So that a failure anywhere
// fails the whole run, and nothing hangs:
//
// - the ranks' verdicts are all-gathered at the end, every rank exits 1 if
//   any rank failed, and rank 0 names the failing ranks (mpirun then exits
//   non-zero);
// - rank 0 prints gtest's usual output, the other ranks only their failures,
//   each line prefixed "[rank R]";
// - a watchdog thread ends the process with exit code 3 after
//   --watchdog-seconds (default 60), so a rank stuck in a collective (its
//   peers' collectives no longer matching) ends the run; mpirun then takes
//   the other ranks down. ctest's TIMEOUT is the last line of defence.
//
// Options (after gtest's own):
//   --expect-backend=NAME --expect-size=N   fail unless the run is that
//   --failure-tests    run only the CommFailure suite (it leaves the
//                      communicator failed); otherwise it is excluded
//   --inject-failure-rank=R, --inject-hang-rank=R   check the harness
//   --inject-late-rank=R   check the collective deadline (the run must end
//                      with the line naming rank R)
//   --watchdog-seconds=S
//
//===----------------------------------------------------------------------===//

#include "CommConformance.h"
#include "CommTestHarness.h"

#include "kiln/Runtime/Comm/Communicator.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace kiln::runtime::comm;
using namespace kiln::runtime::comm::harness;
using kiln::runtime::Error;
using kiln::runtime::Expected;

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::string expectBackend;
  int expectSize = -1, watchdogSeconds = 60;
  bool failureTests = false;
  conformance::Injection injection;
  for (int i = 1; i < argc; ++i) {
    const char *arg = argv[i];
    if (std::strncmp(arg, "--expect-backend=", 17) == 0)
      expectBackend = arg + 17;
    else if (std::strcmp(arg, "--failure-tests") == 0)
      failureTests = true;
    else if (!intOption(arg, "--expect-size", expectSize) &&
             !intOption(arg, "--inject-failure-rank", injection.failRank) &&
             !intOption(arg, "--inject-hang-rank", injection.hangRank) &&
             !intOption(arg, "--inject-late-rank", injection.lateRank) &&
             !intOption(arg, "--watchdog-seconds", watchdogSeconds)) {
      std::fprintf(stderr, "error: unknown argument '%s'\n", arg);
      return 2;
    }
  }
  Watchdog watchdog("kiln-comm-tests", watchdogSeconds,
                    "a rank is stuck, or the ranks' collectives no longer match");

  Expected<std::unique_ptr<Communicator>> created = createCommunicator();
  if (!created) {
    std::fprintf(stderr, "error: %s\n", created.error().message().c_str());
    return 1;
  }
  std::unique_ptr<Communicator> comm = *std::move(created);
  int rank = comm->rank(), size = comm->size();
  currentRank = rank;
  bool failed = false;
  if (!expectBackend.empty() && expectBackend != comm->backendName()) {
    std::fprintf(stderr, "[rank %d] error: backend '%s', expected '%s'\n", rank,
                 comm->backendName(), expectBackend.c_str());
    failed = true;
  }
  if (expectSize >= 0 && expectSize != size) {
    std::fprintf(stderr, "[rank %d] error: world size %d, expected %d\n", rank,
                 size, expectSize);
    failed = true;
  }

  // The failure suite runs alone, in a process of its own.
  std::string filter = GTEST_FLAG_GET(filter);
  std::string suite = std::string(conformance::kFailureSuite) + ".*";
  if (failureTests)
    filter = suite;
  else
    filter += (filter.find('-') == std::string::npos ? "-" : ":") + suite;
  GTEST_FLAG_SET(filter, filter);

  if (rank != 0) {
    ::testing::TestEventListeners &listeners =
        ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  conformance::setTarget({comm.get(), conformance::hostMemory()});
  conformance::setInjection(injection);
  if (RUN_ALL_TESTS() != 0)
    failed = true;

  // Every rank's verdict, unless the communicator failed (the failure
  // suite leaves it so on every rank alike).
  std::vector<float> verdicts(size, failed ? 1.0f : 0.0f);
  if (!comm->failure()) {
    float mine = failed ? 1.0f : 0.0f;
    if (Error why = comm->wait(comm->startAllGather(&mine, verdicts.data(), 1,
                                                    ElementType::F32))) {
      std::fprintf(stderr, "[rank %d] error: %s\n", rank,
                   why.message().c_str());
      failed = true;
    }
  }
  std::string failedRanks;
  for (int r = 0; r < size; ++r)
    if (verdicts[r] != 0.0f)
      failedRanks += (failedRanks.empty() ? "" : ", ") + std::to_string(r);
  if (!failedRanks.empty())
    failed = true;
  if (rank == 0) {
    if (failedRanks.empty())
      std::printf("kiln-comm-tests: %s backend, %d rank(s): every rank "
                  "passed\n",
                  comm->backendName(), size);
    else
      std::printf("kiln-comm-tests: %s backend, %d rank(s): FAILED on rank(s) "
                  "%s\n",
                  comm->backendName(), size, failedRanks.c_str());
  }
  std::fflush(stdout);
  comm.reset(); // finalises MPI
  return failed ? 1 : 0;
}
