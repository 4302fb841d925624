//===- CommConformance.h - What the conformance suite is run on -*- C++ -*-===//
//
// The conformance suite (CommConformance.cpp) is written once against
// Communicator.h and knows nothing of any backend. A test program gives it
// its target before RUN_ALL_TESTS: the communicator, and how to reach the
// memory that backend's collectives read and write (host memory for MPI
// and local; a CUDA backend would pass device allocation and copies).
// CommTestMain.cpp is the program for the MPI and local backends.
//
// Every rank runs every test and every test issues the same collectives on
// every rank, whatever its assertions find; checks come after the waits,
// with EXPECT_*, so one rank's failure cannot leave the others waiting in
// a collective. The program combines the ranks' verdicts at the end.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_TESTS_COMM_COMMCONFORMANCE_H
#define KILN_RUNTIME_TESTS_COMM_COMMCONFORMANCE_H

#include "kiln/Runtime/Comm/Communicator.h"

#include <cstddef>
#include <functional>

namespace kiln::runtime::comm::conformance {

/// The memory collectives take their buffers from.
struct Memory {
  std::function<void *(size_t bytes)> allocate;
  std::function<void(void *)> release;
  std::function<void(void *dst, const void *host, size_t bytes)> upload;
  std::function<void(void *host, const void *src, size_t bytes)> download;
};

/// malloc/free and memcpy.
Memory hostMemory();

struct Target {
  Communicator *comm = nullptr;
  Memory memory = hostMemory();
};

/// Must be called before the tests run; the communicator outlives them.
void setTarget(Target target);
const Target &target();

/// Harness checks (CommHarness.*): the rank that fails
/// CommHarness.InjectedFailure, the rank that never reaches the barrier of
/// CommHarness.InjectedHang (it sleeps instead), and the rank that joins
/// CommDeadline.LateRankIsNamed 30 s late; -1: none.
struct Injection {
  int failRank = -1;
  int hangRank = -1;
  int lateRank = -1;
};
void setInjection(Injection injection);

/// The test suite that leaves the communicator failed: run on its own
/// (a fresh process), never together with the rest.
inline constexpr const char *kFailureSuite = "CommFailure";

} // namespace kiln::runtime::comm::conformance

#endif // KILN_RUNTIME_TESTS_COMM_COMMCONFORMANCE_H
