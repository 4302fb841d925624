//===- KilnOptimizerOps.td - Optimizer ops of the kiln dialect -*- tablegen -*-===//
//
// What `kiln-optimizer` appends after the backward: the global gradient
// norm, the learning-rate schedule and one AdamW update per parameter, with
// PyTorch's formulas (torch.nn.utils.clip_grad_norm_, torch.optim.AdamW).
// Updates are functional: new values are results; the plan maps each back
// onto its persistent state.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_KILN_IR_KILNOPTIMIZEROPS_TD
#define KILN_DIALECT_KILN_IR_KILNOPTIMIZEROPS_TD

def Kiln_GradNormOp : Kiln_Op<"grad_norm", [Pure]> {
  let summary = "L2 norm of all gradients together";
  let description = [{
    `sqrt(sum over every element of every operand of g^2)`, accumulated in
    at least fp32: the `total_norm` of torch.nn.utils.clip_grad_norm_. With
    `squared`, the sum without the square root (a rank's share of a norm
    over shards, summed over ranks before the root is taken).
  }];
  let arguments = (ins Variadic<Kiln_FloatTensor>:$grads, UnitAttr:$squared);
  let results = (outs Kiln_ScalarF32:$result);
  let assemblyFormat = "$grads attr-dict `:` type($grads)";
  let hasVerifier = 1;
}

def Kiln_LRScheduleOp : Kiln_Op<"lr_schedule", [Pure]> {
  let summary = "learning rate of a step: linear warm-up, then decay";
  let description = [{
    For the 1-based step `s`: `peak * s / warmup_steps` while
    `s <= warmup_steps`; after it, with
    `p = (s - warmup_steps) / max(1, total_steps - warmup_steps)` clamped to
    [0, 1], `min_lr + (peak - min_lr) * (1 + cos(pi p)) / 2` for `cosine`, or
    `peak` for `constant`. Computed in double, returned as f32.

    Rules:
    - lr_schedule_c1: `decay` is `cosine` or `constant`.
  }];
  let arguments = (ins Kiln_ScalarI64:$step, F64Attr:$peak,
                       F64Attr:$min_lr, I64Attr:$warmup_steps,
                       I64Attr:$total_steps, StrAttr:$decay);
  let results = (outs Kiln_ScalarF32:$result);
  let assemblyFormat = "$step attr-dict";
  let hasVerifier = 1;
}

def Kiln_AdamWOp : Kiln_Op<"adamw", [Pure,
    AllTypesMatch<["param", "grad", "exp_avg", "exp_avg_sq", "new_param",
                   "new_exp_avg", "new_exp_avg_sq"]>]> {
  let summary = "one AdamW step of one parameter, after gradient clipping";
  let description = [{
    With `t` = `step`, `c = min(max_norm / (grad_norm + 1e-6), 1)` (1 when
    `max_norm` is 0) and `g = grad * c`:
    `p = param * (1 - lr * weight_decay)`,
    `m = beta1 * exp_avg + (1 - beta1) * g`,
    `v = beta2 * exp_avg_sq + (1 - beta2) * g^2`,
    `new_param = p - (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)`.
    Scalars in double, elementwise math in the parameter's type (f32).

    Rules:
    - adamw_c1: `beta1`, `beta2` in [0, 1), `eps` > 0, `weight_decay`,
      `max_norm` >= 0.
  }];
  let arguments = (ins Kiln_FloatTensor:$param, Kiln_FloatTensor:$grad,
                       Kiln_FloatTensor:$exp_avg, Kiln_FloatTensor:$exp_avg_sq,
                       Kiln_ScalarF32:$grad_norm,
                       Kiln_ScalarF32:$lr,
                       Kiln_ScalarI64:$step,
                       F64Attr:$beta1, F64Attr:$beta2, F64Attr:$eps,
                       F64Attr:$weight_decay, F64Attr:$max_norm);
  let results = (outs Kiln_FloatTensor:$new_param,
                      Kiln_FloatTensor:$new_exp_avg,
                      Kiln_FloatTensor:$new_exp_avg_sq);
  let assemblyFormat = [{
    $param `,` $grad `,` $exp_avg `,` $exp_avg_sq `,` $grad_norm `,` $lr `,`
    $step attr-dict `:` type($param)
  }];
  let hasVerifier = 1;
}

#endif // KILN_DIALECT_KILN_IR_KILNOPTIMIZEROPS_TD
