//===- CommConformanceProgress.cpp - In flight, progress, failure ---------===//
//
// The part of the conformance suite (CommConformance.cpp) about collectives
// in flight: several waited for in another order, barriers, progress while
// the caller computes (a large collective must complete with only test(),
// which never drives progress, looked at; the 30 s limit is a fallback
// against hanging, not the assertion), unknown handles, the failed state
// (run alone), the collective deadline, and the harness's own checks.
//
//===----------------------------------------------------------------------===//

#include "CommConformanceSupport.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

using namespace kiln::runtime::comm;
using namespace kiln::runtime::comm::conformance;

TEST_F(CommConformance, SeveralInFlightWaitedInAnotherOrder) {
  const ElementType f32 = ElementType::F32, bf16 = ElementType::BF16;
  const int n = size();
  Buffer ag1Send(contributions(f32, 11, rank(), 1237)), ag1Recv(n * 1237 * 4);
  Buffer rs2Send(contributions(bf16, 12, rank(), n * 1001)), rs2Recv(1001 * 2);
  Buffer ar3Send(contributions(f32, 13, rank(), 50000)), ar3Recv(50000 * 4);
  Buffer ar4Send(contributions(bf16, 14, rank(), 1 << 18)),
      ar4Recv((1 << 18) * 2);
  Buffer rs5Send(contributions(f32, 15, rank(), n * 777)), rs5Recv(777 * 4);
  Buffer ag6Send(contributions(bf16, 16, rank(), 3)), ag6Recv(n * 3 * 2);

  CommHandle h[6] = {
      comm().startAllGather(ag1Send.get(), ag1Recv.get(), 1237, f32),
      comm().startReduceScatter(rs2Send.get(), rs2Recv.get(), 1001, bf16,
                                ReduceOp::Sum),
      comm().startAllReduce(ar3Send.get(), ar3Recv.get(), 50000, f32,
                            ReduceOp::Max),
      comm().startAllReduce(ar4Send.get(), ar4Recv.get(), 1 << 18, bf16,
                            ReduceOp::Sum),
      comm().startReduceScatter(rs5Send.get(), rs5Recv.get(), 777, f32,
                                ReduceOp::Sum),
      comm().startAllGather(ag6Send.get(), ag6Recv.get(), 3, bf16),
  };
  for (int i = 1; i < 6; ++i)
    EXPECT_LT(h[i - 1].id, h[i].id) << "handles follow issue order";
  // The fourth first: the three issued before it must then be complete
  // (issue order), whether or not they were waited on.
  EXPECT_OK(comm().wait(h[3]));
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(comm().test(h[i])) << "collective " << i << " issued earlier";
  for (int i : {0, 5, 1, 4, 2})
    EXPECT_OK(comm().wait(h[i]));
  EXPECT_OK(comm().wait(h[3])); // again: the same answer

  Bytes ag1Want(n * 1237 * 4), ag6Want(n * 3 * 2);
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < 1237; ++i)
      put(ag1Want, f32, r * 1237 + i, contribution(f32, 11, r, i));
    for (int64_t i = 0; i < 3; ++i)
      put(ag6Want, bf16, r * 3 + i, contribution(bf16, 16, r, i));
  }
  EXPECT_EQ(compareBits(ag1Recv.read(), ag1Want, f32), "") << "1";
  EXPECT_EQ(checkReduced(rs2Recv.read(), bf16, ReduceOp::Sum, 12, n, 1001,
                         rank() * 1001, rank()),
            "")
      << "2";
  EXPECT_EQ(checkReduced(ar3Recv.read(), f32, ReduceOp::Max, 13, n, 50000), "")
      << "3";
  EXPECT_EQ(checkReduced(ar4Recv.read(), bf16, ReduceOp::Sum, 14, n, 1 << 18),
            "")
      << "4";
  EXPECT_EQ(checkReduced(rs5Recv.read(), f32, ReduceOp::Sum, 15, n, 777,
                         rank() * 777, rank()),
            "")
      << "5";
  EXPECT_EQ(compareBits(ag6Recv.read(), ag6Want, bf16), "") << "6";
}

TEST_F(CommConformance, BarrierCompletesWhatWasIssuedBefore) {
  const int64_t count = 1 << 16;
  Buffer send(contributions(ElementType::F32, 21, rank(), count));
  Buffer recv(count * 4);
  CommHandle h = comm().startAllReduce(send.get(), recv.get(), count,
                                       ElementType::F32, ReduceOp::Sum);
  EXPECT_OK(comm().barrier());
  EXPECT_TRUE(comm().test(h));
  EXPECT_OK(comm().wait(h));
  EXPECT_EQ(checkReduced(recv.read(), ElementType::F32, ReduceOp::Sum, 21,
                         size(), count),
            "");
  EXPECT_OK(comm().barrier());
}

namespace {
volatile float computeSink;

/// About `ms` milliseconds of arithmetic on this thread.
float compute(double ms, float seed) {
  using Clock = std::chrono::steady_clock;
  Clock::time_point end =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double, std::milli>(ms));
  float x = seed;
  do {
    for (int i = 0; i < 4096; ++i)
      x = x * 0.999999f + 1e-6f;
  } while (Clock::now() < end);
  return x;
}

double millisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - start)
      .count();
}
} // namespace

TEST_F(CommConformance, CollectivesProgressWhileTheCallerComputes) {
  const int64_t count = 1 << 20;
  const ElementType f32 = ElementType::F32;
  Buffer send(contributions(f32, 31, rank(), count)), recv(count * 4);
  Buffer agSend(contributions(f32, 32, rank(), count / 4)),
      agRecv(size() * (count / 4) * 4);

  // For the record: the all-reduce waited for at once.
  auto start = std::chrono::steady_clock::now();
  EXPECT_OK(comm().wait(comm().startAllReduce(send.get(), recv.get(), count,
                                              f32, ReduceOp::Sum)));
  double alone = millisecondsSince(start);

  // Started, then ~50 ms of compute, then more while it is not complete,
  // never calling wait(); test() only looks.
  start = std::chrono::steady_clock::now();
  CommHandle ar =
      comm().startAllReduce(send.get(), recv.get(), count, f32, ReduceOp::Sum);
  CommHandle ag =
      comm().startAllGather(agSend.get(), agRecv.get(), count / 4, f32);
  float sink = compute(50, 1.0f);
  bool completeAfter50ms = comm().test(ag);
  while (!comm().test(ag) && millisecondsSince(start) < 30000)
    sink = compute(1, sink);
  bool completeWithoutWait = comm().test(ar) && comm().test(ag);
  double computed = millisecondsSince(start);
  auto waitStart = std::chrono::steady_clock::now();
  EXPECT_OK(comm().wait(ar));
  EXPECT_OK(comm().wait(ag));
  double waited = millisecondsSince(waitStart);

  EXPECT_TRUE(completeWithoutWait)
      << "the collectives did not complete in " << computed
      << " ms of the caller's compute without wait(): no progress on their "
         "own";
  EXPECT_EQ(checkReduced(recv.read(), f32, ReduceOp::Sum, 31, size(), count),
            "");
  computeSink = sink;
  if (rank() == 0)
    std::printf("[ overlap  ] %s, %d ranks: a 4 MiB all-reduce waited for at "
                "once took %.1f ms. Started with a 1 MiB/rank all-gather "
                "behind it: %s after 50 ms of compute, complete after %.1f "
                "ms of compute, then wait() took %.3f ms\n",
                comm().backendName(), size(), alone,
                completeAfter50ms ? "complete" : "not complete", computed,
                waited);
}

TEST_F(CommConformance, UnknownHandlesAreAnErrorButDoNotFail) {
  EXPECT_TRUE(comm().wait(CommHandle{0}));
  EXPECT_TRUE(comm().wait(CommHandle{uint64_t(1) << 60}));
  EXPECT_TRUE(comm().test(CommHandle{uint64_t(1) << 60}));
  EXPECT_FALSE(comm().failure());
  EXPECT_OK(comm().barrier());
}

// --- Failure (run alone: it leaves the communicator failed) -----------------

TEST(CommFailure, BadArgumentsFailTheCommunicatorWithoutHanging) {
  ASSERT_NE(target().comm, nullptr);
  Communicator &comm = *target().comm;
  const ElementType f32 = ElementType::F32;
  Buffer send(contributions(f32, 41, comm.rank(), 5)), recv(5 * 4);
  Buffer bigSend(contributions(f32, 42, comm.rank(), 1 << 20)),
      bigRecv((1 << 20) * 4);
  CommHandle before =
      comm.startAllReduce(send.get(), recv.get(), 5, f32, ReduceOp::Sum);
  CommHandle bad =
      comm.startAllReduce(send.get(), recv.get(), -1, f32, ReduceOp::Sum);
  CommHandle after = comm.startAllReduce(bigSend.get(), bigRecv.get(), 1 << 20,
                                         f32, ReduceOp::Sum);
  EXPECT_OK(comm.wait(before));
  kiln::runtime::Error error = comm.wait(bad);
  ASSERT_TRUE(error);
  EXPECT_NE(error.message().find("negative count"), std::string::npos)
      << error.message();
  EXPECT_NE(error.message().find("all-reduce"), std::string::npos)
      << error.message();
  EXPECT_EQ(error.message().find('\n'), std::string::npos) << "one line";
  EXPECT_EQ(comm.failure().message(), error.message());
  kiln::runtime::Error later = comm.wait(after);
  ASSERT_TRUE(later);
  EXPECT_NE(later.message().find("failed earlier"), std::string::npos)
      << later.message();
  EXPECT_TRUE(comm.barrier());
  EXPECT_EQ(checkReduced(recv.read(), f32, ReduceOp::Sum, 41, comm.size(), 5),
            "")
      << "the collective issued before the failure";
}

// --- The harness itself (see CommTestMain.cpp) ------------------------------

TEST(CommHarness, InjectedFailure) {
  ASSERT_NE(target().comm, nullptr);
  if (target().comm->rank() == injection().failRank)
    ADD_FAILURE() << "failure injected on rank " << target().comm->rank();
}

// Without injection a barrier; with it, one rank never reaches it, which
// must end in the program's watchdog, not a hang.
TEST(CommHarness, InjectedHang) {
  ASSERT_NE(target().comm, nullptr);
  if (target().comm->rank() == injection().hangRank)
    std::this_thread::sleep_for(std::chrono::hours(1));
  EXPECT_OK(target().comm->barrier());
}

// The deadline (setTimeout). Without injection a barrier under a deadline
// that it meets. With it, one rank issues the all-reduce 30 s late while its
// process stays alive: the others' all-reduce must fail after 2 s with a
// line that names that rank and the collective it is at; then they end the
// run (abortRun), as the trainer does, and the ctest case checks the line.
TEST(CommDeadline, LateRankIsNamed) {
  Communicator *comm = target().comm;
  ASSERT_NE(comm, nullptr);
  comm->setTimeout(2);
  if (injection().lateRank < 0) {
    EXPECT_OK(comm->barrier());
    comm->setTimeout(0);
    return;
  }
  if (comm->rank() == injection().lateRank)
    std::this_thread::sleep_for(std::chrono::seconds(30));
  float one = 1.0f, sum = 0.0f;
  kiln::runtime::Error failure = comm->wait(
      comm->startAllReduce(&one, &sum, 1, ElementType::F32, ReduceOp::Sum));
  ASSERT_TRUE(failure) << "the late rank was not waited for";
  std::fprintf(stderr, "[rank %d] error: %s\n", comm->rank(),
               failure.message().c_str());
  comm->abortRun(1);
}
