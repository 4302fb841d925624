//===- ModelImporter.h - Config to the kiln dialect -------------*- C++ -*-===//

#ifndef KILN_FRONTEND_MODELIMPORTER_H
#define KILN_FRONTEND_MODELIMPORTER_H

#include "kiln/Dialect/Kiln/IR/KilnAttrs.h"
#include "kiln/Frontend/Config.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <string>
#include <vector>

namespace kiln {

/// One trainable parameter of the model, named as in HF Llama checkpoints.
struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  InitKind init;
  double std = 0.0, lo = 0.0, hi = 0.0;
};

/// The model's parameters in argument order: the embedding, then per layer
/// the attention norm, q/k/v/o, the FFN norm, gate (w1), up (w3), down (w2),
/// then the final norm and the output projection (absent when tied).
/// Initialisers follow TorchTitan's Llama 3 (depth-scaled output layers).
std::vector<ParamSpec> modelParameters(const Config &config);

/// Checks [float8] against #kiln.float8's rules (its verifier, the one place
/// they live), whether or not FP8 is enabled; a broken rule is reported
/// through `emitError`. Needs no dialect loaded.
mlir::LogicalResult
verifyFloat8Policy(mlir::MLIRContext *context, const Float8Config &f8,
                   llvm::function_ref<mlir::InFlightDiagnostic()> emitError);

/// [float8] as the module's FP8 policy (`kiln.float8`); null, with an error
/// through `emitError`, when it breaks one of the attribute's rules.
Float8Attr
importFloat8Policy(mlir::MLIRContext *context, const Float8Config &f8,
                   llvm::function_ref<mlir::InFlightDiagnostic()> emitError);

/// Builds `func.func @forward_loss(tokens, targets, params...) -> loss` in
/// the kiln dialect. Every op has a location into the model description.
/// Null, with an error, only for a config parseConfig did not check (its
/// [float8] breaking #kiln.float8's rules).
mlir::OwningOpRef<mlir::ModuleOp> importModel(mlir::MLIRContext *context,
                                              const Config &config);

} // namespace kiln

#endif // KILN_FRONTEND_MODELIMPORTER_H
