//===- GroupKernelSource.h - CUDA C++ for a fused group ---------*- C++ -*-===//
//
// The CUDA backend's kernels for the plan's fused groups (docs/plan.md,
// "Fused groups"), written as CUDA C++ source that NVRTC compiles at load
// time for the device's architecture. Generating the source needs no CUDA:
// CI compiles every group of the presets' plans for sm_90a
// (kiln-nvrtc-check) on machines without a GPU.
//
// The kernels follow the group language's semantics: every instruction
// rounds to its type, row sums accumulate in double in the plan's order, no
// multiply-add contraction (compile with --fmad=false). Transcendentals
// (exp, log) are CUDA's, so results may differ from the CPU backend's in
// the last bits of those ops.
//
// Two mappings, chosen by what the group computes (groupLaunch says how to
// launch either):
//  - tiles: a group with no row reduction and no column sum computes every
//    point independently, so it runs one thread per point, in 32 x 32
//    tiles of blocks of 32 x 8 threads (four rows each). Loads and element
//    stores are coalesced along a row; transposed stores go through a
//    shared-memory tile, so they are coalesced along a column; an amax is
//    reduced over the block and then one atomicMax.
//  - rows: a group with a row sum, a row maximum or a column sum runs one
//    warp per row (blocks of kKilnGroupBlockRows rows, 32 x 32 threads):
//    lane l takes the columns c % 32 == l, so loads and stores are
//    coalesced, and a row reduction ends in the warp's butterfly, which is
//    the order the plan defines (rowSum). A column sum adds the block's
//    rows in row order (kColSumBlockRows) through shared memory; then
//    `kiln_group_col_sum` runs one thread per column over the per-block
//    partial sums. Transposed stores go through a shared-memory tile.
// Either way `amax` outputs must be zero before the launch.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CUDA_GROUPKERNELSOURCE_H
#define KILN_RUNTIME_CUDA_GROUPKERNELSOURCE_H

#include "kiln/Runtime/Cuda/KernelCompiler.h"
#include "kiln/Runtime/DType.h"
#include "kiln/Runtime/FusedGroup.h"
#include "kiln/Runtime/Plan.h"
#include "kiln/Runtime/Support/Error.h"

#include <set>
#include <string>
#include <vector>

namespace kiln::runtime::cuda {

/// Rows (warps) per block of the rows mapping's `kiln_group` when the group
/// has a column sum (the plan's blocks of kColSumBlockRows rows) or a
/// transposed store (a 32 x 32 tile); otherwise kKilnGroupNarrowBlockRows,
/// so that 2048 rows make 256 blocks instead of 64 (132 SMs on an H100).
/// Each row is one warp's either way: the reductions' order is the same.
constexpr int kKilnGroupBlockRows = 32;
constexpr int kKilnGroupNarrowBlockRows = 8;

/// The rows per block of `group`'s rows mapping (above).
int groupBlockRows(const FusedGroup &group);

/// Rows and columns of a tile, and rows of threads per tile block.
constexpr int kKilnGroupTile = 32;
constexpr int kKilnGroupTileThreadRows = 8;

struct GroupKernelSource {
  std::string source;
  /// One thread per point (tiles), or one warp per row.
  bool tiled = false;
  /// Whether the group has a `col_sum` output (a second kernel, and a
  /// scratch of blocks x cols doubles per such output).
  bool hasColSum = false;
  /// How NVRTC compiles it (groupArithmetic).
  Arithmetic arithmetic = Arithmetic::Exact;
};

/// Whether `group` computes exp or log (exp, log, sigmoid): CUDA's expf
/// and logf are not the host's libm, so on a GPU such a group matches the
/// CPU backend within 2 ulp, not bit for bit (sqrt is correctly rounded).
bool usesTranscendentals(const FusedGroup &group);

/// The one policy for a group kernel's arithmetic: Exact (`--fmad=false`)
/// where its bits are asserted against the CPU backend, i.e. without exp
/// or log; Contracted otherwise.
Arithmetic groupArithmetic(const FusedGroup &group);

/// How to launch a group's kernels.
struct GroupLaunch {
  unsigned grid[2] = {1, 1}, block[2] = {1, 1}; // kiln_group
  /// kiln_group_col_sum (with a column sum): its grid and block (1-D), and
  /// its `blocks` argument, the number of partial sums per column.
  unsigned sumGrid = 0, sumBlock = 0;
  int partialBlocks = 0;
  /// Bytes of scratch the partial sums need (0 without a column sum).
  int64_t partialBytes = 0;
};

/// The launch of the kernels of `group` (its mapping follows from what it
/// computes, as groupKernelSource chooses it), or an error if the group is
/// too large for a grid.
Expected<GroupLaunch> groupLaunch(const FusedGroup &group);

/// The kernels of `group`, whose operands and results have these dtypes,
/// or why the group is not supported.
Expected<GroupKernelSource>
groupKernelSource(const FusedGroup &group, const std::vector<DType> &operands,
                  const std::vector<DType> &results);

/// The kernels of a fused step of `plan` (its group, with the dtypes of the
/// values it reads and writes).
Expected<GroupKernelSource> groupKernelSource(const Plan &plan,
                                              const PlanStep &step);

/// A fused step of a plan with its kernels.
struct PlanGroupKernel {
  std::string entry;
  const PlanStep *step = nullptr;
  GroupKernelSource kernel;
};

/// The fused steps of `plan` (their number in `groups`) and, in entry and
/// step order, the kernels of those whose source is not in `seen` yet
/// (which gains them). On an unsupported group, an error naming the step.
Expected<std::vector<PlanGroupKernel>>
distinctGroupKernels(const Plan &plan, std::set<std::string> &seen,
                     int &groups);

} // namespace kiln::runtime::cuda

#endif // KILN_RUNTIME_CUDA_GROUPKERNELSOURCE_H
