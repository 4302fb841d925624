//===- KilnAttrs.td - Attributes of the kiln dialect -------*- tablegen -*-===//

#ifndef KILN_DIALECT_KILN_IR_KILNATTRS_TD
#define KILN_DIALECT_KILN_IR_KILNATTRS_TD

include "kiln/Dialect/Kiln/IR/KilnDialect.td"
include "mlir/IR/EnumAttr.td"

// What a linear computes in the model. Later passes decide by role (the FP8
// rewrite never touches `output` unless forced), so the role travels with
// the forward op and with both of its backward ops.
def Kiln_LinearRole : I32EnumAttr<"LinearRole", "role of a linear layer", [
  I32EnumAttrCase<"wq", 0>, I32EnumAttrCase<"wk", 1>,
  I32EnumAttrCase<"wv", 2>, I32EnumAttrCase<"wo", 3>,
  I32EnumAttrCase<"w1", 4>, I32EnumAttrCase<"w2", 5>,
  I32EnumAttrCase<"w3", 6>, I32EnumAttrCase<"output", 7>
]> {
  let cppNamespace = "::kiln";
  let genSpecializedAttr = 0;
}
def Kiln_LinearRoleAttr : EnumAttr<Kiln_Dialect, Kiln_LinearRole, "role"> {
  let assemblyFormat = "$value";
}

def Kiln_InitKind : I32EnumAttr<"InitKind", "parameter initialiser", [
  I32EnumAttrCase<"zeros", 0>, I32EnumAttrCase<"ones", 1>,
  I32EnumAttrCase<"normal", 2>, I32EnumAttrCase<"trunc_normal", 3>
]> {
  let cppNamespace = "::kiln";
  let genSpecializedAttr = 0;
}

def Kiln_InitAttr : AttrDef<Kiln_Dialect, "Init"> {
  let mnemonic = "init";
  let summary = "how a parameter is initialised";
  let description = [{
    `#kiln.init<ones>`, `#kiln.init<zeros>`, `#kiln.init<normal, std = S>` or
    `#kiln.init<trunc_normal, std = S, a = A, b = B>` (mean 0, truncated to
    the absolute interval [A, B], as torch.nn.init.trunc_normal_).
  }];
  let parameters = (ins "InitKind":$kind, APFloatParameter<"">:$std,
                        APFloatParameter<"">:$lo, APFloatParameter<"">:$hi);
  let builders = [
    AttrBuilder<(ins "InitKind":$kind, "double":$std, "double":$lo,
                     "double":$hi), [{
      return $_get($_ctxt, kind, ::llvm::APFloat(std), ::llvm::APFloat(lo),
                   ::llvm::APFloat(hi));
    }]>
  ];
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

#endif // KILN_DIALECT_KILN_IR_KILNATTRS_TD
