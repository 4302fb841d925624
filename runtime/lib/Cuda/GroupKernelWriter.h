//===- GroupKernelWriter.h - Writing a fused group's CUDA C++ ---*- C++ -*-===//
//
// Internal to the CUDA backend's group kernels (GroupKernelSource.h): the
// writer that turns a FusedGroup into one kernel's text.
// GroupKernelValues.cpp writes the instruction list as CUDA expressions
// and finds what each store needs; GroupKernelMappings.cpp lays those
// out as the tiles or the rows mapping.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CUDA_GROUPKERNELWRITER_H
#define KILN_RUNTIME_CUDA_GROUPKERNELWRITER_H

#include "kiln/Runtime/Cuda/GroupKernelSource.h"
#include "kiln/Runtime/FusedGroup.h"
#include "kiln/Runtime/Support/Error.h"

#include <algorithm>
#include <initializer_list>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace kiln::runtime::cuda::group {

using Op = GroupInstr::Op;
using Store = GroupOutput::Store;

/// The C type of a buffer of `t` (float, kiln_u16, kiln_u8).
const char *ctype(DType t);
/// Whether the group kernels read and write `t` (f32, bf16, FP8).
bool supported(DType t);
/// `x` (an f32 expression) rounded to `t`.
std::string rounded(DType t, const std::string &x);
/// Element `index` of a buffer of type `t`, as f32.
std::string loaded(DType t, const std::string &buffer,
                   const std::string &index);
/// Writes the f32 value `x` (already of `t`'s values) as element `index`.
std::string stored(DType t, const std::string &buffer,
                   const std::string &index, const std::string &x);
/// `value` rounded to f32, as a hexadecimal float literal (exact).
std::string hexFloat(double value);
/// Whether values of kind `k` differ from column to column.
bool perColumn(GroupKind k);
/// Whether every point of `g` can be computed on its own: no row sum or
/// maximum, no column sum.
bool pointwise(const FusedGroup &g);

class Writer {
public:
  Writer(const FusedGroup &g, const std::vector<DType> &in,
         const std::vector<DType> &out)
      : g(g), in(in), out(out) {}

  Error write();
  std::string text() const { return os.str(); }
  bool tiled = false;
  bool hasColSum = false;

private:
  std::string v(int32_t i) const { return "v" + std::to_string(i); }
  /// The f32 expression of instruction `i` (its args are variables).
  std::string expression(int32_t i);
  /// The instructions `target` needs, in list order: per-column ones
  /// only, or (`everyKind`) all of them.
  std::set<int32_t> cone(int32_t target, bool everyKind = false) const;
  /// The union of the cones of the outputs whose store is one of `stores`.
  std::set<int32_t> outputCone(std::initializer_list<Store> stores,
                               bool everyKind = true) const;
  void writeTiles();
  void writeRows(const std::vector<size_t> &colSums);
  /// Row reduction `i` over the row group's chunks, then its combination.
  void writeRowReduction(int32_t i, const GroupRows &shape);
  /// Each element load among `values`, as the chunk kiln_x<i>[8] of the
  /// columns c0..c0+7 (from the registers or from memory).
  void writeChunkLoads(const std::set<int32_t> &values,
                       const std::string &indent);
  /// The stores of a row: by chunks (row groups) or a column per lane
  /// through shared memory (warp rows).
  void writeRowGroupStores(const std::vector<size_t> &colSums,
                           const GroupRows &shape);
  void writeWarpRowStores(const std::vector<size_t> &colSums,
                          bool anyTranspose);
  /// kiln_group_col_sum: the partial sums of each column in block order.
  void writeColSumKernel(const std::vector<size_t> &colSums);
  /// Declares each transposed store's shared tile (tileRows x tileCols,
  /// padded) and each amax output's accumulator; whether there are any.
  std::pair<bool, bool> declareStaging(const char *tileRows,
                                       const char *tileCols) {
    bool anyTranspose = false, anyAmax = false;
    for (size_t o = 0; o < g.outputs.size(); ++o) {
      if (g.outputs[o].store == Store::Transpose) {
        anyTranspose = true;
        os << "  __shared__ float kiln_t" << o << "[" << tileRows << "]["
           << tileCols << " + 1];\n";
      }
      if (g.outputs[o].store == Store::Amax) {
        anyAmax = true;
        os << "  float kiln_amax" << o << " = 0.0f;\n";
      }
    }
    return {anyTranspose, anyAmax};
  }
  /// The stores of point (r, c) inside a column loop: element stores,
  /// each transposed value into its tile at `tileSlot`, amax updates, and
  /// column-sum values into kiln_cs<j> (j: the output's index in
  /// `colSums`). In a row group's chunk loop (`chunked`), an element value
  /// goes to its chunk kiln_o<o>[e] instead and a column-sum value is added
  /// to its register kiln_cs<j>[m][e].
  void emitPointStores(const std::string &tileSlot,
                       const std::vector<size_t> &colSums,
                       const std::string &indent) {
    for (size_t o = 0; o < g.outputs.size(); ++o) {
      std::string buf = "a.out[" + std::to_string(o) + "]";
      std::string x = v(g.outputs[o].value);
      auto sum = std::find(colSums.begin(), colSums.end(), o) - colSums.begin();
      switch (g.outputs[o].store) {
      case Store::Elem:
        os << indent
           << (chunked ? "kiln_o" + std::to_string(o) + "[e] = " + x + ";"
                       : stored(out[o], buf, "r * cols + c", x))
           << "\n";
        break;
      case Store::Transpose:
        os << indent << "kiln_t" << o << tileSlot << " = " << x << ";\n";
        break;
      case Store::Amax:
        os << indent << amaxUpdate(o, x) << "\n";
        break;
      case Store::ColSum:
        os << indent << "kiln_cs" << sum
           << (chunked ? "[m][e] += (double)" : " = (double)") << x << ";\n";
        break;
      default:
        break;
      }
    }
  }
  /// Each amax output: the block's largest value, then one atomicMax.
  void writeBlockAmax(const std::string &threads, const std::string &tid);
  void emitValues(const std::set<int32_t> &values,
                  const std::string &indent);
  /// kiln_amax<o> = max(kiln_amax<o>, |x|), NaN winning.
  std::string amaxUpdate(size_t o, const std::string &x) const {
    std::string m = "kiln_amax" + std::to_string(o);
    return m + " = kiln_nan_or(" + m + ", " + x + ", fabsf(" + x + ") > " +
           m + " ? fabsf(" + x + ") : " + m + ");";
  }

  const FusedGroup &g;
  const std::vector<DType> &in, &out;
  /// Whether element loads are read from chunks (kiln_x<i>[e]), and
  /// whether those chunks are kept in registers (kiln_ld<i>).
  bool chunked = false, cachedLoads = false;
  std::ostringstream os;
};

} // namespace kiln::runtime::cuda::group

#endif // KILN_RUNTIME_CUDA_GROUPKERNELWRITER_H
