//===- CommMeshTest.cpp - Sub-communicators of the mesh axes --------------===//
//
// splitMesh (Communicator.h) on every mesh [dp_shard, tp] the world size
// allows: each axis's size and this rank's position on it, then an
// all-gather, a reduce-scatter and an all-reduce (sum and max) over each
// axis, checked against values computed here from each rank's contribution,
// which is a closed form of (world rank, chunk, index) with small integers
// (exact in f32). At 4 ranks the 2 x 2 mesh splits for real (MPI:
// MPI_Comm_split); the 4 x 1 and 1 x 4 meshes take the world and local
// communicators. Every rank issues the same calls whatever it finds.
// EachRankSplitsByItsCoordinates checks the colors and keys of every rank
// of worlds up to 8 ranks with a communicator that records its splits (no
// MPI).
//
//===----------------------------------------------------------------------===//

#include "CommConformanceSupport.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

using namespace kiln::runtime;
using namespace kiln::runtime::comm;

namespace {
/// World rank `r`'s element `i` of chunk `j`: distinct per rank, exact.
float contribution(int r, int j, int i) {
  return static_cast<float>((r + 1) * 1000 + j * 100 + i);
}

/// The four collectives over `axis` (this rank's line `line`), checked.
void checkAxis(Communicator &axis, int rank, const std::vector<int> &line,
               int position, const std::string &name) {
  SCOPED_TRACE(name);
  const int count = 5, n = static_cast<int>(line.size());
  EXPECT_EQ(axis.size(), n);
  EXPECT_EQ(axis.rank(), position);

  std::vector<float> mine(count), gathered(n * count);
  for (int i = 0; i < count; ++i)
    mine[i] = contribution(rank, 0, i);
  Error gather = axis.wait(axis.startAllGather(mine.data(), gathered.data(),
                                               count, ElementType::F32));

  std::vector<float> chunks(n * count), scattered(count);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < count; ++i)
      chunks[j * count + i] = contribution(rank, j, i);
  Error scatter = axis.wait(axis.startReduceScatter(
      chunks.data(), scattered.data(), count, ElementType::F32, ReduceOp::Sum));

  std::vector<float> sum(count), max(count);
  Error reduce = axis.wait(axis.startAllReduce(
      mine.data(), sum.data(), count, ElementType::F32, ReduceOp::Sum));
  Error reduceMax = axis.wait(axis.startAllReduce(
      mine.data(), max.data(), count, ElementType::F32, ReduceOp::Max));

  ASSERT_FALSE(gather) << gather.message();
  ASSERT_FALSE(scatter) << scatter.message();
  ASSERT_FALSE(reduce) << reduce.message();
  ASSERT_FALSE(reduceMax) << reduceMax.message();
  for (int p = 0; p < n; ++p)
    for (int i = 0; i < count; ++i)
      EXPECT_EQ(gathered[p * count + i], contribution(line[p], 0, i))
          << "all-gather slot " << p << " element " << i;
  for (int i = 0; i < count; ++i) {
    float wantScatter = 0, wantSum = 0, wantMax = contribution(line[0], 0, i);
    for (int member : line) {
      wantScatter += contribution(member, position, i);
      wantSum += contribution(member, 0, i);
      wantMax = std::max(wantMax, contribution(member, 0, i));
    }
    EXPECT_EQ(scattered[i], wantScatter) << "reduce-scatter element " << i;
    EXPECT_EQ(sum[i], wantSum) << "all-reduce sum element " << i;
    EXPECT_EQ(max[i], wantMax) << "all-reduce max element " << i;
  }
}
} // namespace

TEST(CommMesh, EveryMeshOfThisWorldSplitsIntoItsAxes) {
  Communicator &world = *conformance::target().comm;
  int n = world.size(), rank = world.rank();
  conformance::forEachMesh(world, [&](int dp, int tp,
                                      AxisCommunicators &axes) {
    // The axis that spans the world is the world itself: with tp = 1,
    // dp_shard collectives run exactly as before.
    EXPECT_EQ(axes.dpShard == &world, dp == n);
    EXPECT_EQ(axes.tp == &world, tp == n);
    checkAxis(*axes.dpShard, rank,
              conformance::axisMembers(rank, dp, tp, false), rank / tp,
              "dp_shard axis");
    checkAxis(*axes.tp, rank, conformance::axisMembers(rank, dp, tp, true),
              rank % tp, "tp axis");
  });
}

TEST(CommMesh, AMeshThatIsNotTheWorldIsAnError) {
  Communicator &world = *conformance::target().comm;
  Expected<AxisCommunicators> axes = splitMesh(world, world.size() + 1, 1);
  ASSERT_FALSE(axes);
  EXPECT_EQ(axes.error().message(),
            "the mesh dp_shard " + std::to_string(world.size() + 1) +
                " x tp 1 is not the run's " + std::to_string(world.size()) +
                " ranks");
}

namespace {
/// World rank `rank` of `size` ranks, which runs no collective: it records
/// each split (color, key) and answers with a communicator of no ranks (the
/// test groups the ranks' calls itself, as MPI_Comm_split or
/// ncclCommSplit would).
class SplitRecorder final : public Communicator {
public:
  SplitRecorder(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char *backendName() const override { return "recorder"; }
  CommHandle startAllGather(const void *, void *, int64_t,
                            ElementType) override {
    return {};
  }
  CommHandle startReduceScatter(const void *, void *, int64_t, ElementType,
                                ReduceOp) override {
    return {};
  }
  CommHandle startAllReduce(const void *, void *, int64_t, ElementType,
                            ReduceOp) override {
    return {};
  }
  CommHandle startSendRecv(const void *, void *, int64_t, ElementType,
                           int) override {
    return {};
  }
  Error wait(CommHandle) override { return Error("nothing runs here"); }
  bool test(CommHandle) override { return false; }
  Error barrier() override { return Error("nothing runs here"); }
  Error failure() const override { return Error::success(); }
  Expected<std::unique_ptr<Communicator>> split(int color, int key) override {
    splits.push_back({color, key});
    return std::unique_ptr<Communicator>(new SplitRecorder(-1, 0));
  }

  std::vector<std::pair<int, int>> splits; // (color, key), in issue order

private:
  int rank_, size_;
};
} // namespace

// The colors and keys splitMesh gives every rank of worlds of 1 to 8 ranks
// at every mesh, without MPI: a split only where both axes exceed one rank
// (an axis of the world is the world, one of one rank a local
// communicator), the dp_shard axis first on every rank; grouping the ranks
// by color and ordering each group by key (MPI_Comm_split's rule, and
// ncclCommSplit's, which the CUDA executor uses) gives each rank's
// dp_shard line (ranks with its r % tp) at position r / tp, and its tp
// line (ranks with its r / tp) at position r % tp.
TEST(CommMesh, EachRankSplitsByItsCoordinates) {
  for (int n = 1; n <= 8; ++n)
    for (int tp = 1; tp <= n; ++tp) {
      if (n % tp != 0)
        continue;
      const int dp = n / tp;
      SCOPED_TRACE(std::to_string(n) + " ranks, mesh " + std::to_string(dp) +
                   " x " + std::to_string(tp));
      const bool splits = dp > 1 && tp > 1;
      // Per split (0: dp_shard, 1: tp): color -> (key, world rank).
      std::map<int, std::vector<std::pair<int, int>>> groups[2];
      for (int r = 0; r < n; ++r) {
        SplitRecorder world(r, n);
        Expected<AxisCommunicators> axes = splitMesh(world, dp, tp);
        ASSERT_TRUE(axes) << axes.error().message();
        EXPECT_EQ(axes->dpShard == &world, dp == n);
        EXPECT_EQ(axes->tp == &world, tp == n);
        if (dp == 1)
          EXPECT_EQ(axes->dpShard->size(), 1);
        if (tp == 1)
          EXPECT_EQ(axes->tp->size(), 1);
        ASSERT_EQ(world.splits.size(), splits ? 2u : 0u);
        for (size_t i = 0; i < world.splits.size(); ++i)
          groups[i][world.splits[i].first].push_back(
              {world.splits[i].second, r});
      }
      if (!splits)
        continue;
      for (int axis = 0; axis < 2; ++axis) {
        const int lines = axis == 0 ? tp : dp, length = axis == 0 ? dp : tp;
        EXPECT_EQ(static_cast<int>(groups[axis].size()), lines);
        for (auto &[color, members] : groups[axis]) {
          std::sort(members.begin(), members.end());
          ASSERT_EQ(static_cast<int>(members.size()), length);
          for (int position = 0; position < length; ++position) {
            int r = members[position].second;
            // The line is the ranks sharing the other coordinate, and the
            // position on it is the rank's own coordinate.
            EXPECT_EQ(axis == 0 ? r % tp : r / tp, color) << "rank " << r;
            EXPECT_EQ(axis == 0 ? r / tp : r % tp, position) << "rank " << r;
          }
        }
      }
    }
}
