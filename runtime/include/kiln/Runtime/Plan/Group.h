//===- Group.h - The fused-group language of the plan, once -----*- C++ -*-===//
//
// A `fused` step's `group` (docs/plan.md, "Fused groups") is a typed op list
// over a rows x cols iteration space. This header is that language's table,
// header-only beside Format.h so that the compiler's group lowering writes
// its names from it and the runtime parses them with it:
//
//   - the instructions, with their name in the plan and their arity;
//   - the value kinds (where an instruction has values) and the stores (how
//     an output is written), with their names;
//   - the reduction orders the semantics fix, which every backend follows so
//     that their bits agree.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_PLAN_GROUP_H
#define KILN_RUNTIME_PLAN_GROUP_H

#include <cstdint>
#include <iterator>
#include <optional>
#include <string_view>

namespace kiln::plan {

/// Rows per block of a `col_sum` output: the partial sums of each block are
/// added in block order. Eight, so that a GPU thread can add a block's rows
/// of its columns in registers while 2048 rows still make 256 blocks.
inline constexpr int64_t kColSumBlockRows = 8;

/// The order of a `row_sum` over `cols` columns. The columns are taken in
/// chunks of kRowSumChunk consecutive ones; chunk k goes into partial
/// k % rowSumPartials(cols), each partial adding its chunks in increasing
/// order and a chunk's columns in increasing column order. Then, within
/// each kRowSumWarp consecutive partials, they are added pairwise 16 apart,
/// then 8, down to 1 (a warp's butterfly on a GPU); last, those warps'
/// totals pairwise, half their count apart, then half that, down to 1. A
/// GPU runs one thread per partial, each reading its chunks with 16-byte
/// loads.
inline constexpr int kRowSumChunk = 8;
inline constexpr int kRowSumWarp = 32;
inline constexpr int kRowSumMaxPartials = 1024;

/// The partials of a `row_sum` over `cols` columns: the largest power of
/// two not above cols / 16, within [kRowSumWarp, kRowSumMaxPartials], so
/// that each has 16 to 31 columns where it can (2 to 4 chunks).
constexpr int rowSumPartials(int64_t cols) {
  int p = kRowSumWarp;
  while (p < kRowSumMaxPartials && int64_t(2) * p * 16 <= cols)
    p *= 2;
  return p;
}

// X(enumerator, name in the plan, number of arguments). Unary ops compute in
// f32 and round to the instruction's type; row_sum adds in double in the
// order above; row_max is NaN if any value is, and +0 over -0; pow2_floor is
// 2^floor(log2(x)) for a finite x > 0 and x itself otherwise.
#define KILN_GROUP_OPS(X)                                                      \
  X(Load, "load", 0)                                                           \
  X(Const, "const", 0)                                                         \
  X(Neg, "neg", 1)                                                             \
  X(Exp, "exp", 1)                                                             \
  X(Log, "log", 1)                                                             \
  X(Sqrt, "sqrt", 1)                                                           \
  X(Rsqrt, "rsqrt", 1)                                                         \
  X(Sigmoid, "sigmoid", 1)                                                     \
  X(Convert, "convert", 1)                                                     \
  X(Add, "add", 2)                                                             \
  X(Sub, "sub", 2)                                                             \
  X(Mul, "mul", 2)                                                             \
  X(Div, "div", 2)                                                             \
  X(Max, "max", 2)                                                             \
  X(Min, "min", 2)                                                             \
  X(RowSum, "row_sum", 1)                                                      \
  X(RowMax, "row_max", 1)                                                      \
  X(Abs, "abs", 1)                                                             \
  X(Pow2Floor, "pow2_floor", 1)

// X(enumerator, name): where an instruction has a value.
#define KILN_GROUP_KINDS(X)                                                    \
  X(Scalar, "scalar") /* one value for the whole group */                      \
  X(Row, "row")       /* one per row (a row reduction) */                      \
  X(Col, "col")       /* one per column (a weight vector) */                   \
  X(Elem, "elem")     /* one per point */

// X(enumerator, name): how an output is written.
#define KILN_GROUP_STORES(X)                                                   \
  X(Elem, "elem")                                                              \
  X(Transpose, "transpose")                                                    \
  X(Row, "row")                                                                \
  X(ColSum, "col_sum")                                                         \
  X(Amax, "amax")                                                              \
  X(Scalar, "scalar")

#define KILN_GROUP_ENUMERATOR(e, ...) e,
enum class GroupOp : uint8_t { KILN_GROUP_OPS(KILN_GROUP_ENUMERATOR) };
enum class GroupKind : uint8_t { KILN_GROUP_KINDS(KILN_GROUP_ENUMERATOR) };
enum class GroupStore : uint8_t { KILN_GROUP_STORES(KILN_GROUP_ENUMERATOR) };
#undef KILN_GROUP_ENUMERATOR

struct GroupOpInfo {
  GroupOp op;
  const char *name;
  int arity;
};

inline constexpr GroupOpInfo kGroupOps[] = {
#define KILN_GROUP_OP_INFO(e, name, arity) {GroupOp::e, name, arity},
    KILN_GROUP_OPS(KILN_GROUP_OP_INFO)
#undef KILN_GROUP_OP_INFO
};

inline constexpr const char *kGroupKindNames[] = {
#define KILN_GROUP_NAME(e, name) name,
    KILN_GROUP_KINDS(KILN_GROUP_NAME)};
inline constexpr const char *kGroupStoreNames[] = {
    KILN_GROUP_STORES(KILN_GROUP_NAME)};
#undef KILN_GROUP_NAME

inline constexpr const char *name(GroupOp op) {
  return kGroupOps[static_cast<int>(op)].name;
}
inline constexpr int arity(GroupOp op) {
  return kGroupOps[static_cast<int>(op)].arity;
}
inline constexpr const char *name(GroupKind kind) {
  return kGroupKindNames[static_cast<int>(kind)];
}
inline constexpr const char *name(GroupStore store) {
  return kGroupStoreNames[static_cast<int>(store)];
}

/// The enumerator a plan's name stands for; nothing for an unknown name.
template <typename Enum> std::optional<Enum> parseGroupName(std::string_view);

template <> inline std::optional<GroupOp> parseGroupName(std::string_view s) {
  for (const GroupOpInfo &info : kGroupOps)
    if (s == info.name)
      return info.op;
  return std::nullopt;
}

template <> inline std::optional<GroupKind> parseGroupName(std::string_view s) {
  for (int i = 0; i < static_cast<int>(std::size(kGroupKindNames)); ++i)
    if (s == kGroupKindNames[i])
      return static_cast<GroupKind>(i);
  return std::nullopt;
}

template <>
inline std::optional<GroupStore> parseGroupName(std::string_view s) {
  for (int i = 0; i < static_cast<int>(std::size(kGroupStoreNames)); ++i)
    if (s == kGroupStoreNames[i])
      return static_cast<GroupStore>(i);
  return std::nullopt;
}

} // namespace kiln::plan

#endif // KILN_RUNTIME_PLAN_GROUP_H
