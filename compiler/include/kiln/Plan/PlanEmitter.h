//===- PlanEmitter.h - The module as the runtime's plan ---------*- C++ -*-===//
//
// The plan is the whole contract between compiler and runtime: JSON data,
// versioned, with no MLIR in it (docs/plan.md is its specification).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_PLAN_PLANEMITTER_H
#define KILN_PLAN_PLANEMITTER_H

#include "kiln/Runtime/Plan/Format.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/JSON.h"

namespace kiln {

/// Lowers @train_step and @forward_loss to the plan. Emits a diagnostic and
/// fails on IR the runtime cannot run (an op it does not know, a state that
/// cannot be updated in place).
mlir::FailureOr<llvm::json::Value> emitPlan(mlir::ModuleOp module);

} // namespace kiln

#endif // KILN_PLAN_PLANEMITTER_H
