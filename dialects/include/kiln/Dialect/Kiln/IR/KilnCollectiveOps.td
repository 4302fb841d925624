//===- KilnCollectiveOps.td - FSDP: flat shards and collectives -*- tablegen -*-===//
//
// What `kiln-fsdp` writes. A group of parameters (a transformer block, the
// embedding, the final norm with the output projection) lives as one flat
// shard per rank; `all_gather_start` + `wait` rebuild the flat buffer,
// `unflatten` views each parameter in it; gradients are packed with
// `flatten` and reduce-scattered back to shards. Collectives are
// asynchronous: a `*_start` op begins one and its single user, `kiln.wait`,
// is where its result is needed, so a scheduling pass can move the two
// apart (prefetch). MLIR's `shard` dialect has synchronous collectives on
// values; a start/wait pair is what lets the schedule show overlap, so
// these are the dialect's own (docs/architecture.md, "shard").
//
// A collective in @forward_loss (tensor parallel's, docs/tp.md)
// differentiates like any op (KilnGradients.cpp, Megatron's convention):
// all_gather <-> reduce_scatter `sum` over the same axis, reduce_scatter <->
// all_gather, all_reduce `sum` <-> identity, `mean` <-> division by `ranks`,
// `max` <-> no gradient; `wait` passes its gradient through; flatten and
// unflatten are each other's (kiln-tp-partition's loss uses flatten to
// place the rank's logits in a zero buffer).
//
// Every collective names the mesh axis it runs over (`over dp_shard`, `over
// tp`: #kiln.axis): it runs among the ranks that share the other axis's
// coordinate, and `ranks` is that axis's size in the module's #kiln.mesh
// (docs/tp.md, "The mesh").
//
// Included from KilnOps.td.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_KILN_IR_KILNCOLLECTIVEOPS_TD
#define KILN_DIALECT_KILN_IR_KILNCOLLECTIVEOPS_TD

// FP8 codes travel too: `kiln-fp8-all-gather` gathers e4m3 shards.
def Kiln_FlatTensor : StaticShapeTensorOf<[F32, BF16, F16, F8E4M3FN]>;
// What unflatten takes a slice of, and what an all-gather moves: a flat
// buffer, or token ids (a microbatch's; the vocabulary-parallel embedding's,
// gathered over tp by kiln-tp-partition and copied as they are).
def Kiln_SliceableTensor
    : StaticShapeTensorOf<[F32, BF16, F16, F8E4M3FN, I32]>;

def Kiln_AllGatherStartOp : Kiln_Op<"all_gather_start",
    [DeclareOpInterfaceMethods<Kiln_DifferentiableOpInterface>]> {
  let summary = "begins gathering every rank's shard into one buffer";
  let description = [{
    The result (available at its `kiln.wait`) is the `ranks` shards of the
    ranks along `axis` concatenated in their order on it. `group` names the
    parameter group, for the schedule and for messages.

    ```mlir
    %s = kiln.all_gather_start %c over dp_shard {group = "model.layers.0", ranks = 2 : i64} : tensor<4160xbf16> -> tensor<8320xbf16>
    ```

    Rules:
    - all_gather_start_c1: operand and result are rank-1 tensors of one
      element type, the result `ranks` times as long.
    - all_gather_start_c2: its only user is a `kiln.wait`.
    - collective_axis: with a `#kiln.mesh` on the module, `ranks` is the
      size of `axis` in it.
  }];
  let arguments = (ins Kiln_SliceableTensor:$shard, Kiln_MeshAxisAttr:$axis,
                       I64Attr:$ranks, StrAttr:$group);
  let results = (outs Kiln_SliceableTensor:$result);
  let assemblyFormat = [{
    $shard `over` $axis attr-dict `:` type($shard) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Kiln_ReduceScatterStartOp : Kiln_Op<"reduce_scatter_start",
    [DeclareOpInterfaceMethods<Kiln_DifferentiableOpInterface>]> {
  let summary = "begins reducing a buffer over ranks, each keeping its shard";
  let description = [{
    Every rank along `axis` contributes a buffer `ranks` times the result's
    length; the rank at position r on the axis gets chunk r of the
    element-wise reduction (`sum` or `mean`: summed in axis order, then
    divided by `ranks`).

    Rules:
    - reduce_scatter_start_c1: rank-1 operand and result of one element
      type, the operand `ranks` times as long.
    - reduce_scatter_start_c2: `reduction` is `sum` or `mean`.
    - reduce_scatter_start_c3: its only user is a `kiln.wait`.
    - collective_axis: as all_gather_start's.
  }];
  let arguments = (ins Kiln_FlatTensor:$input, Kiln_MeshAxisAttr:$axis,
                       I64Attr:$ranks, StrAttr:$reduction, StrAttr:$group);
  let results = (outs Kiln_FlatTensor:$result);
  let assemblyFormat = [{
    $input `over` $axis attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Kiln_AllReduceStartOp : Kiln_Op<"all_reduce_start",
    [AllTypesMatch<["input", "result"]>,
     DeclareOpInterfaceMethods<Kiln_DifferentiableOpInterface>]> {
  let summary = "begins reducing a tensor over ranks, every rank getting it";
  let description = [{
    Over the ranks along `axis`: `sum`, `mean` (the sum in axis order
    divided by `ranks`) or `max`.

    Rules:
    - all_reduce_start_c1: `reduction` is `sum`, `mean` or `max`.
    - all_reduce_start_c2: its only user is a `kiln.wait`.
    - collective_axis: as all_gather_start's.
  }];
  let arguments = (ins Kiln_FloatTensor:$input, Kiln_MeshAxisAttr:$axis,
                       I64Attr:$ranks, StrAttr:$reduction);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$input `over` $axis attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Kiln_SendRecvStartOp : Kiln_Op<"send_recv_start",
    [AllTypesMatch<["input", "result"]>,
     DeclareOpInterfaceMethods<Kiln_DifferentiableOpInterface>]> {
  let summary = "begins passing a buffer `shift` places along a ring";
  let description = [{
    Every rank along `axis` sends its buffer to the rank `shift` positions
    after it on the axis (mod `ranks`) and receives the buffer of the rank
    `shift` positions before it: one step of a ring. `kiln-async-tp` builds
    its collective matmuls from these (docs/tp.md, "Async TP"); its
    gradient passes the gradient back the other way (shift `ranks - shift`).

    ```mlir
    %s = kiln.send_recv_start %c over tp {ranks = 4 : i64, shift = 1 : i64} : tensor<4096xf32>
    ```

    Rules:
    - send_recv_start_c1: operand and result are one rank-1 type.
    - send_recv_start_c2: `shift` is in [1, ranks).
    - send_recv_start_c3: its only user is a `kiln.wait`.
    - collective_axis: as all_gather_start's.
  }];
  let arguments = (ins Kiln_FlatTensor:$input, Kiln_MeshAxisAttr:$axis,
                       I64Attr:$ranks, I64Attr:$shift);
  let results = (outs Kiln_FlatTensor:$result);
  let assemblyFormat = "$input `over` $axis attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Kiln_WaitOp : Kiln_Op<"wait", [AllTypesMatch<["pending", "result"]>,
    DeclareOpInterfaceMethods<Kiln_DifferentiableOpInterface>]> {
  let summary = "the result of a collective, once it has completed";
  let description = [{
    Its operand is the result of a `*_start` op; the value is usable from
    here on.
  }];
  let arguments = (ins AnyRankedTensor:$pending);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$pending attr-dict `:` type($result)";
}

def Kiln_UnflattenOp : Kiln_Op<"unflatten", [Pure,
    DeclareOpInterfaceMethods<Kiln_DifferentiableOpInterface>]> {
  let summary = "one parameter's elements of a flat buffer, in its shape";
  let description = [{
    `result = reshape(flat[offset : offset + numel(result)])`. Also takes
    one weight's FP8 codes out of a gathered e4m3 buffer, and one scale
    (rank-0) out of a vector of scales.

    Rules:
    - unflatten_c1: `flat` has rank 1 and the element type of the result,
      and the slice lies inside it.
  }];
  let arguments = (ins Kiln_SliceableTensor:$flat, I64Attr:$offset);
  let results = (outs Kiln_MovableTensor:$result);
  let assemblyFormat = [{
    $flat `[` $offset `]` attr-dict `:` type($flat) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Kiln_FlattenOp : Kiln_Op<"flatten", [Pure,
    DeclareOpInterfaceMethods<Kiln_DifferentiableOpInterface>]> {
  let summary = "tensors packed into one flat buffer, zeros elsewhere";
  let description = [{
    Operand i's elements (row-major) at `offsets[i]`; the rest (padding) is
    zero.

    Rules:
    - flatten_c1: one offset per operand; the operands share the result's
      element type and lie inside it without overlapping.
  }];
  let arguments = (ins Variadic<Kiln_FloatTensor>:$parts,
                       DenseI64ArrayAttr:$offsets);
  let results = (outs Kiln_FlatTensor:$result);
  let assemblyFormat = [{
    $parts $offsets attr-dict `:` type($parts) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Kiln_DivideOp : Kiln_Op<"divide", [Pure, Elementwise,
    SameOperandsAndResultType]> {
  let summary = "division by a whole number (after autodiff: not "
                "differentiable)";
  let description = [{
    `result = input / by`, each element divided in f32 (correctly rounded)
    and rounded to the element type. `kiln-grad-accum` averages the
    microbatches' gradients and losses with it.

    ```mlir
    %m = kiln.divide %sum by 4 : tensor<64x64xf32>
    ```

    Rules:
    - divide_c1: `by` is at least 1.
  }];
  let arguments = (ins Kiln_FloatTensor:$input, I64Attr:$by);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$input `by` $by attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Kiln_MaximumOp : Kiln_Op<"maximum", [Pure, Elementwise,
    SameOperandsAndResultType]> {
  let summary = "elementwise maximum (after autodiff: not differentiable)";
  let description = [{
    `result = max(lhs, rhs)`, NaN if either is NaN. `kiln-grad-accum` takes
    the step's amax of a delayed-scaling FP8 operand as the largest of its
    microbatches' amaxes with it.
  }];
  let arguments = (ins Kiln_FloatTensor:$lhs, Kiln_FloatTensor:$rhs);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def Kiln_SqrtOp : Kiln_Op<"sqrt", [Pure, Elementwise,
    SameOperandsAndResultType]> {
  let summary = "square root (after autodiff: not differentiable)";
  let arguments = (ins Kiln_FloatTensor:$input);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

#endif // KILN_DIALECT_KILN_IR_KILNCOLLECTIVEOPS_TD
