//===- KilnVerifiers.h - Checks shared by forward and backward ops -*- C++ -*-===//
//
// A backward op obeys the shape rules of its forward op; these functions
// hold each rule once. Private to the dialect library.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_KILN_IR_KILNVERIFIERS_H
#define KILN_DIALECT_KILN_IR_KILNVERIFIERS_H

#include "kiln/Dialect/Kiln/IR/KilnOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Operation.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>

namespace kiln::detail {

/// A shape as `[8, 128, 256]`.
inline std::string shapeStr(llvm::ArrayRef<int64_t> shape) {
  std::string out = "[";
  llvm::raw_string_ostream os(out);
  llvm::interleaveComma(shape, os);
  return out + "]";
}
using ::kiln::tensorOf;
inline std::string shapeOf(mlir::Value v) {
  return shapeStr(tensorOf(v).getShape());
}

mlir::LogicalResult verifyRMSNorm(mlir::Operation *op, mlir::Value input,
                                  mlir::Value weight, double eps);
/// An embedding's slice of the vocabulary: embedding_c4.
mlir::LogicalResult verifyVocabSlice(mlir::Operation *op,
                                     std::optional<int64_t> start,
                                     std::optional<int64_t> size);
mlir::LogicalResult verifyRope(mlir::Operation *op, mlir::Value input,
                               double theta);
mlir::LogicalResult verifyAttention(mlir::Operation *op, mlir::Value query,
                                    mlir::Value key, mlir::Value value,
                                    bool causal, mlir::Value logsumexp,
                                    double scale);
mlir::LogicalResult verifyCrossEntropy(mlir::Operation *op,
                                       mlir::Value logits,
                                       mlir::Value targets);

} // namespace kiln::detail

#endif // KILN_DIALECT_KILN_IR_KILNVERIFIERS_H
