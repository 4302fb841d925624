//===- CommMeshTest.cpp - Sub-communicators of the mesh axes --------------===//
//
// splitMesh (Communicator.h) on every mesh [pp, dp_shard, tp] the world
// size allows: each axis's size and this rank's position on it, then an
// all-gather, a reduce-scatter and an all-reduce (sum and max) over each
// axis, checked against values computed here from each rank's contribution,
// which is a closed form of (world rank, chunk, index) with small integers
// (exact in f32). At 4 ranks the meshes with an axis of 2 split for real
// (MPI: MPI_Comm_split); an axis of 4 is the world, one of 1 a local
// communicator. PipelineAxisCarriesTransfers sends each stage's data to the
// next stage over the pp axis. Every rank issues the same calls whatever it
// finds. EachRankSplitsByItsCoordinates checks the colors and keys of every
// rank of worlds up to 8 ranks with a communicator that records its splits
// (no MPI).
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

namespace {
using conformance::Mesh;
using conformance::MeshAxis;

struct Axis {
  Communicator *comm;
  MeshAxis axis;
  const char *name;
};
std::vector<Axis> axesOf(AxisCommunicators &axes) {
  return {{axes.pp, MeshAxis::Pp, "pp axis"},
          {axes.dpShard, MeshAxis::DpShard, "dp_shard axis"},
          {axes.tp, MeshAxis::Tp, "tp axis"}};
}
} // namespace

TEST(CommMesh, EveryMeshOfThisWorldSplitsIntoItsAxes) {
  Communicator &world = *conformance::target().comm;
  int n = world.size(), rank = world.rank();
  conformance::forEachMesh(world,
                           [&](const Mesh &mesh, AxisCommunicators &axes) {
                             // The axis that spans the world is the world
                             // itself: with pp = tp = 1, dp_shard collectives
                             // run exactly as before.
                             EXPECT_EQ(axes.pp == &world, mesh.pp == n);
                             EXPECT_EQ(axes.dpShard == &world, mesh.dp == n);
                             EXPECT_EQ(axes.tp == &world, mesh.tp == n);
                             for (const Axis &a : axesOf(axes))
                               checkAxis(*a.comm, rank, mesh.line(rank, a.axis),
                                         mesh.coordinate(rank, a.axis), a.name);
                           });
}

// Over the pp axis of every mesh with pp > 1, each stage sends to the next
// (a forward activation) and the last stage back to the first (tags 0 and
// 1), all of them started before any wait; what arrives must be the sender
// world rank's data, so the pp line is the ranks at this rank's dp_shard and
// tp coordinates, numbered by stage.
TEST(CommMesh, PipelineAxisCarriesTransfers) {
  Communicator &world = *conformance::target().comm;
  int rank = world.rank();
  const int count = 1000;
  auto payload = [&](int from, int tag) {
    std::vector<float> v(count);
    for (int i = 0; i < count; ++i)
      v[i] = static_cast<float>(from * 100000 + tag * 10000 + i);
    return v;
  };
  conformance::forEachMesh(world, [&](const Mesh &mesh,
                                      AxisCommunicators &axes) {
    if (mesh.pp == 1)
      return;
    Communicator &pp = *axes.pp;
    std::vector<int> line = mesh.line(rank, MeshAxis::Pp);
    const int stage = mesh.coordinate(rank, MeshAxis::Pp), last = mesh.pp - 1;
    ASSERT_EQ(pp.size(), mesh.pp);
    ASSERT_EQ(pp.rank(), stage);
    std::vector<float> out = payload(rank, 0), back = payload(rank, 1);
    std::vector<float> in(count, -1.0f), wrapped(count, -1.0f);
    std::vector<CommHandle> sends;
    CommHandle fromPrevious{}, fromLast{};
    if (stage > 0)
      fromPrevious =
          pp.startRecv(in.data(), count, ElementType::F32, stage - 1, 0);
    if (stage < last)
      sends.push_back(
          pp.startSend(out.data(), count, ElementType::F32, stage + 1, 0));
    if (stage == last)
      sends.push_back(pp.startSend(back.data(), count, ElementType::F32, 0, 1));
    if (stage == 0)
      fromLast = pp.startRecv(wrapped.data(), count, ElementType::F32, last, 1);
    if (stage > 0) {
      EXPECT_OK(pp.wait(fromPrevious));
      EXPECT_EQ(in, payload(line[stage - 1], 0))
          << "stage " << stage << " from stage " << stage - 1;
    }
    if (stage == 0) {
      EXPECT_OK(pp.wait(fromLast));
      EXPECT_EQ(wrapped, payload(line[last], 1)) << "stage 0 from the last";
    }
    for (CommHandle h : sends)
      EXPECT_OK(pp.wait(h));
  });
}

TEST(CommMesh, AMeshThatIsNotTheWorldIsAnError) {
  Communicator &world = *conformance::target().comm;
  Expected<AxisCommunicators> axes = splitMesh(world, 1, world.size() + 1, 1);
  ASSERT_FALSE(axes);
  EXPECT_EQ(axes.error().message(),
            "the mesh pp 1 x dp_shard " + std::to_string(world.size() + 1) +
                " x tp 1 is not the run's " + std::to_string(world.size()) +
                " ranks");
  EXPECT_FALSE(splitMesh(world, 0, world.size(), 1));
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
  CommHandle startSend(const void *, int64_t, ElementType, int, int) override {
    return {};
  }
  CommHandle startRecv(void *, int64_t, ElementType, int, int) override {
    return {};
  }
  int maxTag() const override { return 0; }
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
// at every mesh [pp, dp_shard, tp], without MPI: a split for each axis that
// is neither one rank (a local communicator) nor the world (the world
// itself), in the order pp, dp_shard, tp on every rank; grouping the ranks
// by color and ordering each group by key (MPI_Comm_split's rule, and
// ncclCommSplit's, which the CUDA executor uses) gives each rank, on each
// axis, the line of the ranks that share its other two coordinates, at its
// own coordinate on that axis.
TEST(CommMesh, EachRankSplitsByItsCoordinates) {
  for (int n = 1; n <= 8; ++n)
    for (int pp = 1; pp <= n; ++pp)
      for (int tp = 1; tp <= n; ++tp) {
        if (n % (pp * tp) != 0)
          continue;
        const Mesh mesh{pp, n / (pp * tp), tp};
        SCOPED_TRACE(std::to_string(n) + " ranks, mesh " + mesh.name());
        const MeshAxis order[3] = {MeshAxis::Pp, MeshAxis::DpShard,
                                   MeshAxis::Tp};
        const int sizes[3] = {mesh.pp, mesh.dp, mesh.tp};
        std::vector<MeshAxis> split; // the axes that split, in order
        for (int a = 0; a < 3; ++a)
          if (sizes[a] > 1 && sizes[a] < n)
            split.push_back(order[a]);
        // Per split: color -> (key, world rank).
        std::vector<std::map<int, std::vector<std::pair<int, int>>>> groups(
            split.size());
        for (int r = 0; r < n; ++r) {
          SplitRecorder world(r, n);
          Expected<AxisCommunicators> axes =
              splitMesh(world, mesh.pp, mesh.dp, mesh.tp);
          ASSERT_TRUE(axes) << axes.error().message();
          for (const Axis &a : axesOf(*axes)) {
            int size = sizes[static_cast<int>(a.axis)];
            EXPECT_EQ(a.comm == &world, size == n) << a.name;
            if (size == 1)
              EXPECT_EQ(a.comm->size(), 1) << a.name;
          }
          ASSERT_EQ(world.splits.size(), split.size());
          for (size_t i = 0; i < world.splits.size(); ++i)
            groups[i][world.splits[i].first].push_back(
                {world.splits[i].second, r});
        }
        for (size_t i = 0; i < split.size(); ++i) {
          const MeshAxis axis = split[i];
          const int length = sizes[static_cast<int>(axis)];
          SCOPED_TRACE("split " + std::to_string(i));
          EXPECT_EQ(static_cast<int>(groups[i].size()), n / length);
          for (auto &[color, members] : groups[i]) {
            std::sort(members.begin(), members.end());
            ASSERT_EQ(static_cast<int>(members.size()), length);
            // The group is the line of its first member along the axis,
            // and each member's position on it its own coordinate there.
            std::vector<int> line = mesh.line(members[0].second, axis);
            for (int position = 0; position < length; ++position) {
              int r = members[position].second;
              EXPECT_EQ(r, line[position]) << "color " << color;
              EXPECT_EQ(mesh.coordinate(r, axis), position) << "rank " << r;
            }
          }
        }
      }
}
