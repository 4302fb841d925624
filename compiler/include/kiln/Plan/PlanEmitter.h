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

#include <string>

namespace kiln {

/// Lowers @train_step and @forward_loss to the plan: its JSON text, compact
/// or indented by `indent` spaces a level. Emits a diagnostic and fails on
/// IR the runtime cannot run (an op it does not know, a state that cannot
/// be updated in place).
mlir::FailureOr<std::string> emitPlan(mlir::ModuleOp module,
                                      unsigned indent = 0);

} // namespace kiln

#endif // KILN_PLAN_PLANEMITTER_H
