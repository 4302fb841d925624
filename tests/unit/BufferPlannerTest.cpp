// The arena planner against the first-fit scan it replaced (the offsets of
// every plan written before depend on them): the same offsets and peak for
// random lifetimes, and no two buffers live at the same step sharing bytes.
#include "kiln/Transforms/BufferPlanner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

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
  for (size_t a = 0; a < req.size(); ++a)
    for (size_t b = a + 1; b < req.size(); ++b) {
      if (req[a].last < req[b].first || req[b].last < req[a].first)
        continue;
      int64_t sa = (std::max<int64_t>(req[a].bytes, 1) + alignment - 1) /
                   alignment * alignment;
      int64_t sb = (std::max<int64_t>(req[b].bytes, 1) + alignment - 1) /
                   alignment * alignment;
      ASSERT_TRUE(offsets[a] + sa <= offsets[b] ||
                  offsets[b] + sb <= offsets[a])
          << "buffers " << a << " and " << b << " overlap";
    }
}

TEST(BufferPlanner, ReusesTheLowestGapThatFits) {
  // 0 and 1 live together; 2 starts after 0 ended and fits in its place;
  // 3 does not fit there and goes past 1.
  std::vector<BufferRequest> req = {
      {128, 0, 1}, {64, 0, 5}, {100, 2, 5}, {200, 2, 5}};
  int64_t peak = 0;
  std::vector<int64_t> offsets = planBuffers(req, 64, peak);
  EXPECT_EQ(offsets, (std::vector<int64_t>{0, 128, 0, 192}));
  EXPECT_EQ(peak, 448);
}

TEST(BufferPlanner, SameOffsetsAsTheScan) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 200; ++round) {
    int n = 1 + static_cast<int>(rng() % 400);
    std::vector<BufferRequest> req = randomRequests(
        rng, n, 1 + rng() % 300, (rng() % 5) / 4.0, rng() % 2 == 0);
    int64_t peak = 0, scanPeak = 0;
    std::vector<int64_t> offsets = planBuffers(req, 64, peak);
    ASSERT_EQ(firstDifference(offsets, scanFirstFit(req, 64, scanPeak)), -1)
        << "round " << round;
    ASSERT_EQ(peak, scanPeak) << "round " << round;
    expectDisjoint(req, offsets, 64);
  }
}

TEST(BufferPlanner, ManyLongLivedBuffers) {
  // As many buffers as a 1024-layer step, half of them live across it.
  std::mt19937_64 rng(11);
  std::vector<BufferRequest> req = randomRequests(rng, 20000, 40000, 0.5, true);
  int64_t peak = 0, scanPeak = 0;
  EXPECT_EQ(firstDifference(planBuffers(req, 64, peak),
                            scanFirstFit(req, 64, scanPeak)),
            -1);
  EXPECT_EQ(peak, scanPeak);
}
} // namespace
