//===- KilnOps.td - Ops of the kiln dialect ----------------*- tablegen -*-===//
//
// Each op's description lists its verifier rules with labels (`linear_c1`);
// tests/Dialect/Kiln/invalid.mlir names one test function after each label.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_KILN_IR_KILNOPS_TD
#define KILN_DIALECT_KILN_IR_KILNOPS_TD

include "kiln/Dialect/Kiln/IR/KilnDialect.td"
include "kiln/Dialect/Kiln/IR/KilnAttrs.td"
include "kiln/Dialect/Kiln/IR/KilnInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/CommonTypeConstraints.td"
include "mlir/IR/OpBase.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

def Kiln_Float : AnyTypeOf<[F64, F32, BF16, F16]>;
def Kiln_FloatTensor : StaticShapeTensorOf<[F64, F32, BF16, F16]>;
def Kiln_TokenTensor : StaticShapeTensorOf<[I32]>;
// FP8 codes (kiln-fp8-linear): e4m3fn for activations and weights, e5m2 for
// gradients. Only the layout ops move them; scaled_matmul reads them.
def Kiln_Fp8Tensor : StaticShapeTensorOf<[F8E4M3FN, F8E5M2]>;
def Kiln_LayoutTensor
    : StaticShapeTensorOf<[F64, F32, BF16, F16, F8E4M3FN, F8E5M2]>;
// What reshape and unflatten also move: token ids (kiln-grad-accum takes
// each microbatch's rows of `tokens` and `targets` with them).
def Kiln_MovableTensor
    : StaticShapeTensorOf<[F64, F32, BF16, F16, F8E4M3FN, F8E5M2, I32]>;
// Scalars (losses, norms, learning rates, the step) are rank-0 tensors.
def Kiln_ScalarF32 : 0DTensorOf<[F32]> {
  let builderCall = "::mlir::RankedTensorType::get({}, $_builder.getF32Type())";
}
def Kiln_ScalarI64 : 0DTensorOf<[I64]> {
  let builderCall = "::mlir::RankedTensorType::get({}, $_builder.getI64Type())";
}

//===----------------------------------------------------------------------===//
// Embedding and normalisation
//===----------------------------------------------------------------------===//

def Kiln_EmbeddingOp : Kiln_Op<"embedding", [Pure,
    DeclareOpInterfaceMethods<Kiln_DifferentiableOpInterface>]> {
  let summary = "row lookup in an embedding table";
  let description = [{
    `result[b, s, :] = table[tokens[b, s], :]`. Token ids outside
    `[0, vocab)` are a runtime error.

    A tensor-parallel rank's slice of the table (kiln-tp-partition) says
    which rows it holds: `vocab_start` and `vocab_size` (both or neither)
    make the table rows `[vocab_start, vocab_start + rows)` of a vocabulary
    of `vocab_size`. An id in that vocabulary but outside the slice looks
    up a row of zeros (the rows are summed over the ranks); rows past
    `vocab_size` are padding, never looked up.

    Rules:
    - embedding_c1: `table` has rank 2 (`[vocab, dim]`).
    - embedding_c2: `result` has shape `tokens.shape ++ [dim]`.
    - embedding_c3: `result` has the element type of `table`.
    - embedding_c4: `vocab_start` and `vocab_size` are both present or both
      absent, with `0 <= vocab_start < vocab_size`.

    ```mlir
    %h = kiln.embedding %table[%tokens] param("model.embed_tokens.weight")
        : tensor<256x64xf32>, tensor<2x16xi32> -> tensor<2x16x64xf32>
    %p = kiln.embedding %slice[%ids] param("model.embed_tokens.weight")
        {vocab_start = 128 : i64, vocab_size = 256 : i64}
        : tensor<128x64xf32>, tensor<64xi32> -> tensor<64x64xf32>
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$table, Kiln_TokenTensor:$tokens,
                       StrAttr:$param, OptionalAttr<I64Attr>:$vocab_start,
                       OptionalAttr<I64Attr>:$vocab_size);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = [{
    $table `[` $tokens `]` `param` `(` $param `)` attr-dict `:`
    type($table) `,` type($tokens) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Kiln_RMSNormOp : Kiln_Op<"rms_norm", [Pure,
    DeclareOpInterfaceMethods<Kiln_DifferentiableOpInterface>,
    AllTypesMatch<["input", "result"]>]> {
  let summary = "root-mean-square normalisation over the last dimension";
  let description = [{
    `result = input / sqrt(mean(input^2, -1) + eps) * weight`, the mean and
    the reciprocal square root computed in at least fp32.

    Rules:
    - rms_norm_c1: `weight` has rank 1 and the size of the last dim of `input`.
    - rms_norm_c2: `weight` and `input` have the same element type.
    - rms_norm_c3: `eps` is positive.
  }];
  let arguments = (ins Kiln_FloatTensor:$input, Kiln_FloatTensor:$weight,
                       F64Attr:$eps);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight attr-dict `:` type($input) `,` type($weight)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Linear
//===----------------------------------------------------------------------===//

def Kiln_LinearOp : Kiln_Op<"linear", [Pure,
    DeclareOpInterfaceMethods<Kiln_DifferentiableOpInterface>]> {
  let summary = "x * W^T for a weight with a role and a parameter name";
  let description = [{
    `result[..., n] = sum_k input[..., k] * weight[n, k]`, accumulated in
    fp32. `role` says which linear of the model this is and `param` names its
    weight; both survive differentiation and the FP8 rewrite looks at them.
    `fp8`, when present, is kiln-fp8-select's decision for the linear
    (`#kiln.fp8_choice`), which kiln-fsdp, kiln-fp8-linear and `kiln explain
    --fp8` read.

    Rules:
    - linear_c1: `input` has rank >= 2 and `weight` has rank 2.
    - linear_c2: the last dim of `input` equals dim 1 of `weight`.
    - linear_c3: `result` has shape `input.shape[:-1] ++ [weight.shape[0]]`.
    - linear_c4: `input`, `weight` and `result` share one element type.

    ```mlir
    %q = kiln.linear wq %x, %w param("model.layers.0.self_attn.q_proj.weight")
        : tensor<2x16x64xf32>, tensor<64x64xf32> -> tensor<2x16x64xf32>
    %o = kiln.linear output %h, %e param("lm_head.weight")
        {fp8 = #kiln.fp8_choice<bf16, output_projection>}
        : tensor<2x16x64xbf16>, tensor<256x64xbf16> -> tensor<2x16x256xbf16>
    ```
  }];
  let arguments = (ins Kiln_LinearRoleAttr:$role, Kiln_FloatTensor:$input,
                       Kiln_FloatTensor:$weight, StrAttr:$param,
                       OptionalAttr<Kiln_Fp8ChoiceAttr>:$fp8);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = [{
    `` $role $input `,` $weight `param` `(` $param `)` attr-dict `:`
    type($input) `,` type($weight) `->` type($result)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

def Kiln_RopeOp : Kiln_Op<"rope", [Pure,
    DeclareOpInterfaceMethods<Kiln_DifferentiableOpInterface>, AllTypesMatch<["input", "result"]>]> {
  let summary = "rotary position embedding (rotate-half layout)";
  let description = [{
    Rotates pairs `(x[i], x[i + D/2])` of each head of `input`
    (`[batch, seq, heads, D]`) at position `s` by the angle
    `s * theta^(-2i/D)`: the rotate-half convention of HF Llama, so that
    checkpoints are HF's layout.

    Rules:
    - rope_c1: `input` has rank 4.
    - rope_c2: the head dim `D` is even.
    - rope_c3: `theta` is greater than 1.
  }];
  let arguments = (ins Kiln_FloatTensor:$input, F64Attr:$theta);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Kiln_AttentionOp : Kiln_Op<"attention", [Pure,
    DeclareOpInterfaceMethods<Kiln_DifferentiableOpInterface>,
    AllTypesMatch<["query", "result"]>]> {
  let summary = "scaled dot-product attention with grouped-query heads";
  let description = [{
    `result = softmax(scale * q k^T + mask) v` per batch and query head; query
    head `h` reads key/value head `h / (Hq / Hkv)`. With `causal`, position
    `i` sees keys `j <= i`. The second result is the log-sum-exp of each
    softmax row (`[batch, Hq, seq]`, fp32): the backward uses it instead of
    keeping the `seq x seq` probabilities.

    Rules:
    - attention_c1: `query`, `key`, `value` have rank 4 (`[B, S, H, D]`).
    - attention_c2: `key` and `value` have the same type.
    - attention_c3: batch and head dim agree between `query` and `key`.
    - attention_c4: `Hkv` divides `Hq` (grouped-query attention).
    - attention_c5: with `causal`, query and key sequence lengths agree.
    - attention_c6: `logsumexp` is `tensor<B x Hq x S x f32>`.
    - attention_c7: `query` and `key` share one element type.

    ```mlir
    %o, %lse = kiln.attention %q, %k, %v {causal, scale = 0.125 : f64}
        : tensor<2x16x8x64xf32>, tensor<2x16x4x64xf32> -> tensor<2x8x16xf32>
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$query, Kiln_FloatTensor:$key,
                       Kiln_FloatTensor:$value, UnitAttr:$causal,
                       F64Attr:$scale);
  let results = (outs Kiln_FloatTensor:$result,
                      StaticShapeTensorOf<[F32]>:$logsumexp);
  let assemblyFormat = [{
    $query `,` $key `,` $value attr-dict `:` type($query) `,` type($key)
    `,` type($value) `->` type($logsumexp)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

class Kiln_UnaryElementwiseOp<string mnemonic, string summaryText>
    : Kiln_Op<mnemonic, [Pure, Elementwise, SameOperandsAndResultType,
                         DeclareOpInterfaceMethods<Kiln_DifferentiableOpInterface>]> {
  let summary = summaryText;
  let arguments = (ins Kiln_FloatTensor:$input);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

class Kiln_BinaryElementwiseOp<string mnemonic, string summaryText,
                               list<Trait> traits = []>
    : Kiln_Op<mnemonic, !listconcat([Pure, Elementwise,
        SameOperandsAndResultType,
        DeclareOpInterfaceMethods<Kiln_DifferentiableOpInterface>], traits)> {
  let summary = summaryText;
  let description = [{
    Operands and result have one type: there is no implicit broadcasting.
  }];
  let arguments = (ins Kiln_FloatTensor:$lhs, Kiln_FloatTensor:$rhs);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def Kiln_SiluOp : Kiln_UnaryElementwiseOp<"silu", "x * sigmoid(x)">;
def Kiln_MulOp : Kiln_BinaryElementwiseOp<"mul", "elementwise product",
                                          [Commutative]>;
def Kiln_AddOp : Kiln_BinaryElementwiseOp<"add", "elementwise sum",
                                          [Commutative]>;

//===----------------------------------------------------------------------===//
// Layout
//===----------------------------------------------------------------------===//

def Kiln_ReshapeOp : Kiln_Op<"reshape", [Pure,
    DeclareOpInterfaceMethods<Kiln_DifferentiableOpInterface>]> {
  let summary = "same elements, row-major, another shape";
  let description = [{
    Rules:
    - reshape_c1: `input` and `result` have the same element type.
    - reshape_c2: `input` and `result` have the same number of elements.
  }];
  let arguments = (ins Kiln_MovableTensor:$input);
  let results = (outs Kiln_MovableTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
  let hasCanonicalizer = 1;
}

def Kiln_TransposeOp : Kiln_Op<"transpose", [Pure,
    DeclareOpInterfaceMethods<Kiln_DifferentiableOpInterface>]> {
  let summary = "permutes dimensions";
  let description = [{
    `result.shape[i] = input.shape[permutation[i]]`.

    Rules:
    - transpose_c1: `permutation` is a permutation of `[0, rank)`.
    - transpose_c2: `result` has the permuted shape and the element type of
      `input`.
  }];
  let arguments = (ins Kiln_LayoutTensor:$input,
                       DenseI64ArrayAttr:$permutation);
  let results = (outs Kiln_LayoutTensor:$result);
  let assemblyFormat = [{
    $input $permutation attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
  let hasFolder = 1;
  let hasCanonicalizer = 1;
}

//===----------------------------------------------------------------------===//
// Precision
//===----------------------------------------------------------------------===//

def Kiln_CastOp : Kiln_Op<"cast", [Pure, Elementwise,
    DeclareOpInterfaceMethods<Kiln_DifferentiableOpInterface>]> {
  let summary = "converts elements to another float type";
  let description = [{
    Each element rounded to the nearest value of the result type, ties to
    even (bf16 and f16 from f32: round-to-nearest-even on the bits; widening
    is exact). The mixed-precision pass makes every cast of a training step
    an explicit `kiln.cast`.

    Rules:
    - cast_c1: `input` and `result` have the same shape.
  }];
  let arguments = (ins Kiln_FloatTensor:$input);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Loss
//===----------------------------------------------------------------------===//

def Kiln_CrossEntropyOp : Kiln_Op<"cross_entropy", [Pure,
    DeclareOpInterfaceMethods<Kiln_DifferentiableOpInterface>]> {
  let summary = "mean token cross-entropy of logits against targets";
  let description = [{
    `result = mean over tokens t of (logsumexp(logits[t, :]) -
    logits[t, targets[t]])`, computed in fp32; a scalar.

    Rules:
    - cross_entropy_c1: `logits` has rank `rank(targets) + 1`, and the
      leading dims agree.
    - cross_entropy_c2: `result` is a rank-0 tensor of f32.
  }];
  let arguments = (ins Kiln_FloatTensor:$logits, Kiln_TokenTensor:$targets);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = [{
    $logits `,` $targets attr-dict `:` type($logits) `,` type($targets)
    `->` type($result)
  }];
  let hasVerifier = 1;
}

include "kiln/Dialect/Kiln/IR/KilnGradOps.td"
include "kiln/Dialect/Kiln/IR/KilnOptimizerOps.td"
include "kiln/Dialect/Kiln/IR/KilnFusionOps.td"
include "kiln/Dialect/Kiln/IR/KilnCollectiveOps.td"
include "kiln/Dialect/Kiln/IR/KilnFp8Ops.td"
include "kiln/Dialect/Kiln/IR/KilnLossParallelOps.td"
include "kiln/Dialect/Kiln/IR/KilnPipelineOps.td"

#endif // KILN_DIALECT_KILN_IR_KILNOPS_TD
