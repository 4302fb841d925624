//===- KilnLossParallelOps.td - Cross-entropy over a vocabulary slice -*- tablegen -*-===//
//
// Loss parallel (docs/tp.md, "The ends"): with the output projection
// column-parallel over the vocabulary, each tp rank holds the logits of
// every position for its vocabulary slice, `[..., V/tp]`, and the
// cross-entropy is computed without gathering them:
//
//   m     = all_reduce max (vocab_parallel_max(logits))
//   stats = all_reduce sum (vocab_parallel_stats(logits, m, targets))
//   loss  = vocab_parallel_loss(stats, m)
//
// The slice's columns are the vocabulary entries `[vocab_start, vocab_start
// + V/tp)`; those at `vocab_size` or beyond are padding (a vocabulary that
// tp does not divide) and take no part. The targets are f32 (exact integers,
// `index_to_float`) so that they travel through the f32 collectives.
// Autodiff: `vocab_parallel_loss` and `vocab_parallel_stats` have rules; the
// max is the softmax's shift, a constant of the loss (as the all-reduce
// `max`'s rule says), so no gradient flows into it.
//
// Included from KilnOps.td.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_KILN_IR_KILNLOSSPARALLELOPS_TD
#define KILN_DIALECT_KILN_IR_KILNLOSSPARALLELOPS_TD

def Kiln_IndexToFloatOp : Kiln_Op<"index_to_float", [Pure]> {
  let summary = "token ids as f32 (exact below 2^24)";
  let description = [{
    `result[i] = float(input[i])`; not differentiable (integers).

    Rules:
    - index_to_float_c1: `result` is f32 of `input`'s shape.
  }];
  let arguments = (ins Kiln_TokenTensor:$input);
  let results = (outs Kiln_F32Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Kiln_VocabParallelMaxOp : Kiln_Op<"vocab_parallel_max", [Pure]> {
  let summary = "each row's max over the rank's vocabulary slice";
  let description = [{
    `result[t] = max over columns v with vocab_start + v < vocab_size of
    logits[t, v]`, in f32.

    Rules (vocab_parallel_c1, shared by the family): `logits` has a last
    (vocabulary) dim, `0 <= vocab_start < vocab_size`, and the slice does
    not start past the vocabulary; `result` is f32 of `logits`' shape
    without its last dim.
  }];
  let arguments = (ins Kiln_FloatTensor:$logits, I64Attr:$vocab_start,
                       I64Attr:$vocab_size);
  let results = (outs Kiln_F32Tensor:$result);
  let assemblyFormat = "$logits attr-dict `:` type($logits) `->` type($result)";
  let hasVerifier = 1;
}

def Kiln_VocabParallelStatsOp : Kiln_Op<"vocab_parallel_stats", [Pure,
    DeclareOpInterfaceMethods<Kiln_DifferentiableOpInterface>]> {
  let summary = "each row's sum of exponentials and target logit on a slice";
  let description = [{
    `result[t, 0] = sum over the slice's valid columns v of exp(logits[t, v]
    - max[t])`; `result[t, 1] = logits[t, targets[t] - vocab_start]` when
    the target lies in the slice, else 0. Summed over the tp ranks, the
    row's whole-vocabulary sum and target logit.

    Rules:
    - vocab_parallel_c1: as `vocab_parallel_max`'s.
    - vocab_parallel_c2: `max` and `targets` are f32 of the logits' shape
      without the last dim; `result` is f32 of that shape plus [2].
  }];
  let arguments = (ins Kiln_FloatTensor:$logits, Kiln_F32Tensor:$max,
                       Kiln_F32Tensor:$targets, I64Attr:$vocab_start,
                       I64Attr:$vocab_size);
  let results = (outs Kiln_F32Tensor:$result);
  let assemblyFormat = [{
    $logits `,` $max `,` $targets attr-dict `:` type($logits) `,` type($max)
    `,` type($targets) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Kiln_VocabParallelStatsGradOp : Kiln_Op<"vocab_parallel_stats_grad",
    [Pure, AllTypesMatch<["logits", "result"]>]> {
  let summary = "gradient of vocab_parallel_stats for the logits";
  let description = [{
    `result[t, v] = grad[t, 0] * exp(logits[t, v] - max[t]) + grad[t, 1] *
    (vocab_start + v == targets[t])` on the valid columns, 0 on padding.

    Rules: those of `vocab_parallel_stats`, `grad` shaped like its result,
    `result` like the logits.
  }];
  let arguments = (ins Kiln_F32Tensor:$grad, Kiln_FloatTensor:$logits,
                       Kiln_F32Tensor:$max, Kiln_F32Tensor:$targets,
                       I64Attr:$vocab_start, I64Attr:$vocab_size);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `,` $logits `,` $max `,` $targets attr-dict `:` type($grad) `,`
    type($logits) `,` type($max) `,` type($targets)
  }];
  let hasVerifier = 1;
}

def Kiln_VocabParallelLossOp : Kiln_Op<"vocab_parallel_loss", [Pure,
    DeclareOpInterfaceMethods<Kiln_DifferentiableOpInterface>]> {
  let summary = "mean cross-entropy from the rows' reduced statistics";
  let description = [{
    `result = mean over rows t of (log(stats[t, 0]) + max[t] - stats[t,
    1])`, summed in double; a scalar.

    Rules:
    - vocab_parallel_loss_c1: `stats` is f32 `[..., 2]`, `max` f32 of its
      shape without the last dim; `result` is tensor<f32>.
  }];
  let arguments = (ins Kiln_F32Tensor:$stats, Kiln_F32Tensor:$max);
  let results = (outs Kiln_ScalarF32:$result);
  let assemblyFormat = [{
    $stats `,` $max attr-dict `:` type($stats) `,` type($max)
  }];
  let hasVerifier = 1;
}

def Kiln_VocabParallelLossGradOp : Kiln_Op<"vocab_parallel_loss_grad",
    [Pure, AllTypesMatch<["stats", "result"]>]> {
  let summary = "gradient of vocab_parallel_loss for the statistics";
  let description = [{
    `result[t, 0] = grad / (N stats[t, 0])`, `result[t, 1] = -grad / N`
    with `N` the number of rows.
  }];
  let arguments = (ins Kiln_ScalarF32:$grad, Kiln_F32Tensor:$stats);
  let results = (outs Kiln_F32Tensor:$result);
  let assemblyFormat = "$grad `,` $stats attr-dict `:` type($stats)";
}

#endif // KILN_DIALECT_KILN_IR_KILNLOSSPARALLELOPS_TD
