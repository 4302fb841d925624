//===- KilnInterfaces.td - Interfaces of the kiln dialect --*- tablegen -*-===//

#ifndef KILN_DIALECT_KILN_IR_KILNINTERFACES_TD
#define KILN_DIALECT_KILN_IR_KILNINTERFACES_TD

include "mlir/IR/OpBase.td"

def Kiln_DifferentiableOpInterface : OpInterface<"DifferentiableOpInterface"> {
  let cppNamespace = "::kiln";
  let description = [{
    An op that knows its reverse-mode derivative. `kiln-autodiff` walks a
    function backwards and asks each op for the gradients of its operands
    given the gradients of its results; the rule of each op lives with the op
    (KilnGradients.cpp), so the pass itself knows no op.
  }];
  let methods = [
    InterfaceMethod<[{
        Builds, at the builder's insertion point, the gradient of every
        operand given `resultGrads` (one per result; a null Value means that
        result does not reach the loss). Returns one Value per operand; null
        for operands with no gradient (integer token ids).
      }],
      "::llvm::SmallVector<::mlir::Value>", "buildGradients",
      (ins "::mlir::OpBuilder &":$builder,
           "::mlir::ArrayRef<::mlir::Value>":$resultGrads)>
  ];
}

#endif // KILN_DIALECT_KILN_IR_KILNINTERFACES_TD
