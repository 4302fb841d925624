//===- GroupLowering.h - Fusible ops as a fused group's op list -*- C++ -*-===//
//
// The plan writes elementwise and row-wise work as fused groups: a typed
// list of instructions (load, const, arithmetic, row_sum) and stores
// (docs/plan.md, "Fused groups"; the language's table is
// kiln/Runtime/Plan/Group.h). This is where each fusible kiln op gets its
// formula in that language; the CPU backend interprets the list, the CUDA
// backend generates a kernel from it.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_PLAN_GROUPLOWERING_H
#define KILN_PLAN_GROUPLOWERING_H

#include "mlir/IR/Operation.h"
#include "llvm/Support/JSON.h"

namespace kiln {

/// The `group` object of a `fused` step computing `ops` (fusible ops with
/// the iteration space `space`, in program order). `inputs[i]` is what the
/// step's operand i holds, `outputs[i]` what its result i must hold. Emits a
/// diagnostic and fails on an op or type the language cannot express.
mlir::FailureOr<llvm::json::Object>
lowerToGroup(llvm::ArrayRef<mlir::Operation *> ops,
             llvm::ArrayRef<mlir::Value> inputs,
             llvm::ArrayRef<mlir::Value> outputs,
             std::pair<int64_t, int64_t> space);

} // namespace kiln

#endif // KILN_PLAN_GROUPLOWERING_H
