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
//  - rows: a group with a row sum, a row maximum or a column sum runs by
//    rows, in one of two layouts (GroupRows, below): row groups of one
//    thread per partial of the plan's row_sum order (rowSumPartials),
//    reading chunks of 8 columns with vector loads, or warp rows (one warp
//    per row) for transposed stores. A row reduction ends in warp
//    butterflies and a pairwise sum of the warps' totals, the order the
//    plan defines (rowSum). Column sums add blocks of kColSumBlockRows rows
//    in row order; then `kiln_group_col_sum` runs one thread per column
//    over the per-block partial sums.
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

/// How the rows mapping lays out a group (decided once, by groupRows, for
/// both its source and its launch). A row is taken by `threads` threads,
/// `rowsAtOnce` rows per block; each such row group takes `rowsInTurn`
/// consecutive rows one after the other.
///  - Row groups (`warpRows` false): one thread per partial of the plan's
///    row_sum (rowSumPartials(cols), 32 to 1024 threads), each holding its
///    chunks of 8 columns (`chunks` of them), read with 16-byte loads and,
///    where they fit (`cached`), kept in registers across the row's
///    reductions and stores; blocks of at least 256 threads. With a column
///    sum a row group takes kColSumBlockRows rows in turn and adds them in
///    registers, which is the plan's order.
///  - Warp rows (`warpRows`): one warp per row, 32 rows per block, for a
///    group with a transposed store (a 32 x 32 shared tile) or a column sum
///    too wide for registers. The reductions still follow the plan's order,
///    each lane holding partials / 32 of the row_sum's partials; the stores
///    go one column per lane.
struct GroupRows {
  bool warpRows = false;
  int threads = 32, rowsAtOnce = 8, rowsInTurn = 1;
  int partials = 32;
  int64_t chunks = 1;
  bool cached = false;
};

/// The rows mapping's layout of `group` (above).
GroupRows groupRows(const FusedGroup &group);

/// Floats of a row's loads a thread may keep in registers.
constexpr int64_t kKilnGroupCachedFloats = 64;
/// Threads per block of row groups (at least: a row group of more threads
/// is a block), and rows per block of warp rows.
constexpr int kKilnGroupRowThreads = 256;
constexpr int kKilnGroupWarpRows = 32;

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
