//===- GroupKernelMappings.cpp - A fused group's kernel: tiles or rows ----===//
//
// Two mappings (GroupKernelSource.h). Tiles: a group without row or column
// reductions has a value at each point that needs nothing from other
// points, so each thread computes its points' cone of instructions in list
// order, whatever their kind (a row or scalar value is computed again at
// each point: pure, so the same bits). Rows: one warp per row, lane l
// taking the columns c % 32 == l. Instructions whose values are the same
// for the whole row (scalars, row values, row reductions) are computed by
// every lane, in list order; column and element values are computed inside
// column loops, each loop computing only what it needs (the "cone" of the
// values it reduces or stores). A row reduction is one column loop and the
// warp's butterfly; the stores of element values share one final column
// loop. Element values are pure, so computing one again in a later loop
// gives the same bits.
//
//===----------------------------------------------------------------------===//

#include "GroupKernelWriter.h"

#include "kiln/Runtime/Cuda/GroupKernelSource.h"

#include "DevicePrelude.h"

namespace kiln::runtime::cuda::group {

namespace {

// The group kernels' own helpers, after the shared device prelude.
const char *kGroupHelpers = R"(__device__ __forceinline__ float kiln_nan_or(float a, float b, float pick) {
  return (isnan(a) || isnan(b)) ? __int_as_float(0x7fc00000) : pick;
}
__device__ __forceinline__ float kiln_pow2_floor(float x) {
  if (!(x > 0.0f) || isinf(x))
    return x;
  unsigned b = __float_as_uint(x);
  b = (b & 0x7f800000u) ? (b & 0xff800000u) : (1u << (31 - __clz(b)));
  return __uint_as_float(b);
}
)";

// The rows mapping's warp reductions: a row sum's butterfly (a + b is b +
// a, so every lane ends with the same bits: those of rowSum's pairwise
// order) and a row maximum (NaN wins; +0 over -0, so any order).
const char *kRowHelpers = R"(__device__ __forceinline__ double kiln_warp_sum(double x) {
  for (int s = KILN_LANES / 2; s > 0; s /= 2)
    x += __shfl_xor_sync(0xffffffffu, x, s);
  return x;
}
__device__ __forceinline__ float kiln_max0(float a, float b) {
  return kiln_nan_or(a, b, b > a || (b == a && signbit(a)) ? b : a);
}
__device__ __forceinline__ float kiln_warp_max(float x) {
  for (int s = KILN_LANES / 2; s > 0; s /= 2)
    x = kiln_max0(x, __shfl_xor_sync(0xffffffffu, x, s));
  return x;
}
)";

} // namespace

Error Writer::write() {
  for (DType t : in)
    if (!supported(t))
      return Error(std::string("a fused group cannot read ") + dtypeName(t));
  for (DType t : out)
    if (!supported(t))
      return Error(std::string("a fused group cannot write ") + dtypeName(t));
  std::vector<size_t> colSums;
  for (size_t o = 0; o < g.outputs.size(); ++o) {
    if (g.outputs[o].store == Store::ColSum)
      colSums.push_back(o);
    if (g.outputs[o].store == Store::Amax && out[o] != DType::F32)
      return Error("an amax store must be f32");
  }
  hasColSum = !colSums.empty();
  tiled = pointwise(g);
  if (!tiled) {
    // The rows mapping's shared memory: column sums, transposes, amaxes.
    int64_t bytes = 0, blockRows = groupBlockRows(g);
    for (const GroupOutput &o : g.outputs)
      bytes += o.store == Store::ColSum      ? 8 * 32 * blockRows
               : o.store == Store::Transpose ? 4 * 33 * blockRows
                                             : 0;
    bytes += 4 * 32 * blockRows; // the amax reduction
    if (bytes > 48 * 1024)
      return Error("a fused group with these column sums and transposed "
                   "stores needs more shared memory than a block has");
  }

  os << devicePrelude() << kGroupHelpers;
  os << "struct KilnArgs {\n  const void *in[" << std::max<size_t>(in.size(), 1)
     << "];\n  void *out[" << out.size()
     << "];\n  long long rows, cols;\n  double *partials;\n};\n";
  if (tiled)
    writeTiles();
  else
    writeRows(colSums);
  return Error::success();
}

void Writer::writeTiles() {
  os << "#define KILN_TILE " << kKilnGroupTile << "\n#define KILN_TILE_ROWS "
     << kKilnGroupTileThreadRows << "\n";
  os << "extern \"C\" __global__ void __launch_bounds__(KILN_TILE * "
        "KILN_TILE_ROWS)\n"
        "kiln_group(KilnArgs a) {\n"
        "  const long long rows = a.rows, cols = a.cols;\n"
        "  const long long row_tiles =\n"
        "      rows > 0 ? (rows + KILN_TILE - 1) / KILN_TILE : 1;\n"
        "  const long long r0 = (long long)blockIdx.x % row_tiles * KILN_TILE;\n"
        "  const long long c0 = (long long)blockIdx.x / row_tiles * KILN_TILE;\n";
  auto [anyTranspose, anyAmax] = declareStaging("KILN_TILE", "KILN_TILE");
  std::set<int32_t> pointValues =
      outputCone({Store::Elem, Store::Transpose, Store::Amax});
  std::set<int32_t> rowValues = outputCone({Store::Row, Store::Scalar});

  // Each thread: column c0 + threadIdx.x of four rows of the tile.
  os << "  for (int k = 0; k < KILN_TILE; k += KILN_TILE_ROWS) {\n"
        "    const long long r = r0 + threadIdx.y + k, c = c0 + threadIdx.x;\n";
  if (!pointValues.empty()) {
    os << "    if (r < rows && c < cols) {\n";
    emitValues(pointValues, "      ");
    emitPointStores("[threadIdx.y + k][threadIdx.x]", {});
    os << "    }\n";
  }
  // Row and scalar stores: the tile column's first thread of each row.
  if (!rowValues.empty()) {
    os << "    if (r < rows && c0 == 0 && threadIdx.x == 0) {\n";
    emitValues(rowValues, "      ");
    for (size_t o = 0; o < g.outputs.size(); ++o) {
      std::string buf = "a.out[" + std::to_string(o) + "]";
      std::string x = v(g.outputs[o].value);
      if (g.outputs[o].store == Store::Row)
        os << "      " << stored(out[o], buf, "r", x) << "\n";
      else if (g.outputs[o].store == Store::Scalar)
        os << "      if (r == 0)\n        " << stored(out[o], buf, "0", x)
           << "\n";
    }
    os << "    }\n";
  }
  os << "  }\n";

  // Transposed stores: the tile read down its columns, so a warp writes
  // consecutive rows of the result.
  if (anyTranspose) {
    os << "  __syncthreads();\n"
          "  for (int k = 0; k < KILN_TILE; k += KILN_TILE_ROWS) {\n"
          "    const long long r = r0 + threadIdx.x, c = c0 + threadIdx.y + "
          "k;\n"
          "    if (r < rows && c < cols) {\n";
    for (size_t o = 0; o < g.outputs.size(); ++o)
      if (g.outputs[o].store == Store::Transpose)
        os << "      "
           << stored(out[o], "a.out[" + std::to_string(o) + "]",
                     "c * rows + r",
                     "kiln_t" + std::to_string(o) +
                         "[threadIdx.x][threadIdx.y + k]")
           << "\n";
    os << "    }\n  }\n";
  }

  if (anyAmax)
    writeBlockAmax("KILN_TILE * KILN_TILE_ROWS",
                   "threadIdx.y * KILN_TILE + threadIdx.x");
  os << "}\n";
}

void Writer::writeRows(const std::vector<size_t> &colSums) {
  os << "#define KILN_BLOCK_ROWS " << groupBlockRows(g)
     << "\n#define KILN_LANES " << kRowSumLanes << "\n"
     << kRowHelpers;
  os << "extern \"C\" __global__ void __launch_bounds__(KILN_BLOCK_ROWS * "
        "KILN_LANES)\n"
        "kiln_group(KilnArgs a) {\n"
        "  const long long rows = a.rows, cols = a.cols;\n"
        "  const int lane = threadIdx.x, warp = threadIdx.y;\n"
        "  const long long r0 = (long long)blockIdx.x * KILN_BLOCK_ROWS;\n"
        "  const long long r = r0 + warp;\n"
        "  const bool valid = r < rows; // the same for a whole warp\n";
  if (hasColSum)
    os << "  __shared__ double kiln_col[" << colSums.size()
       << "][KILN_BLOCK_ROWS][KILN_LANES];\n";
  auto [anyTranspose, anyAmax] =
      declareStaging("KILN_BLOCK_ROWS", "KILN_LANES");

  // Row-level values, computed by every lane of the row's warp (the same
  // bits), declared here so the final loop sees them. A row reduction: each
  // lane its columns c % 32 in order, then the warp's butterfly.
  for (size_t i = 0; i < g.body.size(); ++i)
    if (!perColumn(g.body[i].kind))
      os << "  float " << v(static_cast<int32_t>(i)) << " = 0.0f;\n";
  os << "  if (valid) {\n";
  for (size_t k = 0; k < g.body.size(); ++k) {
    int32_t i = static_cast<int32_t>(k);
    const GroupInstr &ins = g.body[i];
    if (perColumn(ins.kind))
      continue;
    if (ins.op == Op::RowSum || ins.op == Op::RowMax) {
      bool sum = ins.op == Op::RowSum;
      os << "    {\n      "
         << (sum ? "double acc = 0.0;" : "float acc = __int_as_float(0xff800000);")
         << "\n      for (long long c = lane; c < cols; c += KILN_LANES) {\n";
      emitValues(cone(ins.args[0]), "        ");
      std::string x = v(ins.args[0]);
      if (sum)
        os << "        acc += (double)" << x << ";\n";
      else
        os << "        acc = kiln_max0(acc, " << x << ");\n";
      os << "      }\n      " << v(i) << " = "
         << rounded(ins.type, sum ? "(float)kiln_warp_sum(acc)"
                                  : "kiln_warp_max(acc)")
         << ";\n    }\n";
      continue;
    }
    os << "    " << v(i) << " = " << expression(i) << ";\n";
  }
  os << "  }\n";

  // The column loop, 32 columns at a time (a lane each): element stores,
  // amaxes, and through shared memory the column sums (the block's rows in
  // row order) and transposed stores (a warp writes 32 rows of a column).
  std::set<int32_t> finalValues = outputCone(
      {Store::Elem, Store::Transpose, Store::ColSum, Store::Amax},
      /*everyKind=*/false);
  if (!finalValues.empty()) {
    os << "  for (long long c0 = 0; c0 < cols; c0 += KILN_LANES) {\n"
          "    const long long c = c0 + lane;\n";
    for (size_t j = 0; j < colSums.size(); ++j)
      os << "    double kiln_cs" << j << " = 0.0;\n";
    os << "    if (valid && c < cols) {\n";
    emitValues(finalValues, "      ");
    emitPointStores("[warp][lane]", colSums);
    os << "    }\n";
    if (hasColSum || anyTranspose) {
      for (size_t j = 0; j < colSums.size(); ++j)
        os << "    kiln_col[" << j << "][warp][lane] = kiln_cs" << j << ";\n";
      os << "    __syncthreads();\n";
      for (size_t j = 0; j < colSums.size(); ++j)
        os << "    if (warp == 0 && c < cols) {\n"
              "      double s = 0.0;\n"
              "      for (int t = 0; t < KILN_BLOCK_ROWS; ++t)\n"
              "        s += kiln_col["
           << j << "][t][lane];\n      a.partials[((long long)" << j
           << " * gridDim.x + blockIdx.x) * cols + c] = s;\n    }\n";
      if (anyTranspose) {
        os << "    if (c0 + warp < cols && r0 + lane < rows) {\n";
        for (size_t o = 0; o < g.outputs.size(); ++o)
          if (g.outputs[o].store == Store::Transpose)
            os << "      "
               << stored(out[o], "a.out[" + std::to_string(o) + "]",
                         "(c0 + warp) * rows + r0 + lane",
                         "kiln_t" + std::to_string(o) + "[lane][warp]")
               << "\n";
        os << "    }\n";
      }
      os << "    __syncthreads();\n";
    }
    os << "  }\n";
  }

  // Row and scalar stores: the row's first lane.
  os << "  if (valid && lane == 0) {\n";
  for (size_t o = 0; o < g.outputs.size(); ++o) {
    std::string buf = "a.out[" + std::to_string(o) + "]";
    std::string x = v(g.outputs[o].value);
    if (g.outputs[o].store == Store::Row)
      os << "    " << stored(out[o], buf, "r", x) << "\n";
    else if (g.outputs[o].store == Store::Scalar)
      os << "    if (r == 0)\n      " << stored(out[o], buf, "0", x) << "\n";
  }
  os << "  }\n";
  if (anyAmax)
    writeBlockAmax("KILN_BLOCK_ROWS * KILN_LANES",
                   "threadIdx.y * KILN_LANES + threadIdx.x");
  os << "}\n";

  if (hasColSum) {
    os << "extern \"C\" __global__ void kiln_group_col_sum(KilnArgs a, int "
          "blocks) {\n"
          "  const long long c = (long long)blockIdx.x * blockDim.x + "
          "threadIdx.x;\n"
          "  if (c >= a.cols)\n    return;\n";
    for (size_t j = 0; j < colSums.size(); ++j) {
      size_t o = colSums[j];
      os << "  {\n    double s = 0.0;\n    for (int b = 0; b < blocks; ++b)\n"
            "      s += a.partials[((long long)"
         << j << " * blocks + b) * a.cols + c];\n    "
         << stored(out[o], "a.out[" + std::to_string(o) + "]", "c",
                   rounded(out[o], "(float)s"))
         << "\n  }\n";
    }
    os << "}\n";
  }
}

void Writer::writeBlockAmax(const std::string &threads,
                            const std::string &tid) {
  // The block's largest bits (non-negative floats order as their bits; a
  // NaN's bits exceed infinity's), then one atomicMax per output.
  os << "  __shared__ unsigned kiln_am[" << threads << "];\n"
     << "  const int kiln_tid = " << tid << ";\n";
  for (size_t o = 0; o < g.outputs.size(); ++o) {
    if (g.outputs[o].store != Store::Amax)
      continue;
    os << "  __syncthreads();\n"
          "  kiln_am[kiln_tid] = __float_as_uint(kiln_amax"
       << o << ");\n"
       << "  for (int s = (" << threads
       << ") / 2; s > 0; s /= 2) {\n"
          "    __syncthreads();\n"
          "    if (kiln_tid < s && kiln_am[kiln_tid + s] > kiln_am[kiln_tid])\n"
          "      kiln_am[kiln_tid] = kiln_am[kiln_tid + s];\n"
          "  }\n"
          "  if (kiln_tid == 0)\n"
          "    atomicMax((unsigned *)a.out["
       << o << "], kiln_am[0]);\n";
  }
}

} // namespace kiln::runtime::cuda::group
