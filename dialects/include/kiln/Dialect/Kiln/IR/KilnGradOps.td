//===- KilnGradOps.td - Backward ops of the kiln dialect ---*- tablegen -*-===//
//
// The ops `kiln-autodiff` emits. Each keeps the meaning of its forward op
// (a linear's backward knows its role and parameter), and takes the forward
// values it needs as explicit operands: saved residuals are plain SSA values
// that a later pass may recompute instead of keeping.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_KILN_IR_KILNGRADOPS_TD
#define KILN_DIALECT_KILN_IR_KILNGRADOPS_TD

def Kiln_EmbeddingGradOp : Kiln_Op<"embedding_grad", [Pure]> {
  let summary = "gradient of an embedding table";
  let description = [{
    `result[v, :] = sum over (b, s) with tokens[b, s] = v of grad[b, s, :]`,
    each sum in f32 at least. A bf16 or f16 `grad` may give an f32 `result`:
    the sums are then kept as they are instead of rounded (the precision
    phase asks for it when gradients are reduced in f32).

    With `vocab_start` and `vocab_size` (the embedding's slice of the
    table), `result` holds rows `[vocab_start, vocab_start + rows)`: the
    tokens outside them add nothing.

    Rules:
    - embedding_grad_c1: `grad` has shape `tokens.shape ++ [dim]`.
    - embedding_grad_c2: `result` is `[rows, dim]`, of the element type of
      `grad` or, for a `grad` narrower than f32, of f32.
    - embedding_grad_c3: as embedding_c4.
  }];
  let arguments = (ins Kiln_FloatTensor:$grad, Kiln_TokenTensor:$tokens,
                       StrAttr:$param, OptionalAttr<I64Attr>:$vocab_start,
                       OptionalAttr<I64Attr>:$vocab_size);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `,` $tokens `param` `(` $param `)` attr-dict `:` type($grad) `,`
    type($tokens) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Kiln_RMSNormGradOp : Kiln_Op<"rms_norm_grad", [Pure,
    AllTypesMatch<["grad", "input", "input_grad"]>,
    AllTypesMatch<["weight", "weight_grad"]>]> {
  let summary = "gradients of rms_norm for its input and its weight";
  let description = [{
    With `r = 1 / sqrt(mean(x^2) + eps)` per row and `g = grad * weight`:
    `input_grad = r * (g - x * r^2 * mean(g * x))` and
    `weight_grad = sum over rows of grad * x * r`.

    Rules: those of `kiln.rms_norm` for `input`, `weight` and `eps`.
  }];
  let arguments = (ins Kiln_FloatTensor:$grad, Kiln_FloatTensor:$input,
                       Kiln_FloatTensor:$weight, F64Attr:$eps);
  let results = (outs Kiln_FloatTensor:$input_grad,
                      Kiln_FloatTensor:$weight_grad);
  let assemblyFormat = [{
    $grad `,` $input `,` $weight attr-dict `:` type($input) `,` type($weight)
  }];
  let hasVerifier = 1;
}

def Kiln_LinearGradInputOp : Kiln_Op<"linear_grad_input", [Pure]> {
  let summary = "gradient of a linear for its input: grad * W";
  let description = [{
    `result[..., k] = sum_n grad[..., n] * weight[n, k]`, fp32 accumulation.
    `role` and `param` are those of the forward linear.

    Rules:
    - linear_grad_input_c1: `grad` has rank >= 2, `weight` rank 2, and the
      last dim of `grad` equals dim 0 of `weight`.
    - linear_grad_input_c2: `result` has shape
      `grad.shape[:-1] ++ [weight.shape[1]]` and one element type with
      `grad` and `weight`.
  }];
  let arguments = (ins Kiln_LinearRoleAttr:$role, Kiln_FloatTensor:$grad,
                       Kiln_FloatTensor:$weight, StrAttr:$param);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = [{
    `` $role $grad `,` $weight `param` `(` $param `)` attr-dict `:`
    type($grad) `,` type($weight) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Kiln_LinearGradWeightOp : Kiln_Op<"linear_grad_weight", [Pure]> {
  let summary = "gradient of a linear for its weight: grad^T * input";
  let description = [{
    `result[n, k] = sum over all leading indices i of grad[i, n] * input[i, k]`,
    fp32 accumulation. `role` and `param` are those of the forward linear.

    Rules:
    - linear_grad_weight_c1: `grad` and `input` have rank >= 2 and the same
      leading dims.
    - linear_grad_weight_c2: `result` is `[grad.shape[-1], input.shape[-1]]`
      with one element type with `grad` and `input`.
  }];
  let arguments = (ins Kiln_LinearRoleAttr:$role, Kiln_FloatTensor:$grad,
                       Kiln_FloatTensor:$input, StrAttr:$param);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = [{
    `` $role $grad `,` $input `param` `(` $param `)` attr-dict `:`
    type($grad) `,` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Kiln_RopeGradOp : Kiln_Op<"rope_grad", [Pure,
    AllTypesMatch<["grad", "result"]>]> {
  let summary = "gradient of rope: the rotation by the opposite angle";
  let description = [{
    Rules: those of `kiln.rope`.
  }];
  let arguments = (ins Kiln_FloatTensor:$grad, F64Attr:$theta);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$grad attr-dict `:` type($grad)";
  let hasVerifier = 1;
}

def Kiln_AttentionGradOp : Kiln_Op<"attention_grad", [Pure,
    AllTypesMatch<["grad", "output"]>,
    AllTypesMatch<["query", "query_grad"]>,
    AllTypesMatch<["key", "key_grad"]>,
    AllTypesMatch<["value", "value_grad"]>]> {
  let summary = "gradients of attention from the saved logsumexp";
  let description = [{
    Recomputes the probabilities row by row as `exp(scale * q k^T - lse)`
    from the forward's `logsumexp`, so no `seq x seq` matrix is saved:
    with `D_i = sum(grad_i * output_i)` and
    `ds_ij = p_ij (grad_i . v_j - D_i)`:
    `dq_i = scale sum_j ds_ij k_j`, `dk_j = scale sum_i ds_ij q_i`,
    `dv_j = sum_i p_ij grad_i`; key and value gradients are summed over the
    query heads that share them.

    Rules: those of `kiln.attention` for `query`, `key`, `value`, `output`
    and `logsumexp`.
  }];
  let arguments = (ins Kiln_FloatTensor:$grad, Kiln_FloatTensor:$query,
                       Kiln_FloatTensor:$key, Kiln_FloatTensor:$value,
                       Kiln_FloatTensor:$output,
                       StaticShapeTensorOf<[F32]>:$logsumexp,
                       UnitAttr:$causal, F64Attr:$scale);
  let results = (outs Kiln_FloatTensor:$query_grad,
                      Kiln_FloatTensor:$key_grad,
                      Kiln_FloatTensor:$value_grad);
  let assemblyFormat = [{
    $grad `,` $query `,` $key `,` $value `,` $output `,` $logsumexp attr-dict
    `:` type($output) `,` type($query) `,` type($key) `,` type($value) `,`
    type($logsumexp)
  }];
  let hasVerifier = 1;
}

def Kiln_SiluGradOp : Kiln_Op<"silu_grad", [Pure, Elementwise,
    SameOperandsAndResultType]> {
  let summary = "grad * s * (1 + x * (1 - s)) with s = sigmoid(x)";
  let arguments = (ins Kiln_FloatTensor:$grad, Kiln_FloatTensor:$input);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$grad `,` $input attr-dict `:` type($result)";
}

def Kiln_CrossEntropyGradOp : Kiln_Op<"cross_entropy_grad", [Pure,
    AllTypesMatch<["logits", "result"]>]> {
  let summary = "gradient of the mean cross-entropy for the logits";
  let description = [{
    `result[t, :] = grad * (softmax(logits[t, :]) - onehot(targets[t])) / N`
    with `N` the number of tokens, computed in fp32.

    Rules: those of `kiln.cross_entropy`.
  }];
  let arguments = (ins Kiln_ScalarF32:$grad,
                       Kiln_FloatTensor:$logits, Kiln_TokenTensor:$targets);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `,` $logits `,` $targets attr-dict `:` type($logits) `,`
    type($targets)
  }];
  let hasVerifier = 1;
}

#endif // KILN_DIALECT_KILN_IR_KILNGRADOPS_TD
