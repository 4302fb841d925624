//===- CommConformanceProgress.cpp - In flight, progress, failure ---------===//
//
// The part of the conformance suite (CommConformance.cpp) about collectives
// in flight: several waited for in another order, barriers, progress while
// the caller computes (a large collective must complete with only test(),
// which never drives progress, looked at; the 30 s limit is a fallback
// against hanging, not the assertion), unknown handles, point-to-point
// transfers (contents, matching by tag and issue order, 1F1B's crossed
// transfers, independence from the collectives, bad arguments), the failed
// state (run alone; with a transfer's deadline), the collective deadline,
// and the harness's own checks.
//
//===----------------------------------------------------------------------===//

#include "CommConformanceSupport.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
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

// --- Point to point ----------------------------------------------------------
//
// Transfers between pairs of ranks; a test that needs a peer returns at one
// rank (every rank still runs its collectives). With an odd world the last
// rank has no partner and takes no part in the pairs' transfers.

namespace {
/// `count` elements of `type` that rank `from` sends under `salt`, as
/// bytes: every byte depends on all three and on its position.
Bytes payload(ElementType type, uint32_t salt, int from, int64_t count) {
  Bytes b(static_cast<size_t>(count * elementBytes(type)));
  for (size_t j = 0; j < b.size(); ++j) {
    uint32_t x = static_cast<uint32_t>(j) * 2654435761u ^ salt * 40503u ^
                 static_cast<uint32_t>(from + 1) * 97u;
    b[j] = static_cast<unsigned char>((x ^ (x >> 13)) >> 5);
  }
  return b;
}

/// This rank's partner: ranks 2k and 2k + 1 pair up; -1 for the last rank
/// of an odd world.
int partnerOf(int rank, int size) {
  int partner = rank ^ 1;
  return partner < size ? partner : -1;
}

/// Polls test() for up to `seconds`: whether `h` completed. For the tests
/// whose failure would be a deadlock, so that it fails with a line (the
/// watchdog then ends the stuck run).
bool completesWithin(Communicator &comm, CommHandle h, int seconds) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (!comm.test(h)) {
    if (std::chrono::steady_clock::now() > until)
      return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

const ElementType kTransferTypes[] = {ElementType::F32, ElementType::BF16,
                                      ElementType::U8};
} // namespace

// A ping-pong per pair: the even rank sends, the odd one checks what came
// and answers with its own data, which the even rank checks; every type,
// counts 0 (it still matches), 1, 1237 and 2^18.
TEST_F(CommConformance, TransfersPingPong) {
  if (!comm().hasTransfers())
    GTEST_SKIP() << comm().backendName() << " has no point-to-point transfers";
  const int partner = partnerOf(rank(), size());
  if (partner < 0)
    return;
  const bool first = rank() < partner;
  uint32_t salt = 50;
  for (ElementType type : kTransferTypes)
    for (int64_t count :
         {int64_t(0), int64_t(1), int64_t(1237), int64_t(1) << 18}) {
      SCOPED_TRACE(caseName(type, count));
      ++salt;
      const size_t bytes = static_cast<size_t>(count * elementBytes(type));
      Buffer mine(payload(type, salt, rank(), count)), got(bytes);
      if (first) {
        EXPECT_OK(
            comm().wait(comm().startSend(mine.get(), count, type, partner, 7)));
        EXPECT_OK(
            comm().wait(comm().startRecv(got.get(), count, type, partner, 8)));
      } else {
        EXPECT_OK(
            comm().wait(comm().startRecv(got.get(), count, type, partner, 7)));
        EXPECT_OK(
            comm().wait(comm().startSend(mine.get(), count, type, partner, 8)));
      }
      EXPECT_TRUE(got.read() == payload(type, salt, partner, count))
          << "rank " << rank() << " did not get rank " << partner << "'s data";
    }
}

// Sixteen sends to the next rank and sixteen receives from the previous one
// (a ring), all in flight at once, with distinct tags (the largest,
// maxTag(), among them) and sizes; the receives are started in the reverse
// tag order and everything is waited for in a scrambled order, so each
// must have matched by its tag, and each wait must wait for its own
// transfer only.
TEST_F(CommConformance, ManyTransfersInFlightMatchByTag) {
  if (!comm().hasTransfers())
    GTEST_SKIP() << comm().backendName() << " has no point-to-point transfers";
  const int n = size();
  if (n < 2)
    return;
  const int next = (rank() + 1) % n, previous = (rank() + n - 1) % n;
  const int kTransfers = 16;
  auto tagOf = [&](int k) { return k == 0 ? comm().maxTag() : 1000 + k; };
  auto countOf = [](int k) { return int64_t(1) << (k % 8) * 2; };
  std::vector<std::unique_ptr<Buffer>> out, in;
  std::vector<CommHandle> handles;
  for (int k = 0; k < kTransfers; ++k) {
    out.push_back(std::make_unique<Buffer>(
        payload(ElementType::F32, 60 + k, rank(), countOf(k))));
    handles.push_back(comm().startSend(out.back()->get(), countOf(k),
                                       ElementType::F32, next, tagOf(k)));
  }
  in.resize(kTransfers);
  for (int k = kTransfers - 1; k >= 0; --k) {
    in[k] = std::make_unique<Buffer>(countOf(k) * 4);
    handles.push_back(comm().startRecv(in[k]->get(), countOf(k),
                                       ElementType::F32, previous, tagOf(k)));
  }
  for (size_t i = 1; i < handles.size(); ++i)
    EXPECT_LT(handles[i - 1].id, handles[i].id) << "handles follow issue order";
  for (size_t i = 0; i < handles.size(); ++i) {
    size_t at = (i * 7 + 3) % handles.size(); // 7 is prime to 32
    kiln::runtime::Error error = comm().wait(handles[at]);
    EXPECT_FALSE(error) << "transfer " << at << ": " << error.message();
  }
  for (int k = 0; k < kTransfers; ++k)
    EXPECT_TRUE(in[k]->read() ==
                payload(ElementType::F32, 60 + k, previous, countOf(k)))
        << "tag " << tagOf(k);
  EXPECT_OK(comm().wait(handles[0])); // again: the same answer
  EXPECT_TRUE(comm().test(handles[0]));
}

// Eight sends from each even rank to its partner under one tag, with other
// contents: the partner's eight receives (waited for last to first) get
// them in issue order.
TEST_F(CommConformance, SameTagTransfersMatchInIssueOrder) {
  if (!comm().hasTransfers())
    GTEST_SKIP() << comm().backendName() << " has no point-to-point transfers";
  const int partner = partnerOf(rank(), size());
  if (partner < 0)
    return;
  const int kTransfers = 8;
  const int64_t count = 333;
  std::vector<std::unique_ptr<Buffer>> buffers;
  std::vector<CommHandle> handles;
  for (int k = 0; k < kTransfers; ++k) {
    if (rank() < partner) {
      buffers.push_back(std::make_unique<Buffer>(
          payload(ElementType::BF16, 70 + k, rank(), count)));
      handles.push_back(comm().startSend(buffers.back()->get(), count,
                                         ElementType::BF16, partner, 3));
    } else {
      buffers.push_back(std::make_unique<Buffer>(count * 2));
      handles.push_back(comm().startRecv(buffers.back()->get(), count,
                                         ElementType::BF16, partner, 3));
    }
  }
  for (int k = kTransfers - 1; k >= 0; --k)
    EXPECT_OK(comm().wait(handles[k]));
  if (rank() > partner)
    for (int k = 0; k < kTransfers; ++k)
      EXPECT_TRUE(buffers[k]->read() ==
                  payload(ElementType::BF16, 70 + k, partner, count))
          << "receive " << k << " did not get send " << k;
}

// 1F1B's cross: stage 0 sends activation a1, then receives gradient g0;
// stage 1 sends g0, then receives a1; each waits for its receive first.
// With 4 MiB messages (MPI's rendezvous: a send completes only once its
// receive is posted) a backend whose sends block, or complete in issue
// order before later transfers are posted, deadlocks here.
TEST_F(CommConformance, CrossedTransfersDoNotDeadlock) {
  if (!comm().hasTransfers())
    GTEST_SKIP() << comm().backendName() << " has no point-to-point transfers";
  const int partner = partnerOf(rank(), size());
  if (partner < 0)
    return;
  const int64_t count = int64_t(1) << 20; // 4 MiB of f32
  const bool stage0 = rank() < partner;
  Buffer mine(payload(ElementType::F32, stage0 ? 81 : 82, rank(), count));
  Buffer got(count * 4);
  CommHandle send = comm().startSend(mine.get(), count, ElementType::F32,
                                     partner, stage0 ? 1 : 2);
  CommHandle recv = comm().startRecv(got.get(), count, ElementType::F32,
                                     partner, stage0 ? 2 : 1);
  // On a deadlock the waits below hang and the program's watchdog ends the
  // run after this line.
  EXPECT_TRUE(completesWithin(comm(), recv, 20))
      << "the crossed transfers deadlocked";
  EXPECT_OK(comm().wait(recv));
  EXPECT_OK(comm().wait(send));
  EXPECT_TRUE(got.read() ==
              payload(ElementType::F32, stage0 ? 82 : 81, partner, count));
}

// Transfers are outside the collective issue order. The even rank of each
// pair starts a 4 MiB send and a receive, then an all-reduce over every
// rank; its partner starts the matching receive, and the send for that
// receive, only after its own all-reduce completed. So the all-reduce must
// complete while both transfers are pending (a backend that ran transfers
// in the collective queue, or made a collective wait for an earlier
// transfer, deadlocks), and waiting on it says nothing of them.
TEST_F(CommConformance, CollectivesCompleteWhileTransfersArePending) {
  if (!comm().hasTransfers())
    GTEST_SKIP() << comm().backendName() << " has no point-to-point transfers";
  const int partner = partnerOf(rank(), size());
  const int64_t count = int64_t(1) << 20, small = 1237;
  Buffer mine(payload(ElementType::F32, 91, rank(), count)), got(count * 4);
  Buffer answer(payload(ElementType::U8, 92, rank(), small)), answered(small);
  Buffer arSend(contributions(ElementType::F32, 93, rank(), small)),
      arRecv(small * 4);
  const bool early = partner >= 0 && rank() < partner;
  CommHandle send{}, recv{};
  if (early) {
    send = comm().startSend(mine.get(), count, ElementType::F32, partner, 4);
    recv = comm().startRecv(answered.get(), small, ElementType::U8, partner, 5);
  }
  CommHandle ar = comm().startAllReduce(arSend.get(), arRecv.get(), small,
                                        ElementType::F32, ReduceOp::Sum);
  EXPECT_TRUE(completesWithin(comm(), ar, 20))
      << "the all-reduce waited for a pending transfer";
  EXPECT_OK(comm().wait(ar));
  EXPECT_EQ(checkReduced(arRecv.read(), ElementType::F32, ReduceOp::Sum, 93,
                         size(), small),
            "");
  if (partner >= 0 && !early) {
    EXPECT_OK(comm().wait(
        comm().startRecv(got.get(), count, ElementType::F32, partner, 4)));
    EXPECT_OK(comm().wait(
        comm().startSend(answer.get(), small, ElementType::U8, partner, 5)));
    EXPECT_TRUE(got.read() == payload(ElementType::F32, 91, partner, count));
  }
  if (early) {
    EXPECT_OK(comm().wait(recv));
    EXPECT_OK(comm().wait(send));
    EXPECT_TRUE(answered.read() ==
                payload(ElementType::U8, 92, partner, small));
  }
}

// The other way round: a transfer started after a collective that cannot
// complete yet neither waits for it nor is waited for with it. The even
// rank of each pair starts an all-reduce, then a send; once that send's
// wait returned it sends an acknowledgement. Its partner receives both and
// only then starts its all-reduce.
TEST_F(CommConformance, TransfersDoNotWaitForEarlierCollectives) {
  if (!comm().hasTransfers())
    GTEST_SKIP() << comm().backendName() << " has no point-to-point transfers";
  const int partner = partnerOf(rank(), size());
  const int64_t count = 1237;
  Buffer mine(payload(ElementType::F32, 95, rank(), count)), got(count * 4);
  Buffer arSend(contributions(ElementType::F32, 96, rank(), count)),
      arRecv(count * 4);
  unsigned char ack = 1, acked = 0;
  auto allReduce = [&] {
    return comm().startAllReduce(arSend.get(), arRecv.get(), count,
                                 ElementType::F32, ReduceOp::Sum);
  };
  if (partner >= 0 && rank() < partner) {
    CommHandle ar = allReduce();
    CommHandle send =
        comm().startSend(mine.get(), count, ElementType::F32, partner, 9);
    EXPECT_OK(comm().wait(send));
    CommHandle acknowledge =
        comm().startSend(&ack, 1, ElementType::U8, partner, 10);
    EXPECT_OK(comm().wait(ar));
    EXPECT_OK(comm().wait(acknowledge));
  } else if (partner >= 0) {
    CommHandle recv =
        comm().startRecv(got.get(), count, ElementType::F32, partner, 9);
    CommHandle acknowledged =
        comm().startRecv(&acked, 1, ElementType::U8, partner, 10);
    // If they never come, the all-reduce below still lets the other rank
    // go on, and the test fails instead of hanging.
    EXPECT_TRUE(completesWithin(comm(), recv, 10))
        << "the send waited for the all-reduce issued before it";
    EXPECT_TRUE(completesWithin(comm(), acknowledged, 10))
        << "waiting for the send waited for the all-reduce issued before it";
    CommHandle ar = allReduce();
    EXPECT_OK(comm().wait(ar));
    EXPECT_OK(comm().wait(recv));
    EXPECT_OK(comm().wait(acknowledged));
    EXPECT_TRUE(got.read() == payload(ElementType::F32, 95, partner, count));
    EXPECT_EQ(acked, 1);
  } else {
    EXPECT_OK(comm().wait(allReduce()));
  }
  EXPECT_EQ(checkReduced(arRecv.read(), ElementType::F32, ReduceOp::Sum, 96,
                         size(), count),
            "");
}

// A transfer and a send-recv collective between the same ranks keep to
// themselves, whatever their tags: each rank's receive from the previous
// rank, under tag 0, is started before a send-recv (shift 1) and its send
// only after, so a receive that took the collective's message instead
// would leave the collective waiting.
TEST_F(CommConformance, TransfersAndSendRecvDoNotMix) {
  if (!comm().hasTransfers())
    GTEST_SKIP() << comm().backendName() << " has no point-to-point transfers";
  const int n = size();
  if (n < 2)
    return;
  const int next = (rank() + 1) % n, previous = (rank() + n - 1) % n;
  const int64_t count = 100;
  Buffer mine(payload(ElementType::F32, 97, rank(), count)), got(count * 4);
  Buffer ringSend(payload(ElementType::F32, 98, rank(), count)),
      ringRecv(count * 4);
  CommHandle recv =
      comm().startRecv(got.get(), count, ElementType::F32, previous, 0);
  CommHandle ring = comm().startSendRecv(ringSend.get(), ringRecv.get(), count,
                                         ElementType::F32, 1);
  EXPECT_TRUE(completesWithin(comm(), ring, 20))
      << "the send-recv's message went to the transfer";
  EXPECT_OK(comm().wait(ring));
  CommHandle send =
      comm().startSend(mine.get(), count, ElementType::F32, next, 0);
  EXPECT_OK(comm().wait(recv));
  EXPECT_OK(comm().wait(send));
  EXPECT_TRUE(ringRecv.read() ==
              payload(ElementType::F32, 98, previous, count));
  EXPECT_TRUE(got.read() == payload(ElementType::F32, 97, previous, count));
}

// Bad arguments fail the transfer's handle, at once, with one line naming
// it, and not the communicator: a collective after them still runs.
TEST_F(CommConformance, BadTransfersFailTheirHandleOnly) {
  std::vector<float> data(4);
  const ElementType f32 = ElementType::F32;
  const std::string backend = comm().backendName();
  const int other = (rank() + 1) % size();
  struct Case {
    bool send;
    int64_t count;
    int peer, tag;
    bool null;
    std::string why;
  };
  std::vector<Case> cases = {
      {true, 4, size(), 0, false,
       "peer " + std::to_string(size()) +
           " is not a rank of this communicator of " + std::to_string(size())},
      {false, 4, -1, 0, false,
       "peer -1 is not a rank of this communicator of " +
           std::to_string(size())},
      {true, 4, rank(), 0, false,
       "peer " + std::to_string(rank()) +
           " is this rank: a transfer needs another rank"},
  };
  if (size() > 1) {
    std::string range = "[0, " + std::to_string(comm().maxTag()) + "]";
    cases.push_back({false, 4, other, -1, false, "tag -1 outside " + range});
    if (comm().maxTag() < std::numeric_limits<int>::max())
      cases.push_back(
          {true, 4, other, comm().maxTag() + 1, false,
           "tag " + std::to_string(comm().maxTag() + 1) + " outside " + range});
    cases.push_back({true, -1, other, 0, false, "negative count"});
    cases.push_back({false, 4, other, 0, true, "null buffer"});
  }
  for (const Case &c : cases) {
    CommHandle h = c.send ? comm().startSend(c.null ? nullptr : data.data(),
                                             c.count, f32, c.peer, c.tag)
                          : comm().startRecv(c.null ? nullptr : data.data(),
                                             c.count, f32, c.peer, c.tag);
    std::string want = backend + (c.send ? " send #" : " recv #") +
                       std::to_string(h.id) + " (" + std::to_string(c.count) +
                       " x f32, " + (c.send ? "to" : "from") + " rank " +
                       std::to_string(c.peer) + ", tag " +
                       std::to_string(c.tag) + "): " + c.why;
    EXPECT_TRUE(comm().test(h)) << want;
    kiln::runtime::Error error = comm().wait(h);
    EXPECT_EQ(error.message(), want);
    EXPECT_EQ(comm().wait(h).message(), want) << "the same answer again";
  }
  EXPECT_FALSE(comm().failure()) << comm().failure().message();
  allReduceChecked(ElementType::F32, ReduceOp::Sum, 5, 94);
}

// The MPI backend's check of the other side's count (a receive of another
// count than its send's fails, its handle only).
TEST_F(CommConformance, MpiReceiveOfAnotherCountFails) {
  const int partner = partnerOf(rank(), size());
  if (std::string(comm().backendName()) != "mpi")
    GTEST_SKIP() << "what a count mismatch does is the MPI backend's";
  std::vector<float> five(5, 1.0f), got(5), got3(3);
  if (partner < 0) {
    // No partner: only the barrier below.
  } else if (rank() < partner) {
    EXPECT_OK(comm().wait(
        comm().startSend(five.data(), 3, ElementType::F32, partner, 6)));
    EXPECT_OK(comm().wait(
        comm().startSend(five.data(), 5, ElementType::F32, partner, 6)));
  } else {
    CommHandle shorter =
        comm().startRecv(got.data(), 5, ElementType::F32, partner, 6);
    CommHandle longer =
        comm().startRecv(got3.data(), 3, ElementType::F32, partner, 6);
    EXPECT_EQ(comm().wait(shorter).message(),
              "mpi recv #" + std::to_string(shorter.id) +
                  " (5 x f32, from rank " + std::to_string(partner) +
                  ", tag 6): the matching send had 3 elements");
    EXPECT_EQ(comm().wait(longer).message(),
              "mpi recv #" + std::to_string(longer.id) +
                  " (3 x f32, from rank " + std::to_string(partner) +
                  ", tag 6): the matching send has more than 3 elements");
  }
  EXPECT_FALSE(comm().failure()) << comm().failure().message();
  EXPECT_OK(comm().barrier());
}

// --- Failure (run alone: it leaves the communicator failed) -----------------

// A transfer's deadline, on a communicator split from the world for it (so
// the world stays usable; defined first so that it runs before the next
// test fails the world): rank 0 receives from rank 1 with a 1 s deadline,
// rank 1 sends only after that failed. The line names the transfer and its
// peer, the communicator is failed (a later transfer is not run), and the
// world goes on.
TEST(CommFailure, ALateTransferFailsAtTheDeadline) {
  ASSERT_NE(target().comm, nullptr);
  Communicator &world = *target().comm;
  if (world.size() < 2)
    GTEST_SKIP() << "needs two ranks";
  kiln::runtime::Expected<std::unique_ptr<Communicator>> made =
      world.split(0, world.rank());
  ASSERT_TRUE(made) << made.error().message();
  Communicator &comm = **made;
  // MPI may still write it after the deadline: it outlives the test.
  static float late[4];
  float sent[4] = {1, 2, 3, 4};
  if (comm.rank() == 0) {
    comm.setTimeout(1);
    auto start = std::chrono::steady_clock::now();
    CommHandle h = comm.startRecv(late, 4, ElementType::F32, 1, 5);
    kiln::runtime::Error error = comm.wait(h);
    double ms = millisecondsSince(start);
    EXPECT_EQ(error.message(),
              std::string(comm.backendName()) + " recv #" +
                  std::to_string(h.id) +
                  " (4 x f32, from rank 1, tag 5): not complete after 1 s "
                  "(the deadline, comm.train_timeout_seconds); rank 1 has "
                  "not sent it (stopped, hung, or its transfers do not match "
                  "this one)");
    EXPECT_GE(ms, 900);
    EXPECT_LT(ms, 10000);
    EXPECT_EQ(comm.failure().message(), error.message());
    kiln::runtime::Error after =
        comm.wait(comm.startSend(sent, 4, ElementType::F32, 1, 6));
    EXPECT_NE(after.message().find("not run: the communicator failed earlier"),
              std::string::npos)
        << after.message();
  }
  EXPECT_OK(world.barrier());
  if (comm.rank() == 1)
    EXPECT_OK(comm.wait(comm.startSend(sent, 4, ElementType::F32, 0, 5)));
  EXPECT_OK(world.barrier());
}

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
  // Rank 0's handles run ahead of the others' (transfers, here refused at
  // once, take ids too): ranks are still told apart by their collectives,
  // so rank 0 names only the late rank.
  if (comm->rank() == 0)
    for (int i = 0; i < 3; ++i)
      EXPECT_TRUE(comm->wait(
          comm->startSend(nullptr, 0, ElementType::F32, comm->rank(), 0)));
  float one = 1.0f, sum = 0.0f;
  kiln::runtime::Error failure = comm->wait(
      comm->startAllReduce(&one, &sum, 1, ElementType::F32, ReduceOp::Sum));
  ASSERT_TRUE(failure) << "the late rank was not waited for";
  std::fprintf(stderr, "[rank %d] error: %s\n", comm->rank(),
               failure.message().c_str());
  comm->abortRun(1);
}
