//===- CommConformance.cpp - The conformance suite of Communicator.h ------===//
//
// Every backend must pass this file unchanged (see CommConformance.h for
// how it is given a backend). What rank r contributes to element i is a
// deterministic function of (salt, r, i), so each rank computes what every
// rank sent and checks its results bit for bit against a reference written
// here, independently of the library, from docs/communicator.md: an f32
// fold in ring order (chunk j: ranks j+1, j+2, ... mod N, ending with j;
// for an all-reduce, chunk j is the j-th of N near-equal chunks), the max
// rule (NaN wins, then the larger value, +0 above -0), and for bf16 one
// round-to-nearest-even at the end.
//
// The contributions mix signs and magnitudes over 2^-10..2^10, so that for
// N >= 3 ranks another summation order gives other bits (checked, so the
// bit-exact comparisons really pin the order down); hand-picked values
// show the bf16 rounding happens once, after an f32 (not f64) fold.
//
// A backend whose exactRingOrderReduction() is false (NCCL: its library
// picks the order, and adds bf16 in bf16) is held to a bound instead
// wherever the result depends on the order (checkReduced): a sum within
// N * u * sum|c_r| of the exact sum (u = 2^-24 for f32, 2^-8 for bf16:
// N-1 additions in any order, each rounded once, and the last rounding),
// a max equal in value to the largest contribution (+0 and -0 alike; a
// NaN contribution to a max is not checked, NCCL's fmaxf drops it).
// All-gathers, every rank getting the same bits, the failed state and the
// special values under sum (exact in any order) stay exact.
//
// The reference and fixture are in CommConformanceSupport.{h,cpp}; the
// tests of collectives in flight, progress (a large collective must
// complete while the caller computes, seen only through test(), which
// never drives progress), the failed state and the harness are in
// CommConformanceProgress.cpp.
//
//===----------------------------------------------------------------------===//

#include "CommConformanceSupport.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

using namespace kiln::runtime::comm;
using namespace kiln::runtime::comm::conformance;

TEST_F(CommConformance, RanksAreDistinctAndNumberedFromZero) {
  EXPECT_GE(size(), 1);
  EXPECT_GE(rank(), 0);
  EXPECT_LT(rank(), size());
  Bytes mine(4);
  put(mine, ElementType::F32, 0, static_cast<float>(rank()));
  Buffer send(mine), recv(4 * size());
  EXPECT_OK(comm().wait(
      comm().startAllGather(send.get(), recv.get(), 1, ElementType::F32)));
  Bytes all = recv.read();
  for (int r = 0; r < size(); ++r)
    EXPECT_EQ(floatOf(bitsAt(all, ElementType::F32, r)), float(r))
        << "slot " << r;
}

TEST_F(CommConformance, AllGather) {
  for (ElementType type : kTypes)
    for (int64_t count : kCounts) {
      SCOPED_TRACE(caseName(type, count));
      Buffer send(contributions(type, 1, rank(), count));
      Buffer recv(size() * count * bytesOf(type));
      EXPECT_OK(comm().wait(
          comm().startAllGather(send.get(), recv.get(), count, type)));
      Bytes want(size() * count * bytesOf(type));
      for (int r = 0; r < size(); ++r)
        for (int64_t i = 0; i < count; ++i)
          put(want, type, r * count + i, contribution(type, 1, r, i));
      EXPECT_EQ(compareBits(recv.read(), want, type), "");
    }
}

// One ring step for every shift: a rank receives what the rank `shift`
// places before it sent (shift 0: its own buffer).
TEST_F(CommConformance, SendRecv) {
  for (int shift = 0; shift < size(); ++shift)
    for (ElementType type : kTypes)
      for (int64_t count : kCounts) {
        SCOPED_TRACE(caseName(type, count) + ", shift " +
                     std::to_string(shift));
        Buffer send(contributions(type, 4, rank(), count));
        Buffer recv(count * bytesOf(type));
        EXPECT_OK(comm().wait(
            comm().startSendRecv(send.get(), recv.get(), count, type, shift)));
        int from = (rank() - shift + size()) % size();
        Bytes want(count * bytesOf(type));
        for (int64_t i = 0; i < count; ++i)
          put(want, type, i, contribution(type, 4, from, i));
        EXPECT_EQ(compareBits(recv.read(), want, type), "");
      }
}

TEST_F(CommConformance, ReduceScatter) {
  for (ElementType type : kTypes)
    for (ReduceOp op : kOps)
      for (int64_t count : kCounts) {
        SCOPED_TRACE(caseName(type, op, count));
        // Element j*count + i of the send buffer goes to rank j.
        Buffer send(contributions(type, 2, rank(), size() * count));
        Buffer recv(count * bytesOf(type));
        EXPECT_OK(comm().wait(comm().startReduceScatter(send.get(), recv.get(),
                                                        count, type, op)));
        EXPECT_EQ(checkReduced(recv.read(), type, op, 2, size(), count,
                               rank() * count, rank()),
                  "");
      }
}

TEST_F(CommConformance, AllReduce) {
  // Counts below the world size leave some ranks without a chunk.
  std::vector<int64_t> counts(std::begin(kCounts), std::end(kCounts));
  counts.insert(counts.end(), {2, 3, 5});
  for (ElementType type : kTypes)
    for (ReduceOp op : kOps)
      for (int64_t count : counts) {
        SCOPED_TRACE(caseName(type, op, count));
        allReduceChecked(type, op, count, 3);
      }
}

TEST_F(CommConformance, AllReduceInPlace) {
  for (ElementType type : kTypes)
    for (int64_t count : {int64_t(1237), int64_t(1) << 16}) {
      SCOPED_TRACE(caseName(type, ReduceOp::Sum, count));
      Buffer buffer(contributions(type, 4, rank(), count));
      EXPECT_OK(comm().wait(comm().startAllReduce(buffer.get(), buffer.get(),
                                                  count, type, ReduceOp::Sum)));
      EXPECT_EQ(
          checkReduced(buffer.read(), type, ReduceOp::Sum, 4, size(), count),
          "");
    }
}

TEST_F(CommConformance, AllReduceGivesEveryRankTheSameBits) {
  const int64_t count = 4099;
  for (ElementType type : kTypes)
    for (ReduceOp op : kOps) {
      SCOPED_TRACE(caseName(type, op, count));
      Bytes mine = allReduceChecked(type, op, count, 5);
      // Gather every rank's result and compare it with this rank's.
      Buffer send(mine), recv(size() * mine.size());
      EXPECT_OK(comm().wait(
          comm().startAllGather(send.get(), recv.get(), count, type)));
      Bytes all = recv.read();
      for (int r = 0; r < size(); ++r) {
        Bytes theirs(all.begin() + r * mine.size(),
                     all.begin() + (r + 1) * mine.size());
        EXPECT_EQ(compareBits(theirs, mine, type), "") << "rank " << r;
      }
    }
}

// The bit-exact comparisons above pin the summation order down only if
// another order would give other bits: check that for this data.
TEST_F(CommConformance, SumsDependOnTheOrderForThisData) {
  const int64_t count = 1 << 12;
  allReduceChecked(ElementType::F32, ReduceOp::Sum, count, 6);
  if (size() < 3)
    return; // two addends commute: every order gives the same bits
  int64_t differ = 0;
  std::vector<float> c(size());
  for (int64_t i = 0; i < count; ++i) {
    for (int r = 0; r < size(); ++r)
      c[r] = contribution(ElementType::F32, 6, r, i);
    int chunk = allReduceChunk(i, count, size());
    float forward = refFold(ReduceOp::Sum, c.data(), size(), chunk);
    // The same ring, the other way round.
    float backward = c[chunk];
    for (int k = 1; k < size(); ++k)
      backward = backward + c[(chunk - k + size()) % size()];
    differ += bitsOf(forward) != bitsOf(backward);
  }
  EXPECT_GT(differ, count / 100)
      << "the test data does not distinguish summation orders";
}

// bf16 sums: folded in f32 in ring order, rounded once at the end. Three
// elements whose result tells these apart from rounding every partial sum
// and from folding in f64 (for N >= 3; with fewer addends all agree):
//   0: 1 + 3*2^-10 + 3*2^-10 + ...  each partial rounds back to 1, but the
//      total 1 + 3(N-1)*2^-10 rounds to 1 + 2^-7 once N >= 3;
//   1: 1, 2^-30, 2^-8, 0, ...  in f32 the 2^-30 is lost, leaving the tie
//      1 + 2^-8, which rounds to even (1); in f64 it breaks the tie upward;
//   2: element 0 negated.
namespace {
float roundingCase(int rank, int64_t element) {
  float x = 0;
  if (element % 3 == 1)
    x = rank == 0   ? 1.0f
        : rank == 1 ? std::ldexp(1.0f, -30)
        : rank == 2 ? std::ldexp(1.0f, -8)
                    : 0.0f;
  else
    x = rank == 0 ? 1.0f : 3 * std::ldexp(1.0f, -10);
  return element % 3 == 2 ? -x : x;
}
} // namespace

TEST_F(CommConformance, Bf16SumsRoundOnceAfterAnF32Fold) {
  const ElementType bf16 = ElementType::BF16;
  const int n = size();
  // All-reduce over 3 elements, reduce-scatter over 3 per rank.
  Bytes mineAr(3 * 2), mineRs(n * 3 * 2);
  for (int64_t e = 0; e < 3; ++e)
    put(mineAr, bf16, e, roundingCase(rank(), e));
  for (int64_t e = 0; e < 3 * n; ++e)
    put(mineRs, bf16, e, roundingCase(rank(), e));
  Buffer arSend(mineAr), arRecv(3 * 2), rsSend(mineRs), rsRecv(3 * 2);
  CommHandle ar =
      comm().startAllReduce(arSend.get(), arRecv.get(), 3, bf16, ReduceOp::Sum);
  CommHandle rs = comm().startReduceScatter(rsSend.get(), rsRecv.get(), 3, bf16,
                                            ReduceOp::Sum);
  EXPECT_OK(comm().wait(ar));
  EXPECT_OK(comm().wait(rs));

  // The specification's result, written out; and the two other readings.
  const uint16_t onePlus = n >= 3 ? 0x3f81 : 0x3f80; // 1 + 2^-7 or 1
  const uint16_t expected[3] = {onePlus, 0x3f80,
                                static_cast<uint16_t>(onePlus | 0x8000)};
  for (int64_t e = 0; e < 3; ++e) {
    std::vector<float> c(n);
    for (int r = 0; r < n; ++r)
      c[r] = roundingCase(r, e);
    uint16_t spec =
        refBf16(refFold(ReduceOp::Sum, c.data(), n, allReduceChunk(e, 3, n)));
    float eachRounded = c[0];
    double inF64 = c[0];
    for (int r = 1; r < n; ++r) {
      eachRounded = widenBf16(refBf16(eachRounded + c[r]));
      inF64 += c[r];
    }
    SCOPED_TRACE("element " + std::to_string(e));
    EXPECT_EQ(spec, expected[e]);
    if (n >= 3 && e != 1) {
      EXPECT_NE(spec, refBf16(eachRounded)) << "case does not tell apart";
    }
    if (n >= 3 && e == 1) {
      EXPECT_NE(spec, refBf16FromDouble(inF64)) << "case does not tell apart";
    }
    // In bf16 arithmetic (NCCL) the results differ from N = 3 on, as the
    // cases are made to show; below that one addition rounds the same.
    if (!exactOrder() && n >= 3)
      continue;
    Bytes got = arRecv.read(), gotRs = rsRecv.read();
    EXPECT_EQ(bitsAt(got, bf16, e), expected[e]) << "all-reduce";
    EXPECT_EQ(bitsAt(gotRs, bf16, e), expected[e]) << "reduce-scatter";
  }
}

// Infinities, NaN and signed zeros under both reductions and both types.
//   0: +inf on rank 0, 1 elsewhere      4: +0 on rank 0, -0 elsewhere
//   1: NaN on the last rank, 2 elsewhere 5: +inf on rank 0, -inf on the last
//   2: -0 everywhere                    6: -(r + 1) on rank r
//   3: -0 on rank 0, +0 elsewhere
namespace {
float specialCase(int rank, int size, int64_t element) {
  const float inf = std::numeric_limits<float>::infinity();
  bool first = rank == 0, last = rank == size - 1;
  switch (element) {
  case 0:
    return first ? inf : 1.0f;
  case 1:
    return last ? std::numeric_limits<float>::quiet_NaN() : 2.0f;
  case 2:
    return -0.0f;
  case 3:
    return first ? -0.0f : 0.0f;
  case 4:
    return first ? 0.0f : -0.0f;
  case 5:
    return first ? inf : last ? -inf : 1.0f;
  default:
    return -static_cast<float>(rank + 1);
  }
}
} // namespace

TEST_F(CommConformance, SpecialValues) {
  const int64_t count = 7;
  const int n = size();
  for (ElementType type : kTypes)
    for (ReduceOp op : kOps) {
      SCOPED_TRACE(caseName(type, op, count));
      Bytes mine(count * bytesOf(type)), mineRs(n * count * bytesOf(type));
      for (int64_t e = 0; e < count; ++e)
        put(mine, type, e, specialCase(rank(), n, e));
      for (int64_t e = 0; e < n * count; ++e)
        put(mineRs, type, e, specialCase(rank(), n, e % count));
      Bytes want(count * bytesOf(type));
      std::vector<float> c(n);
      for (int64_t e = 0; e < count; ++e) {
        for (int r = 0; r < n; ++r)
          c[r] = specialCase(r, n, e);
        put(want, type, e,
            refFold(op, c.data(), n, allReduceChunk(e, count, n)));
      }
      Buffer arSend(mine), arRecv(mine.size()), rsSend(mineRs),
          rsRecv(mine.size());
      CommHandle ar =
          comm().startAllReduce(arSend.get(), arRecv.get(), count, type, op);
      CommHandle rs = comm().startReduceScatter(rsSend.get(), rsRecv.get(),
                                                count, type, op);
      EXPECT_OK(comm().wait(rs));
      EXPECT_OK(comm().wait(ar));
      // Sums of these are the same in any order; maxes are exact only
      // under the specified max rule.
      bool exact = exactOrder() || op == ReduceOp::Sum;
      EXPECT_EQ(exact ? compareBits(arRecv.read(), want, type, true)
                      : compareMaxValues(arRecv.read(), want, type),
                "")
          << "all-reduce";
      EXPECT_EQ(exact ? compareBits(rsRecv.read(), want, type, true)
                      : compareMaxValues(rsRecv.read(), want, type),
                "")
          << "reduce-scatter";
      // Spelled out for the cases that do not depend on N.
      Bytes got = arRecv.read();
      uint32_t negZero = type == ElementType::F32 ? 0x80000000u : 0x8000u;
      EXPECT_EQ(bitsAt(got, type, 2), negZero) << "-0 everywhere";
      if (exact) {
        EXPECT_TRUE(isNanBits(bitsAt(got, type, 1), type)) << "NaN propagates";
      }
      EXPECT_EQ(bitsAt(got, type, 0), bitsAt(want, type, 0));
    }
}
