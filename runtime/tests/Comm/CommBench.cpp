//===- CommBench.cpp - Timings of the communicator (not a test) -----------===//
//
// kiln-comm-bench, run alone or under mpirun, prints on rank 0:
// - the mean time of an f32 sum all-reduce (started and waited for at
//   once) for a range of counts;
// - what waiting costs the ranks that compute: rank 0 starts its part of an
//   all-reduce only after a fixed piece of arithmetic, the other ranks start
//   theirs at once and then do the same arithmetic, so their communication
//   threads wait for rank 0 while they compute. Printed: the arithmetic's
//   time alone, and on the waiting ranks and on rank 0 (slowest of each).
//   A communication thread that spun while waiting would slow both down
//   on an oversubscribed machine.
// docs/communicator.md quotes its output.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Comm/Communicator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

using namespace kiln::runtime::comm;
using kiln::runtime::Expected;

namespace {

volatile float sink;

double arithmetic(long iterations) {
  auto start = std::chrono::steady_clock::now();
  float x = 1;
  for (long i = 0; i < iterations; ++i) {
    x = x * 0.9999f + 1e-6f;
    if ((i & 1023) == 0)
      sink = x; // keeps the loop from being folded away
  }
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - start)
      .count();
}

/// The largest of every rank's `value`.
double slowest(Communicator &comm, double value) {
  float mine = static_cast<float>(value);
  std::vector<float> all(comm.size());
  (void)comm.wait(comm.startAllGather(&mine, all.data(), 1, ElementType::F32));
  return *std::max_element(all.begin(), all.end());
}

} // namespace

int main() {
  Expected<std::unique_ptr<Communicator>> created = createCommunicator();
  if (!created) {
    std::fprintf(stderr, "error: %s\n", created.error().message().c_str());
    return 1;
  }
  std::unique_ptr<Communicator> comm = *std::move(created);
  bool root = comm->rank() == 0;
  if (root)
    std::printf("%s backend, %d rank(s)\n", comm->backendName(), comm->size());

  for (long count : {1L, 1L << 10, 1L << 16, 1L << 20, 1L << 22}) {
    std::vector<float> send(count, 1.0f), recv(count);
    int iterations = count >= (1L << 20) ? 10 : 200;
    (void)comm->barrier();
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i)
      (void)comm->wait(comm->startAllReduce(send.data(), recv.data(), count,
                                            ElementType::F32, ReduceOp::Sum));
    double ms = std::chrono::duration<double, std::milli>(
                    std::chrono::steady_clock::now() - start)
                    .count() /
                iterations;
    double worst = slowest(*comm, ms);
    if (root)
      std::printf("all-reduce f32 sum, %8ld elements: %9.3f ms\n", count,
                  worst);
  }

  const long work = 100000000;
  (void)comm->barrier();
  double alone = slowest(*comm, arithmetic(work));
  std::vector<float> send(1 << 20, 1.0f), recv(1 << 20);
  (void)comm->barrier();
  double late = 0, waiting = 0;
  if (root)
    late = arithmetic(work);
  CommHandle h = comm->startAllReduce(send.data(), recv.data(), 1 << 20,
                                      ElementType::F32, ReduceOp::Sum);
  if (!root)
    waiting = arithmetic(work);
  (void)comm->wait(h);
  double lateMs = slowest(*comm, late), waitingMs = slowest(*comm, waiting);
  if (root)
    std::printf("arithmetic alone: %.0f ms; on the ranks waiting in an "
                "all-reduce for a late rank 0: %.0f ms; on rank 0 meanwhile: "
                "%.0f ms\n",
                alone, waitingMs, lateMs);
  return 0;
}
