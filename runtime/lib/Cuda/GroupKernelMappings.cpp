//===- GroupKernelMappings.cpp - A fused group's kernel: tiles or rows ----===//
//
// Two mappings (GroupKernelSource.h). Tiles: a group without row or column
// reductions has a value at each point that needs nothing from other
// points, so each thread computes its points' cone of instructions in list
// order, whatever their kind (a row or scalar value is computed again at
// each point: pure, so the same bits). Rows (GroupRows says which
// layout): instructions whose values are the same for the whole row
// (scalars, row values, row reductions) are computed by every thread of
// the row, in list order; column and element values inside chunk loops (8
// consecutive columns per thread per chunk), each loop computing only what
// it needs (the "cone" of the values it reduces or stores). A row
// reduction is one such loop, then the warps' butterflies and the sum of
// their totals in the plan's order; the stores of element values share one
// final loop. Element values are pure, so computing one again in a later
// loop gives the same bits; loads are read once into registers where they
// fit.
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

// The rows mapping's reductions. A warp's butterfly (a + b is b + a, so
// every lane ends with the same bits: those of the plan's pairwise order
// within 32 partials), and a row maximum (NaN wins; +0 over -0, so any
// order). Then the chunk reads and writes: 8 consecutive elements of a
// buffer, with one 16-byte load or store (two for f32, one 8-byte for FP8)
// when `vec` (the columns are a multiple of 8 and every buffer 16-byte
// aligned), else one by one up to the `n` left in the row.
const char *kRowHelpers =
    R"(__device__ __forceinline__ double kiln_warp_sum(double x) {
  for (int s = 16; s > 0; s /= 2)
    x += __shfl_xor_sync(0xffffffffu, x, s);
  return x;
}
__device__ __forceinline__ float kiln_max0(float a, float b) {
  return kiln_nan_or(a, b, b > a || (b == a && signbit(a)) ? b : a);
}
__device__ __forceinline__ float kiln_warp_max(float x) {
  for (int s = 16; s > 0; s /= 2)
    x = kiln_max0(x, __shfl_xor_sync(0xffffffffu, x, s));
  return x;
}
struct __align__(16) kiln_v16 { unsigned w[4]; };
struct __align__(8) kiln_v8 { unsigned w[2]; };
__device__ __forceinline__ bool kiln_aligned(const void *p) {
  return ((unsigned long long)p & 15u) == 0;
}
__device__ __forceinline__ void kiln_get_f32(const void *p, long long i, long long n, bool vec, float *x) {
  const float *q = (const float *)p + i;
  if (vec && n >= 8) {
    kiln_v16 u = ((const kiln_v16 *)q)[0], v = ((const kiln_v16 *)q)[1];
    for (int k = 0; k < 4; ++k) {
      x[k] = __uint_as_float(u.w[k]);
      x[4 + k] = __uint_as_float(v.w[k]);
    }
  } else {
    for (int e = 0; e < 8; ++e)
      x[e] = e < n ? q[e] : 0.0f;
  }
}
__device__ __forceinline__ void kiln_get_bf16(const void *p, long long i, long long n, bool vec, float *x) {
  const kiln_u16 *q = (const kiln_u16 *)p + i;
  if (vec && n >= 8) {
    kiln_v16 u = *(const kiln_v16 *)q;
    for (int k = 0; k < 4; ++k) {
      x[2 * k] = kiln_from_bf16((kiln_u16)(u.w[k] & 0xffffu));
      x[2 * k + 1] = kiln_from_bf16((kiln_u16)(u.w[k] >> 16));
    }
  } else {
    for (int e = 0; e < 8; ++e)
      x[e] = e < n ? kiln_from_bf16(q[e]) : 0.0f;
  }
}
#define KILN_FP8_CHUNK(name, from)                                           \
  __device__ __forceinline__ void kiln_get_##name(const void *p, long long i, \
      long long n, bool vec, float *x) {                                      \
    const kiln_u8 *q = (const kiln_u8 *)p + i;                                \
    if (vec && n >= 8) {                                                      \
      kiln_v8 u = *(const kiln_v8 *)q;                                        \
      for (int e = 0; e < 8; ++e)                                             \
        x[e] = from((kiln_u8)((u.w[e / 4] >> (8 * (e % 4))) & 0xffu));        \
    } else {                                                                  \
      for (int e = 0; e < 8; ++e)                                             \
        x[e] = e < n ? from(q[e]) : 0.0f;                                     \
    }                                                                         \
  }
KILN_FP8_CHUNK(e4m3, kiln_from_e4m3)
KILN_FP8_CHUNK(e5m2, kiln_from_e5m2)
__device__ __forceinline__ void kiln_put_f32(void *p, long long i, long long n, bool vec, const float *x) {
  float *q = (float *)p + i;
  if (vec && n >= 8) {
    kiln_v16 u, v;
    for (int k = 0; k < 4; ++k) {
      u.w[k] = __float_as_uint(x[k]);
      v.w[k] = __float_as_uint(x[4 + k]);
    }
    ((kiln_v16 *)q)[0] = u;
    ((kiln_v16 *)q)[1] = v;
  } else {
    for (int e = 0; e < 8 && e < n; ++e)
      q[e] = x[e];
  }
}
__device__ __forceinline__ void kiln_put_bf16(void *p, long long i, long long n, bool vec, const float *x) {
  kiln_u16 *q = (kiln_u16 *)p + i;
  if (vec && n >= 8) {
    kiln_v16 u;
    for (int k = 0; k < 4; ++k)
      u.w[k] = (unsigned)kiln_bf16_bits(x[2 * k]) |
               ((unsigned)kiln_bf16_bits(x[2 * k + 1]) << 16);
    *(kiln_v16 *)q = u;
  } else {
    for (int e = 0; e < 8 && e < n; ++e)
      q[e] = kiln_bf16_bits(x[e]);
  }
}
#define KILN_FP8_PUT(name, bits)                                             \
  __device__ __forceinline__ void kiln_put_##name(void *p, long long i,      \
      long long n, bool vec, const float *x) {                               \
    kiln_u8 *q = (kiln_u8 *)p + i;                                           \
    if (vec && n >= 8) {                                                     \
      kiln_v8 u = {{0u, 0u}};                                                \
      for (int e = 0; e < 8; ++e)                                            \
        u.w[e / 4] |= (unsigned)bits(x[e]) << (8 * (e % 4));                 \
      *(kiln_v8 *)q = u;                                                     \
    } else {                                                                 \
      for (int e = 0; e < 8 && e < n; ++e)                                   \
        q[e] = bits(x[e]);                                                   \
    }                                                                        \
  }
KILN_FP8_PUT(e4m3, kiln_e4m3_bits)
KILN_FP8_PUT(e5m2, kiln_e5m2_bits)
)";

// A row reduction's end: each accumulator's warp butterfly, then the row's
// warp totals (partial j*KILN_G + lane is in warp total (j*KILN_G +
// lane) / 32) through shared memory, added pairwise KILN_W/2 apart, then
// half that, by every thread (the same bits). Called by every thread of
// the block (it meets at barriers).
const char *kRowCombiners =
    R"(__device__ __forceinline__ double kiln_row_sum(double *acc, double *red, int lane) {
  for (int j = 0; j < KILN_ACC; ++j)
    acc[j] = kiln_warp_sum(acc[j]);
#if KILN_W == 1
  return acc[0];
#else
  if (lane % 32 == 0)
    for (int j = 0; j < KILN_ACC; ++j)
      red[(j * KILN_G + lane) / 32] = acc[j];
  __syncthreads();
  double t[KILN_W];
  for (int w = 0; w < KILN_W; ++w)
    t[w] = red[w];
  for (int apart = KILN_W / 2; apart > 0; apart /= 2)
    for (int w = 0; w < apart; ++w)
      t[w] += t[w + apart];
  __syncthreads();
  return t[0];
#endif
}
__device__ __forceinline__ float kiln_row_max(float *acc, double *red, int lane) {
  for (int j = 0; j < KILN_ACC; ++j)
    acc[j] = kiln_warp_max(acc[j]);
#if KILN_W == 1
  return acc[0];
#else
  if (lane % 32 == 0)
    for (int j = 0; j < KILN_ACC; ++j)
      red[(j * KILN_G + lane) / 32] = (double)acc[j];
  __syncthreads();
  float m = (float)red[0];
  for (int w = 1; w < KILN_W; ++w)
    m = kiln_max0(m, (float)red[w]);
  __syncthreads();
  return m;
#endif
}
)";

/// The name of the chunk helpers' dtype suffix (kiln_get_<s>, kiln_put_<s>).
const char *chunkSuffix(DType t) {
  switch (t) {
  case DType::F32:
    return "f32";
  case DType::BF16:
    return "bf16";
  case DType::F8E4M3:
    return "e4m3";
  default:
    return "e5m2";
  }
}

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
    // The rows mapping's shared memory: the reductions' warp totals, and
    // with warp rows the column sums and transposed tiles; the amax.
    GroupRows shape = groupRows(g);
    int64_t bytes = 8 * int64_t(shape.rowsAtOnce) * (shape.partials / 32);
    if (shape.warpRows)
      for (const GroupOutput &o : g.outputs)
        bytes += o.store == Store::ColSum      ? 8 * 32 * shape.rowsAtOnce
                 : o.store == Store::Transpose ? 4 * 33 * shape.rowsAtOnce
                                               : 0;
    bytes += 4 * int64_t(shape.threads) * shape.rowsAtOnce; // the amax
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
    emitPointStores("[threadIdx.y + k][threadIdx.x]", {}, "      ");
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
  const GroupRows shape = groupRows(g);
  const bool registerSums = hasColSum && !shape.warpRows;
  os << "#define KILN_G " << shape.threads << "\n#define KILN_R "
     << shape.rowsAtOnce << "\n#define KILN_S " << shape.rowsInTurn
     << "\n#define KILN_M " << shape.chunks << "\n#define KILN_ACC "
     << shape.partials / shape.threads << "\n#define KILN_W "
     << shape.partials / kRowSumWarp << "\n#define KILN_SUM_ROWS "
     << kColSumBlockRows << "\n"
     << kRowHelpers << kRowCombiners;
  os << "extern \"C\" __global__ void __launch_bounds__(KILN_G * KILN_R)\n"
        "kiln_group(KilnArgs a) {\n"
        "  const long long rows = a.rows, cols = a.cols;\n"
        "  const int lane = threadIdx.x, slot = threadIdx.y;\n"
        "  const long long r0 = (long long)blockIdx.x * KILN_R * KILN_S;\n"
        "  const long long first = r0 + (long long)slot * KILN_S;\n"
        "  const long long kiln_parts = (rows + KILN_SUM_ROWS - 1) / "
        "KILN_SUM_ROWS;\n"
        "  __shared__ double kiln_red[KILN_R][KILN_W];\n";
  // Vector loads and stores where every chunk is whole and aligned.
  os << "  const bool kiln_vec = cols % 8 == 0";
  std::set<int32_t> loaded;
  for (const GroupInstr &ins : g.body)
    if (ins.op == Op::Load && ins.kind == GroupKind::Elem &&
        loaded.insert(ins.operand).second)
      os << " && kiln_aligned(a.in[" << ins.operand << "])";
  for (size_t o = 0; o < g.outputs.size(); ++o)
    if (g.outputs[o].store == Store::Elem)
      os << " && kiln_aligned(a.out[" << o << "])";
  os << ";\n";
  if (shape.warpRows && hasColSum)
    os << "  __shared__ double kiln_col[" << colSums.size()
       << "][KILN_R][32];\n";
  auto [anyTranspose, anyAmax] = declareStaging("KILN_R", "32");
  for (size_t j = 0; j < colSums.size() && registerSums; ++j)
    os << "  double kiln_cs" << j << "[KILN_M][8] = {};\n";

  os << "  for (int s = 0; s < KILN_S; ++s) {\n"
        "    const long long r = first + s;\n"
        "    const bool valid = r < rows; // the same for a whole row group\n";
  cachedLoads = shape.cached;
  if (cachedLoads)
    for (size_t k = 0; k < g.body.size(); ++k) {
      const GroupInstr &ins = g.body[k];
      if (ins.op != Op::Load || ins.kind != GroupKind::Elem)
        continue;
      os << "    float kiln_ld" << k
         << "[KILN_M][8];\n"
            "#pragma unroll\n"
            "    for (int m = 0; m < KILN_M; ++m) {\n"
            "      const long long c0 = ((long long)m * KILN_G + lane) * 8;\n"
            "      if (valid && c0 < cols)\n"
            "        kiln_get_"
         << chunkSuffix(in[ins.operand]) << "(a.in[" << ins.operand
         << "], r * cols + c0, cols - c0, kiln_vec, kiln_ld" << k
         << "[m]);\n    }\n";
    }

  // Row-level values, in the group's order, by every thread of the row
  // group (the same bits).
  for (size_t k = 0; k < g.body.size(); ++k) {
    int32_t i = static_cast<int32_t>(k);
    const GroupInstr &ins = g.body[i];
    if (perColumn(ins.kind))
      continue;
    os << "    float " << v(i) << " = 0.0f;\n";
    if (ins.op == Op::RowSum || ins.op == Op::RowMax)
      writeRowReduction(i, shape);
    else
      os << "    if (valid)\n      " << v(i) << " = " << expression(i) << ";\n";
  }

  if (shape.warpRows)
    writeWarpRowStores(colSums, anyTranspose);
  else
    writeRowGroupStores(colSums, shape);

  // Row and scalar stores: the row's first thread.
  os << "    if (valid && lane == 0) {\n";
  for (size_t o = 0; o < g.outputs.size(); ++o) {
    std::string buf = "a.out[" + std::to_string(o) + "]";
    std::string x = v(g.outputs[o].value);
    if (g.outputs[o].store == Store::Row)
      os << "      " << stored(out[o], buf, "r", x) << "\n";
    else if (g.outputs[o].store == Store::Scalar)
      os << "      if (r == 0)\n        " << stored(out[o], buf, "0", x)
         << "\n";
  }
  os << "    }\n  }\n";

  // A row group's column sums: its block of KILN_SUM_ROWS rows, added in
  // row order in registers.
  if (registerSums) {
    os << "  const long long part = (long long)blockIdx.x * KILN_R + slot;\n"
          "  if (part < kiln_parts) {\n"
          "#pragma unroll\n"
          "    for (int m = 0; m < KILN_M; ++m)\n"
          "      for (int e = 0; e < 8; ++e) {\n"
          "        const long long c = ((long long)m * KILN_G + lane) * 8 + "
          "e;\n"
          "        if (c < cols) {\n";
    for (size_t j = 0; j < colSums.size(); ++j)
      os << "          a.partials[((long long)" << j
         << " * kiln_parts + part) * cols + c] = kiln_cs" << j << "[m][e];\n";
    os << "        }\n      }\n  }\n";
  }
  if (anyAmax)
    writeBlockAmax("KILN_G * KILN_R", "threadIdx.y * KILN_G + threadIdx.x");
  os << "}\n";
  if (hasColSum)
    writeColSumKernel(colSums);
}

void Writer::writeRowReduction(int32_t i, const GroupRows &shape) {
  const GroupInstr &ins = g.body[i];
  bool sum = ins.op == Op::RowSum;
  os << "    {\n      "
     << (sum ? "double kiln_acc[KILN_ACC];\n"
               "      for (int j = 0; j < KILN_ACC; ++j)\n"
               "        kiln_acc[j] = 0.0;\n"
             : "float kiln_acc[KILN_ACC];\n"
               "      for (int j = 0; j < KILN_ACC; ++j)\n"
               "        kiln_acc[j] = __int_as_float(0xff800000);\n")
     << "      if (valid) {\n"
     << (shape.cached ? "#pragma unroll\n" : "")
     << "        for (int m0 = 0; m0 < KILN_M; m0 += KILN_ACC) {\n"
        "#pragma unroll\n"
        "          for (int j = 0; j < KILN_ACC; ++j) {\n"
        "            const int m = m0 + j;\n"
        "            const long long c0 = ((long long)m * KILN_G + lane) * "
        "8;\n"
        "            if (m < KILN_M && c0 < cols) {\n";
  std::set<int32_t> values = cone(ins.args[0]);
  writeChunkLoads(values, "              ");
  os << "#pragma unroll\n"
        "              for (int e = 0; e < 8; ++e) {\n"
        "                const long long c = c0 + e;\n"
        "                if (c < cols) {\n";
  chunked = true;
  emitValues(values, "                  ");
  chunked = false;
  std::string x = v(ins.args[0]);
  if (sum)
    os << "                  kiln_acc[j] += (double)" << x << ";\n";
  else
    os << "                  kiln_acc[j] = kiln_max0(kiln_acc[j], " << x
       << ");\n";
  os << "                }\n              }\n            }\n          }\n"
        "        }\n      }\n      "
     << v(i) << " = "
     << rounded(ins.type, sum ? "(float)kiln_row_sum(kiln_acc, kiln_red[slot], "
                                "lane)"
                              : "kiln_row_max(kiln_acc, kiln_red[slot], lane)")
     << ";\n    }\n";
}

void Writer::writeChunkLoads(const std::set<int32_t> &values,
                             const std::string &indent) {
  for (int32_t i : values) {
    const GroupInstr &ins = g.body[i];
    if (ins.op != Op::Load || ins.kind != GroupKind::Elem)
      continue;
    if (cachedLoads)
      os << indent << "const float *kiln_x" << i << " = kiln_ld" << i
         << "[m];\n";
    else
      os << indent << "float kiln_x" << i << "[8];\n"
         << indent << "kiln_get_" << chunkSuffix(in[ins.operand]) << "(a.in["
         << ins.operand << "], r * cols + c0, cols - c0, kiln_vec, kiln_x" << i
         << ");\n";
  }
}

void Writer::writeRowGroupStores(const std::vector<size_t> &colSums,
                                 const GroupRows &shape) {
  // Each thread its chunks: element stores gathered per chunk and written
  // with one vector store, amaxes, and the column sums' registers.
  std::set<int32_t> finalValues =
      outputCone({Store::Elem, Store::ColSum, Store::Amax},
                 /*everyKind=*/false);
  if (finalValues.empty())
    return;
  os << (shape.cached || hasColSum ? "#pragma unroll\n" : "")
     << "    for (int m = 0; m < KILN_M; ++m) {\n"
        "      const long long c0 = ((long long)m * KILN_G + lane) * 8;\n"
        "      if (valid && c0 < cols) {\n";
  writeChunkLoads(finalValues, "        ");
  for (size_t o = 0; o < g.outputs.size(); ++o)
    if (g.outputs[o].store == Store::Elem)
      os << "        float kiln_o" << o << "[8];\n";
  os << "#pragma unroll\n"
        "        for (int e = 0; e < 8; ++e) {\n"
        "          const long long c = c0 + e;\n"
        "          if (c < cols) {\n";
  chunked = true;
  emitValues(finalValues, "            ");
  emitPointStores("", colSums, "            ");
  chunked = false;
  os << "          }\n        }\n";
  for (size_t o = 0; o < g.outputs.size(); ++o)
    if (g.outputs[o].store == Store::Elem)
      os << "        kiln_put_" << chunkSuffix(out[o]) << "(a.out[" << o
         << "], r * cols + c0, cols - c0, kiln_vec, kiln_o" << o << ");\n";
  os << "      }\n    }\n";
}

void Writer::writeWarpRowStores(const std::vector<size_t> &colSums,
                                bool anyTranspose) {
  // 32 columns at a time (a lane each): element stores, amaxes, and through
  // shared memory the column sums (each KILN_SUM_ROWS rows of the block in
  // row order) and transposed stores (a warp writes 32 rows of a column).
  std::set<int32_t> finalValues =
      outputCone({Store::Elem, Store::Transpose, Store::ColSum, Store::Amax},
                 /*everyKind=*/false);
  if (finalValues.empty())
    return;
  os << "    for (long long c0 = 0; c0 < cols; c0 += 32) {\n"
        "      const long long c = c0 + lane;\n";
  for (size_t j = 0; j < colSums.size(); ++j)
    os << "      double kiln_cs" << j << " = 0.0;\n";
  os << "      if (valid && c < cols) {\n";
  emitValues(finalValues, "        ");
  emitPointStores("[slot][lane]", colSums, "        ");
  os << "      }\n";
  if (!hasColSum && !anyTranspose) {
    os << "    }\n";
    return;
  }
  for (size_t j = 0; j < colSums.size(); ++j)
    os << "      kiln_col[" << j << "][slot][lane] = kiln_cs" << j << ";\n";
  os << "      __syncthreads();\n";
  for (size_t j = 0; j < colSums.size(); ++j)
    os << "      if (slot < KILN_R / KILN_SUM_ROWS && c < cols) {\n"
          "        const long long part = (long long)blockIdx.x * (KILN_R / "
          "KILN_SUM_ROWS) + slot;\n"
          "        if (part < kiln_parts) {\n"
          "          double s = 0.0;\n"
          "          for (int t = 0; t < KILN_SUM_ROWS; ++t)\n"
          "            s += kiln_col["
       << j
       << "][slot * KILN_SUM_ROWS + t][lane];\n"
          "          a.partials[((long long)"
       << j << " * kiln_parts + part) * cols + c] = s;\n        }\n      }\n";
  if (anyTranspose) {
    os << "      if (c0 + slot < cols && r0 + lane < rows) {\n";
    for (size_t o = 0; o < g.outputs.size(); ++o)
      if (g.outputs[o].store == Store::Transpose)
        os << "        "
           << stored(out[o], "a.out[" + std::to_string(o) + "]",
                     "(c0 + slot) * rows + r0 + lane",
                     "kiln_t" + std::to_string(o) + "[lane][slot]")
           << "\n";
    os << "      }\n";
  }
  os << "      __syncthreads();\n    }\n";
}

void Writer::writeColSumKernel(const std::vector<size_t> &colSums) {
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
