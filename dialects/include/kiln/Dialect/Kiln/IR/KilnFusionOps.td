//===- KilnFusionOps.td - Fused groups ---------------------*- tablegen -*-===//
//
// Included from KilnOps.td.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_KILN_IR_KILNFUSIONOPS_TD
#define KILN_DIALECT_KILN_IR_KILNFUSIONOPS_TD

include "mlir/Interfaces/ControlFlowInterfaces.td"

def Kiln_FusedGroupOp : Kiln_Op<"fused_group", [IsolatedFromAbove,
    RecursiveMemoryEffects, SingleBlock]> {
  let summary = "elementwise and row-wise ops computed in one pass over memory";
  let description = [{
    The body is a sequence of fusible kiln ops (`add`, `mul`, `silu`,
    `silu_grad`, `cast`, `sqrt`, `rms_norm`, `rms_norm_grad`, and a rank-2
    `transpose`) that share one iteration space: `rows x cols`, where `cols`
    is the last dimension of each op's main operand and `rows` the product
    of the others. The block arguments are the group's inputs; `kiln.yield`
    lists the values used after the group. The plan emitter writes the body
    as one `fused` step (a typed op list, docs/plan.md); the values inside
    are never stored.

    Rules:
    - fused_group_c1: the block arguments have the types of the inputs.
    - fused_group_c2: `kiln.yield` has the types of the results.
    - fused_group_c3: every op of the body is fusible and has the group's
      iteration space.

    ```mlir
    %h, %n = kiln.fused_group(%x, %dx, %w) : (tensor<2x4x8xbf16>, tensor<2x4x8xbf16>, tensor<8xbf16>) -> (tensor<2x4x8xbf16>, tensor<2x4x8xbf16>) {
    ^bb0(%a: tensor<2x4x8xbf16>, %b: tensor<2x4x8xbf16>, %c: tensor<8xbf16>):
      %s = kiln.add %a, %b : tensor<2x4x8xbf16>
      %r = kiln.rms_norm %s, %c {eps = 1.0e-05 : f64} : tensor<2x4x8xbf16>, tensor<8xbf16>
      kiln.yield %s, %r : tensor<2x4x8xbf16>, tensor<2x4x8xbf16>
    }
    ```
  }];
  let arguments = (ins Variadic<AnyRankedTensor>:$inputs);
  let results = (outs Variadic<AnyRankedTensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    `(` $inputs `)` attr-dict `:` functional-type($inputs, $results) $body
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The rows x cols every op of the body iterates over.
    std::pair<int64_t, int64_t> getIterationSpace();
  }];
}

def Kiln_YieldOp : Kiln_Op<"yield", [Pure, Terminator, ReturnLike,
    HasParent<"FusedGroupOp">]> {
  let summary = "the values a fused group hands to the ops after it";
  let arguments = (ins Variadic<AnyRankedTensor>:$values);
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
}

#endif // KILN_DIALECT_KILN_IR_KILNFUSIONOPS_TD
