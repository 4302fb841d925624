// The arena planner. Its first fit against the scan it replaced: the same
// offsets and peak for random lifetimes. Its largest-first placement: the
// fewest bytes where every buffer has one size (the bytes live at the
// fullest step), the same arena whatever the order of the requests, and the
// bytes live at the fullest step where a first fit leaves a hole. Its
// long-lived-first placement: the bytes live at the fullest step where a
// long buffer spans a larger temporary. planBuffers takes the smallest of
// the three. Everywhere, no two buffers live at the same
// step share bytes. LiveBytes against a count of the buffers at each step.
#include "kiln/Transforms/BufferPlanner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <tuple>

using namespace kiln;

namespace {
/// First fit by scanning the live buffers in offset order, in order of first
/// use: what planBuffers computed up to 2026-11 (quadratic in the buffers).
std::vector<int64_t> scanFirstFit(const std::vector<BufferRequest> &req,
                                  int64_t alignment, int64_t &peak) {
  std::vector<size_t> order(req.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return req[a].first < req[b].first;
  });
  std::vector<int64_t> sizes;
  for (const BufferRequest &r : req)
    sizes.push_back((std::max<int64_t>(r.bytes, 1) + alignment - 1) /
                    alignment * alignment);
  std::vector<int64_t> offsets(req.size(), 0);
  std::vector<size_t> active;
  peak = 0;
  for (size_t i : order) {
    active.erase(
        std::remove_if(active.begin(), active.end(),
                       [&](size_t a) { return req[a].last < req[i].first; }),
        active.end());
    int64_t offset = 0;
    for (size_t a : active) {
      if (offsets[a] - offset >= sizes[i])
        break;
      offset = std::max(offset, offsets[a] + sizes[a]);
    }
    offsets[i] = offset;
    peak = std::max(peak, offset + sizes[i]);
    active.insert(std::upper_bound(active.begin(), active.end(), i,
                                   [&](size_t x, size_t y) {
                                     return offsets[x] < offsets[y];
                                   }),
                  i);
  }
  return offsets;
}

/// planBuffers at 64-byte alignment, with the requests' live bytes.
std::vector<int64_t> plan(const std::vector<BufferRequest> &req,
                          int64_t &peak) {
  std::vector<int64_t> sizes = alignedSizes(req, 64);
  return planBuffers(req, sizes, LiveBytes(req, sizes), peak);
}

/// The most bytes live at one step: no placement needs fewer.
int64_t mostLive(const std::vector<BufferRequest> &req,
                 const std::vector<int64_t> &sizes) {
  std::map<int64_t, int64_t> change;
  for (size_t i = 0; i < req.size(); ++i) {
    change[req[i].first] += sizes[i];
    change[req[i].last + 1] -= sizes[i];
  }
  int64_t live = 0, most = 0;
  for (auto [step, bytes] : change)
    most = std::max(most, live += bytes);
  return most;
}

/// `n` buffers over `steps` steps; a share of them live long (saved
/// activations), the rest a few steps; sizes from a few shapes, as a
/// transformer's, or any size.
std::vector<BufferRequest> randomRequests(std::mt19937_64 &rng, int n,
                                          int64_t steps, double longShare,
                                          bool fewSizes) {
  std::uniform_int_distribution<int64_t> step(0, steps - 1);
  std::uniform_real_distribution<double> unit(0, 1);
  std::uniform_int_distribution<int64_t> anySize(0, 100000);
  const int64_t shapes[] = {4, 64, 1000, 4096, 16384, 65536};
  std::vector<BufferRequest> req;
  for (int i = 0; i < n; ++i) {
    int64_t first = step(rng);
    int64_t life = unit(rng) < longShare
                       ? static_cast<int64_t>(unit(rng) * steps)
                       : static_cast<int64_t>(unit(rng) * 4);
    int64_t bytes = fewSizes ? shapes[rng() % 6] : anySize(rng);
    req.push_back({bytes, first, std::min(first + life, steps)});
  }
  return req;
}

/// The first buffer whose offset differs, or -1 (a whole-vector EXPECT_EQ
/// would print tens of thousands of numbers).
int64_t firstDifference(const std::vector<int64_t> &a,
                        const std::vector<int64_t> &b) {
  if (a.size() != b.size())
    return 0;
  auto [x, y] = std::mismatch(a.begin(), a.end(), b.begin());
  return x == a.end() ? -1 : x - a.begin();
}

void expectDisjoint(const std::vector<BufferRequest> &req,
                    const std::vector<int64_t> &offsets, int64_t alignment) {
  std::vector<int64_t> sizes = alignedSizes(req, alignment);
  for (size_t a = 0; a < req.size(); ++a)
    for (size_t b = a + 1; b < req.size(); ++b) {
      if (req[a].last < req[b].first || req[b].last < req[a].first)
        continue;
      ASSERT_TRUE(offsets[a] + sizes[a] <= offsets[b] ||
                  offsets[b] + sizes[b] <= offsets[a])
          << "buffers " << a << " and " << b << " overlap";
    }
}

TEST(BufferPlanner, FirstFitReusesTheLowestGapThatFits) {
  // 0 and 1 live together; 2 starts after 0 ended and fits in its place;
  // 3 does not fit there and goes past 1.
  std::vector<BufferRequest> req = {
      {128, 0, 1}, {64, 0, 5}, {100, 2, 5}, {200, 2, 5}};
  int64_t peak = 0;
  std::vector<int64_t> offsets =
      firstFitBuffers(req, alignedSizes(req, 64), peak);
  EXPECT_EQ(offsets, (std::vector<int64_t>{0, 128, 0, 192}));
  EXPECT_EQ(peak, 448);
}

TEST(BufferPlanner, FirstFitSameOffsetsAsTheScan) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 200; ++round) {
    int n = 1 + static_cast<int>(rng() % 400);
    std::vector<BufferRequest> req = randomRequests(
        rng, n, 1 + rng() % 300, (rng() % 5) / 4.0, rng() % 2 == 0);
    int64_t peak = 0, scanPeak = 0;
    std::vector<int64_t> offsets =
        firstFitBuffers(req, alignedSizes(req, 64), peak);
    ASSERT_EQ(firstDifference(offsets, scanFirstFit(req, 64, scanPeak)), -1)
        << "round " << round;
    ASSERT_EQ(peak, scanPeak) << "round " << round;
    expectDisjoint(req, offsets, 64);
  }
}

TEST(BufferPlanner, FirstFitManyLongLivedBuffers) {
  // As many buffers as a 1024-layer step, half of them live across it.
  std::mt19937_64 rng(11);
  std::vector<BufferRequest> req = randomRequests(rng, 20000, 40000, 0.5, true);
  int64_t peak = 0, scanPeak = 0;
  EXPECT_EQ(firstDifference(firstFitBuffers(req, alignedSizes(req, 64), peak),
                            scanFirstFit(req, 64, scanPeak)),
            -1);
  EXPECT_EQ(peak, scanPeak);
}

TEST(BufferPlanner, LargestFirstFillsTheHoleFirstFitLeaves) {
  // 1 is saved from step 1 to 5 (an activation for the backward); 0 and 2
  // are temporaries around it, 3 a gradient. In order of first use, 1 lands
  // above 0, and 3 does not fit in the hole 0 and 2 leave below it. Largest
  // first, 3 goes at 0, 1 above it, and 0 and 2 below 1: the arena is the
  // most bytes live at one step (1 and 3).
  std::vector<BufferRequest> req = {
      {64, 0, 1}, {128, 1, 5}, {128, 2, 3}, {192, 4, 5}};
  std::vector<int64_t> sizes = alignedSizes(req, 64);
  int64_t fitPeak = 0, peak = 0, chosen = 0;
  firstFitBuffers(req, sizes, fitPeak);
  EXPECT_EQ(fitPeak, 384);
  std::vector<int64_t> offsets = largestFirstBuffers(req, sizes, peak);
  EXPECT_EQ(offsets, (std::vector<int64_t>{0, 192, 0, 0}));
  EXPECT_EQ(peak, 320);
  EXPECT_EQ(peak, mostLive(req, sizes));
  EXPECT_EQ(plan(req, chosen), offsets);
  EXPECT_EQ(chosen, 320);
}

TEST(BufferPlanner, TakesFirstFitWhereItIsSmaller) {
  // Largest first puts 0 at offset 0 beside 2 and 3, and 1, live with 0
  // and 3, then has to go past both; in order of first use 1 takes the
  // place 2 left.
  std::vector<BufferRequest> req = {
      {192, 4, 6}, {64, 2, 5}, {192, 0, 1}, {192, 0, 2}, {64, 3, 5}};
  std::vector<int64_t> sizes = alignedSizes(req, 64);
  int64_t fitPeak = 0, largestPeak = 0, chosen = 0;
  std::vector<int64_t> fit = firstFitBuffers(req, sizes, fitPeak);
  largestFirstBuffers(req, sizes, largestPeak);
  EXPECT_EQ(fitPeak, 384);
  EXPECT_EQ(largestPeak, 448);
  EXPECT_EQ(plan(req, chosen), fit);
  EXPECT_EQ(chosen, 384);
}

TEST(BufferPlanner, LongLivedFirstWhereALongBufferSpansATemporary) {
  // 3 lives from step 0 to 6 (a saved activation), 0 is a larger temporary
  // at step 4. Largest first puts 0 and 2 at offset 0, 1 above 2, and 3
  // must then pass both 0 and 1. Long-lived first (1, 2 and 3 live over
  // more than an eighth of the 14 steps) puts 2 and 3 at 0, 1 above 2, and
  // 0 above 3: the arena is the most bytes live at one step (0 and 3, or 1
  // and 2).
  std::vector<BufferRequest> req = {
      {192, 4, 4}, {64, 6, 7}, {192, 7, 13}, {64, 0, 6}};
  std::vector<int64_t> sizes = alignedSizes(req, 64);
  int64_t largestPeak = 0, fitPeak = 0, peak = 0, chosen = 0;
  largestFirstBuffers(req, sizes, largestPeak);
  firstFitBuffers(req, sizes, fitPeak);
  EXPECT_EQ(largestPeak, 320);
  EXPECT_EQ(fitPeak, 320);
  std::vector<int64_t> offsets = longLivedFirstBuffers(req, sizes, peak);
  EXPECT_EQ(offsets, (std::vector<int64_t>{64, 192, 0, 0}));
  EXPECT_EQ(peak, 256);
  EXPECT_EQ(peak, mostLive(req, sizes));
  EXPECT_EQ(plan(req, chosen), offsets);
  EXPECT_EQ(chosen, 256);
}

TEST(BufferPlanner, LargestFirstIsOptimalForOneSize) {
  // With one size, placing in order of first use at the lowest free slot
  // colours an interval graph with as many colours as its largest clique.
  std::mt19937_64 rng(5);
  for (int round = 0; round < 200; ++round) {
    std::vector<BufferRequest> req =
        randomRequests(rng, 1 + static_cast<int>(rng() % 400), 1 + rng() % 300,
                       (rng() % 5) / 4.0, false);
    for (BufferRequest &r : req)
      r.bytes = 4096;
    std::vector<int64_t> sizes = alignedSizes(req, 64);
    int64_t peak = 0;
    std::vector<int64_t> offsets = largestFirstBuffers(req, sizes, peak);
    ASSERT_EQ(peak, mostLive(req, sizes)) << "round " << round;
    expectDisjoint(req, offsets, 64);
  }
}

TEST(BufferPlanner, LargestFirstDoesNotDependOnTheOrder) {
  // The same requests shuffled: the same arena, and each request the same
  // offset (requests alike in size and lifetime may trade places).
  std::mt19937_64 rng(13);
  for (int round = 0; round < 100; ++round) {
    std::vector<BufferRequest> req =
        randomRequests(rng, 1 + static_cast<int>(rng() % 400), 1 + rng() % 300,
                       (rng() % 5) / 4.0, rng() % 2 == 0);
    std::vector<BufferRequest> shuffled = req;
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    int64_t peak = 0, shuffledPeak = 0;
    std::vector<int64_t> a =
        largestFirstBuffers(req, alignedSizes(req, 64), peak);
    std::vector<int64_t> b =
        largestFirstBuffers(shuffled, alignedSizes(shuffled, 64), shuffledPeak);
    ASSERT_EQ(peak, shuffledPeak) << "round " << round;
    using Key = std::tuple<int64_t, int64_t, int64_t, int64_t>;
    std::vector<Key> x, y;
    for (size_t i = 0; i < req.size(); ++i) {
      x.emplace_back(req[i].bytes, req[i].first, req[i].last, a[i]);
      y.emplace_back(shuffled[i].bytes, shuffled[i].first, shuffled[i].last,
                     b[i]);
    }
    std::sort(x.begin(), x.end());
    std::sort(y.begin(), y.end());
    ASSERT_EQ(x, y) << "round " << round;
    expectDisjoint(req, a, 64);
  }
}

TEST(BufferPlanner, LiveBytesCountsEveryStep) {
  // Against a count of the buffers live at each step: the bytes at every
  // step, the fullest step of the whole range and of random windows (the
  // first step where the most are live).
  std::mt19937_64 rng(23);
  for (int round = 0; round < 100; ++round) {
    std::vector<BufferRequest> req =
        randomRequests(rng, static_cast<int>(rng() % 200), 1 + rng() % 100,
                       (rng() % 5) / 4.0, rng() % 2 == 0);
    std::vector<int64_t> sizes = alignedSizes(req, 64);
    LiveBytes live(req, sizes);
    int64_t steps = 0;
    for (const BufferRequest &r : req)
      steps = std::max(steps, r.last + 2);
    std::vector<int64_t> count(steps, 0);
    for (int64_t step = 0; step < steps; ++step) {
      for (size_t i = 0; i < req.size(); ++i)
        if (req[i].first <= step && step <= req[i].last)
          count[step] += sizes[i];
      ASSERT_EQ(live.at(step), count[step]) << "round " << round;
    }
    ASSERT_EQ(live.most().first, mostLive(req, sizes)) << "round " << round;
    for (int window = 0; window < 10 && steps > 0; ++window) {
      int64_t from = static_cast<int64_t>(rng() % steps);
      int64_t to = from + 1 + static_cast<int64_t>(rng() % (steps - from));
      auto fullest = std::max_element(count.begin() + from, count.begin() + to);
      ASSERT_EQ(live.most(from, to),
                std::make_pair(*fullest, int64_t(fullest - count.begin())))
          << "round " << round << ", steps " << from << " to " << to;
    }
  }
}

TEST(BufferPlanner, NeverAboveAnyPlacement) {
  std::mt19937_64 rng(17);
  for (int round = 0; round < 200; ++round) {
    std::vector<BufferRequest> req =
        randomRequests(rng, 1 + static_cast<int>(rng() % 400), 1 + rng() % 300,
                       (rng() % 5) / 4.0, rng() % 2 == 0);
    std::vector<int64_t> sizes = alignedSizes(req, 64);
    int64_t peak = 0, fitPeak = 0, largestPeak = 0, longPeak = 0;
    std::vector<int64_t> offsets = plan(req, peak);
    firstFitBuffers(req, sizes, fitPeak);
    largestFirstBuffers(req, sizes, largestPeak);
    expectDisjoint(req, longLivedFirstBuffers(req, sizes, longPeak), 64);
    ASSERT_LE(peak, fitPeak) << "round " << round;
    ASSERT_LE(peak, largestPeak) << "round " << round;
    ASSERT_LE(peak, longPeak) << "round " << round;
    ASSERT_GE(peak, mostLive(req, alignedSizes(req, 64))) << "round " << round;
    expectDisjoint(req, offsets, 64);
  }
}
} // namespace
