//===- Fp8Eligibility.h - Which linears run in FP8, and why ----*- C++ -*-===//
//
// One decision per forward linear, shared by kiln-fp8-linear (which
// rewrites what it accepts) and `kiln explain --fp8` (which prints it).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TRANSFORMS_FP8ELIGIBILITY_H
#define KILN_TRANSFORMS_FP8ELIGIBILITY_H

#include "kiln/Dialect/Kiln/IR/KilnOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include <string>
#include <vector>

namespace kiln {

/// The module attribute the frontend sets when [float8] enable = true.
inline constexpr llvm::StringLiteral kFloat8Attr = "kiln.float8";

/// [float8] as the passes read it.
struct Fp8Options {
  std::string recipe = "tensorwise"; // tensorwise | rowwise | delayed
  std::vector<std::string> filterFqns;
  bool autoFilterSmallKN = true;
  bool forceOutputProjection = false;
  bool allGather = false;
  /// The delayed recipe's history: steps kept, and how its amax is read
  /// (max | most_recent).
  int64_t amaxHistoryLen = 16;
  std::string amaxComputeAlgo = "max";

  /// From the module's kiln.float8, or nullopt when FP8 is off. A malformed
  /// attribute (kiln-opt input) is an error at the module.
  static mlir::FailureOr<std::optional<Fp8Options>>
  fromModule(mlir::ModuleOp module);
};

struct Fp8Decision {
  LinearOp linear;
  std::string param;
  LinearRole role;
  int64_t m, n, k; // y [m, n] = x [m, k] W^T
  bool fp8;
  /// Why not (empty when fp8): "output projection", "dim not divisible by
  /// 16", "small GEMM", "filtered by pattern '<p>'".
  std::string reason;
};

/// True when y [m, n] = x [m, k] W^T is too small to gain from FP8 under
/// `recipe`. The thresholds are those of torchao's H100 microbenchmarks of
/// a linear with its casts (torchao/float8 README, "performance"):
/// tensorwise loses when n <= 4096 and k <= 1024; rowwise when k <= 2048,
/// n <= 1024, or both k <= 4096 and n <= 2048.
bool isSmallFp8Gemm(llvm::StringRef recipe, int64_t n, int64_t k);

/// One decision per forward (not recomputed) kiln.linear of `func`, in
/// program order.
std::vector<Fp8Decision> decideFp8Linears(mlir::func::FuncOp func,
                                          const Fp8Options &options);

} // namespace kiln

#endif // KILN_TRANSFORMS_FP8ELIGIBILITY_H
