//===- KilnOps.h - Ops of the kiln dialect ----------------------*- C++ -*-===//

#ifndef KILN_DIALECT_KILN_IR_KILNOPS_H
#define KILN_DIALECT_KILN_IR_KILNOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "kiln/Dialect/Kiln/IR/KilnAttrs.h"
#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Dialect/Kiln/IR/KilnInterfaces.h.inc"

#define GET_OP_CLASSES
#include "kiln/Dialect/Kiln/IR/KilnOps.h.inc"

namespace kiln {
/// The type of a kiln value: every one is a ranked tensor.
inline mlir::RankedTensorType tensorOf(mlir::Value v) {
  return llvm::cast<mlir::RankedTensorType>(v.getType());
}

/// The rows x cols iteration space of an op that can join a fused group
/// (`kiln.fused_group`), or nothing for any other op.
std::optional<std::pair<int64_t, int64_t>> fusionSpace(mlir::Operation *op);

/// Whether another op of the same group may read `result` of a fusible op.
/// Not a sum over rows (rms_norm_grad's weight gradient) nor a transposed
/// result: both exist only once the whole group has run.
bool readableInGroup(mlir::OpResult result);

/// The model's compute: a GEMM, an attention or an embedding (and their
/// gradients). Fused groups never grow across it, and collectives are
/// scheduled to overlap it.
inline bool isModelCompute(mlir::Operation *op) {
  return llvm::isa<LinearOp, LinearGradInputOp, LinearGradWeightOp,
                   ScaledMatmulOp, AttentionOp, AttentionGradOp, EmbeddingOp,
                   EmbeddingGradOp>(op);
}
} // namespace kiln

#endif // KILN_DIALECT_KILN_IR_KILNOPS_H
