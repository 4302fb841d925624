//===- GroupKernelSource.cpp - CUDA C++ for a fused group -----------------===//
//
// The entry points of GroupKernelSource.h: a group's kernel text (written
// by GroupKernelWriter.h's writer), its launch shape, and the distinct
// kernels of a plan.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Cuda/GroupKernelSource.h"
#include "GroupKernelWriter.h"

#include <algorithm>
#include <limits>

namespace kiln::runtime::cuda {

// Warp rows split a block's rows into whole blocks of a column sum.
static_assert(kKilnGroupWarpRows % kColSumBlockRows == 0);

using group::pointwise;
using group::Store;
using group::Writer;

Expected<GroupKernelSource>
groupKernelSource(const FusedGroup &group, const std::vector<DType> &operands,
                  const std::vector<DType> &results) {
  GroupKernelSource k;
  if (results.size() != group.outputs.size())
    return Error("the group has " + std::to_string(group.outputs.size()) +
                 " outputs but the step " + std::to_string(results.size()) +
                 " results");
  Writer w(group, operands, results);
  if (Error error = w.write())
    return error;
  k.source = w.text();
  k.tiled = w.tiled;
  k.hasColSum = w.hasColSum;
  k.arithmetic = groupArithmetic(group);
  return k;
}

GroupRows groupRows(const FusedGroup &group) {
  GroupRows rows;
  rows.partials = rowSumPartials(group.cols);
  bool transpose = false, colSum = false;
  int64_t elemLoads = 0;
  for (const GroupOutput &o : group.outputs) {
    transpose |= o.store == Store::Transpose;
    colSum |= o.store == Store::ColSum;
  }
  for (const GroupInstr &in : group.body)
    elemLoads += in.op == GroupInstr::Op::Load && in.kind == GroupKind::Elem;
  auto chunksOf = [&](int threads) {
    return std::max<int64_t>(1, (group.cols + kRowSumChunk * threads - 1) /
                                    (kRowSumChunk * threads));
  };
  // A column sum adds kColSumBlockRows rows of each of a thread's columns
  // in registers: at most 4 chunks (32 doubles) of them.
  rows.warpRows = transpose || (colSum && chunksOf(rows.partials) > 4);
  if (rows.warpRows) {
    rows.threads = kRowSumWarp;
    rows.rowsAtOnce = kKilnGroupWarpRows;
    rows.chunks = chunksOf(rows.threads);
    return rows;
  }
  rows.threads = rows.partials;
  rows.rowsAtOnce = std::max(1, kKilnGroupRowThreads / rows.threads);
  rows.rowsInTurn = colSum ? static_cast<int>(kColSumBlockRows) : 1;
  rows.chunks = chunksOf(rows.threads);
  rows.cached =
      elemLoads * rows.chunks * kRowSumChunk <= kKilnGroupCachedFloats;
  return rows;
}

bool usesTranscendentals(const FusedGroup &group) {
  return std::any_of(
      group.body.begin(), group.body.end(), [](const GroupInstr &in) {
        return in.op == GroupInstr::Op::Exp || in.op == GroupInstr::Op::Log ||
               in.op == GroupInstr::Op::Sigmoid;
      });
}

Arithmetic groupArithmetic(const FusedGroup &group) {
  return usesTranscendentals(group) ? Arithmetic::Contracted
                                    : Arithmetic::Exact;
}

Expected<GroupLaunch> groupLaunch(const FusedGroup &group) {
  auto parts = [](int64_t n, int64_t per) {
    return std::max<int64_t>(1, (n + per - 1) / per);
  };
  auto tooLarge = [&] {
    return Error("a fused group of " + std::to_string(group.rows) + " x " +
                 std::to_string(group.cols) + " is too large for one launch");
  };
  GroupLaunch l;
  if (pointwise(group)) {
    // One block per tile, column-tile major (a 1-D grid: a flat shard's
    // one row of millions of columns has more column tiles than grid.y
    // takes).
    int64_t tiles =
        parts(group.rows, kKilnGroupTile) * parts(group.cols, kKilnGroupTile);
    if (tiles > std::numeric_limits<int32_t>::max())
      return tooLarge();
    l.grid[0] = static_cast<unsigned>(tiles);
    l.block[0] = kKilnGroupTile;
    l.block[1] = kKilnGroupTileThreadRows;
    return l;
  }
  GroupRows shape = groupRows(group);
  int64_t rowsPerBlock = int64_t(shape.rowsAtOnce) * shape.rowsInTurn;
  int64_t blocks = parts(group.rows, rowsPerBlock);
  if (blocks > std::numeric_limits<int32_t>::max())
    return tooLarge();
  l.grid[0] = static_cast<unsigned>(blocks);
  l.block[0] = static_cast<unsigned>(shape.threads);
  l.block[1] = static_cast<unsigned>(shape.rowsAtOnce);
  int64_t sums = std::count_if(
      group.outputs.begin(), group.outputs.end(),
      [](const GroupOutput &o) { return o.store == Store::ColSum; });
  if (sums > 0) {
    int64_t partials = parts(group.rows, kColSumBlockRows);
    l.partialBlocks = static_cast<int>(partials);
    l.sumBlock = 128;
    l.sumGrid = static_cast<unsigned>(parts(group.cols, 128));
    l.partialBytes =
        static_cast<int64_t>(sizeof(double)) * partials * group.cols * sums;
  }
  return l;
}

Expected<GroupKernelSource> groupKernelSource(const Plan &plan,
                                              const PlanStep &step) {
  std::vector<DType> operands, results;
  for (int64_t id : step.operands)
    operands.push_back(plan.values[id].dtype);
  for (int64_t id : step.results)
    results.push_back(plan.values[id].dtype);
  return groupKernelSource(*step.group, operands, results);
}

Expected<std::vector<PlanGroupKernel>>
distinctGroupKernels(const Plan &plan, std::set<std::string> &seen,
                     int &groups) {
  std::vector<PlanGroupKernel> kernels;
  groups = 0;
  for (const auto &[name, entry] : plan.entries)
    for (const PlanStep &step : entry.steps) {
      if (!step.group)
        continue;
      ++groups;
      Expected<GroupKernelSource> k = groupKernelSource(plan, step);
      if (!k)
        return Error(name + ", " + step.loc + ": " + k.error().message());
      if (seen.insert(k->source).second)
        kernels.push_back({name, &step, *std::move(k)});
    }
  return kernels;
}

} // namespace kiln::runtime::cuda
