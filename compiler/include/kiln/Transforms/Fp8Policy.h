//===- Fp8Policy.h - The FP8 policy and kiln-fp8-select's marks -*- C++ -*-===//
//
// What the passes after kiln-fp8-select read: the module's #kiln.float8 (the
// recipe and its settings) and each kiln.linear's #kiln.fp8_choice. The
// rules that decide a linear live in kiln-fp8-select alone (Fp8Select.cpp);
// the rules on the policy itself in #kiln.float8's verifier.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TRANSFORMS_FP8POLICY_H
#define KILN_TRANSFORMS_FP8POLICY_H

#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"

#include "mlir/IR/BuiltinOps.h"

namespace kiln {

/// The module's FP8 policy, or a null attribute when FP8 is off. Anything
/// but a #kiln.float8 under `kiln.float8` is an error at the module.
inline mlir::FailureOr<Float8Attr> getFp8Policy(mlir::ModuleOp module) {
  mlir::Attribute raw = module->getAttr(KilnDialect::kFloat8AttrName);
  if (!raw)
    return Float8Attr();
  if (auto policy = llvm::dyn_cast<Float8Attr>(raw))
    return policy;
  return module.emitError(KilnDialect::kFloat8AttrName)
         << " must be a #kiln.float8 attribute, got " << raw;
}

/// kiln-fp8-select's mark on `linear`; an error at the linear when it has
/// none (the pass has not run on it). `pass` names the reader.
inline mlir::FailureOr<Fp8ChoiceAttr> getFp8Choice(LinearOp linear,
                                                   llvm::StringRef pass) {
  if (Fp8ChoiceAttr choice = linear.getFp8Attr())
    return choice;
  return linear.emitOpError()
         << "has no FP8 mark; " << pass
         << " reads the decisions kiln-fp8-select writes (run it first)";
}

} // namespace kiln

#endif // KILN_TRANSFORMS_FP8POLICY_H
