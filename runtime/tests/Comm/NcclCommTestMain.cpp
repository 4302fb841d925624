//===- NcclCommTestMain.cpp - The conformance suite on NCCL ---------------===//
//
// kiln-comm-nccl-tests bootstraps a host communicator with
// createCommunicator (local without a launcher, MPI under mpirun), wraps
// it with createNcclCommunicator and runs the conformance suite on it,
// unchanged: the suite's buffers live in device memory through its Memory
// hooks (cudaMalloc, and cudaMemcpy on the legacy default stream, which is
// the NCCL communicator's producer stream unless a test sets another), so
// the collectives are the real ones on device pointers, with the suite's
// own test()/wait() calls reaching the events. NcclCommTest.cpp adds what
// only this backend has (streams, graph capture, u8).
//
// Without a usable GPU on some rank every rank prints "skipped: <why>" and
// exits 77 (the ranks agree over the host communicator first). Otherwise
// as CommTestMain.cpp: rank 0 prints gtest's output, the other ranks their
// failures; the verdicts are all-gathered (over the host communicator, so
// a failed NCCL communicator does not stop it) and every rank exits 1 if
// any failed; a watchdog ends a stuck rank with code 3.
//
// Options (after gtest's own):
//   --expect-host=NAME --expect-size=N   fail unless the run is that
//   --failure-tests           only the CommFailure suite (else excluded)
//   --watchdog-seconds=S      the harness's (default 120)
//   --nccl-watchdog-seconds=S the communicator's own (default 60)
//
//===----------------------------------------------------------------------===//

#include "CommConformance.h"
#include "CommTestHarness.h"

#include "kiln/Runtime/Comm/NcclCommunicator.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace kiln::runtime::comm;
using namespace kiln::runtime::comm::harness;
using kiln::runtime::Error;
using kiln::runtime::Expected;

namespace {

/// Why this process cannot use a GPU, or "".
std::string gpuUnavailable() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess)
    return std::string("no usable GPU (") + cudaGetErrorString(err) + ")";
  if (count == 0)
    return "no usable GPU (no CUDA device is visible)";
  return "";
}

/// Device memory for the suite's buffers. A failed copy is a test failure
/// (the collective then sees stale data, which its checks also report).
conformance::Memory deviceMemory() {
  conformance::Memory m;
  m.allocate = [](size_t bytes) -> void * {
    void *p = nullptr;
    if (cudaError_t err = cudaMalloc(&p, bytes); err != cudaSuccess) {
      ADD_FAILURE() << "cudaMalloc(" << bytes
                    << "): " << cudaGetErrorString(err);
      return nullptr;
    }
    return p;
  };
  m.release = [](void *p) { cudaFree(p); };
  m.upload = [](void *dst, const void *src, size_t bytes) {
    cudaError_t err = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
    EXPECT_EQ(err, cudaSuccess) << cudaGetErrorString(err);
  };
  m.download = [](void *dst, const void *src, size_t bytes) {
    cudaError_t err = cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
    EXPECT_EQ(err, cudaSuccess) << cudaGetErrorString(err);
  };
  return m;
}

} // namespace

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::string expectHost;
  int expectSize = -1, watchdogSeconds = 120, ncclWatchdogSeconds = 60;
  bool failureTests = false;
  for (int i = 1; i < argc; ++i) {
    const char *arg = argv[i];
    if (std::strncmp(arg, "--expect-host=", 14) == 0)
      expectHost = arg + 14;
    else if (std::strcmp(arg, "--failure-tests") == 0)
      failureTests = true;
    else if (!intOption(arg, "--expect-size", expectSize) &&
             !intOption(arg, "--watchdog-seconds", watchdogSeconds) &&
             !intOption(arg, "--nccl-watchdog-seconds", ncclWatchdogSeconds)) {
      std::fprintf(stderr, "error: unknown argument '%s'\n", arg);
      return 2;
    }
  }
  Watchdog watchdog("kiln-comm-nccl-tests", watchdogSeconds,
                    "a rank is stuck");

  Expected<std::unique_ptr<Communicator>> created = createCommunicator();
  if (!created) {
    std::fprintf(stderr, "error: %s\n", created.error().message().c_str());
    return 1;
  }
  std::unique_ptr<Communicator> host = *std::move(created);
  const int rank = host->rank(), size = host->size();
  currentRank = rank;
  bool failed = false;
  if (!expectHost.empty() && expectHost != host->backendName()) {
    std::fprintf(stderr, "[rank %d] error: host backend '%s', expected '%s'\n",
                 rank, host->backendName(), expectHost.c_str());
    failed = true;
  }
  if (expectSize >= 0 && expectSize != size) {
    std::fprintf(stderr, "[rank %d] error: world size %d, expected %d\n", rank,
                 size, expectSize);
    failed = true;
  }

  // Skip on every rank, or on none.
  std::string why = gpuUnavailable();
  unsigned char ready = why.empty() ? 1 : 0;
  std::vector<unsigned char> readiness(size, 0);
  if (Error e = host->wait(
          host->startAllGather(&ready, readiness.data(), 1, ElementType::U8))) {
    std::fprintf(stderr, "[rank %d] error: %s\n", rank, e.message().c_str());
    return 1;
  }
  for (int r = 0; r < size && why.empty(); ++r)
    if (!readiness[r])
      why = "no usable GPU on rank " + std::to_string(r);
  if (!why.empty()) {
    std::printf("skipped: %s\n", why.c_str());
    std::fflush(stdout);
    host.reset(); // finalises MPI
    return 77;
  }

  Expected<std::unique_ptr<NcclCommunicator>> nccl =
      createNcclCommunicator(std::move(host), ncclWatchdogSeconds);
  if (!nccl) {
    std::fprintf(stderr, "[rank %d] error: %s\n", rank,
                 nccl.error().message().c_str());
    return 1;
  }
  std::unique_ptr<NcclCommunicator> comm = *std::move(nccl);

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
  conformance::setTarget({comm.get(), deviceMemory()});
  if (RUN_ALL_TESTS() != 0)
    failed = true;

  Communicator &hostComm = comm->host();
  unsigned char mine = failed ? 1 : 0;
  std::vector<unsigned char> verdicts(size, 1);
  if (Error e = hostComm.wait(hostComm.startAllGather(&mine, verdicts.data(), 1,
                                                      ElementType::U8))) {
    std::fprintf(stderr, "[rank %d] error: %s\n", rank, e.message().c_str());
    failed = true;
  }
  std::string failedRanks;
  for (int r = 0; r < size; ++r)
    if (verdicts[r])
      failedRanks += (failedRanks.empty() ? "" : ", ") + std::to_string(r);
  if (!failedRanks.empty())
    failed = true;
  if (rank == 0) {
    if (failedRanks.empty())
      std::printf("kiln-comm-nccl-tests: nccl over %s, %d rank(s): every rank "
                  "passed\n",
                  hostComm.backendName(), size);
    else
      std::printf("kiln-comm-nccl-tests: nccl over %s, %d rank(s): FAILED on "
                  "rank(s) %s\n",
                  hostComm.backendName(), size, failedRanks.c_str());
  }
  std::fflush(stdout);
  comm.reset(); // the NCCL communicator, then the host one (finalises MPI)
  return failed ? 1 : 0;
}
