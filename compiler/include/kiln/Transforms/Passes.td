//===- Passes.td - Kiln's passes ---------------------------*- tablegen -*-===//

#ifndef KILN_TRANSFORMS_PASSES_TD
#define KILN_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def KilnTpPartition : Pass<"kiln-tp-partition", "mlir::ModuleOp"> {
  let summary = "Partition @forward_loss over the mesh's tp axis (Megatron, sequence parallel)";
  let description = [{
    Rewrites `@forward_loss` into what one rank of the tp axis computes
    (docs/tp.md), when the module's `#kiln.mesh` has `tp` > 1; the rank's
    position on the axis and the loss mode come from the module's `kiln.tp`
    dictionary (`{rank = r, loss_parallel = false}`, written by the
    frontend). Before autodiff, so the backward's collectives come from the
    forward's (KilnGradients.cpp).

    - q/k/v, w1/w3 and the output projection are column-parallel: their
      weights become rows `[r * N/tp, (r+1) * N/tp)`, the rank's heads, kv
      heads, FFN columns or vocabulary slice; o and w2 are row-parallel:
      columns `[r * K/tp, (r+1) * K/tp)`. Each such argument is retyped and
      marked `kiln.tp_shard = #kiln.tp_shard<dim = 0|1, index = r>`.
    - The embedding table is sharded over the vocabulary like the output
      projection (rows `[r * V/tp, (r+1) * V/tp)`, padded where tp does
      not divide V). Each rank gathers every rank's token ids over tp,
      looks them up in its rows (`vocab_start`, `vocab_size`: zeros for
      ids outside them), and one reduce-scatter (sum) over tp, in the
      gather's rank order, gives it its own positions `[B, S/tp, D]`.
    - Sequence parallel: the token and target inputs become the rank's
      sequence shard `[B, S/tp]` (`#kiln.tp_shard<dim = 1, index = r>`), so
      the embedding's output, the norms and the residual adds run on
      `[B, S/tp, D]`. One all-gather over tp rebuilds `[B, S, D]`
      before each column-parallel group (shared by q/k/v, by w1/w3); one
      reduce-scatter (sum) over tp follows each row-parallel linear.
      Collectives move flat buffers, so a gather or scatter along the
      sequence of `[B, S, D]` is a transpose to `[S, B, D]` and a reshape
      around it.
    - The loss (`loss_parallel = false`): the rank's logits `[B, S, V/tp]`
      become its positions with the whole vocabulary `[B, S/tp, V]` (an
      all-to-all written as `flatten` into a zero buffer at the rank's slot
      and one reduce-scatter (sum) over tp), the cross-entropy of its
      tokens, and an `all_reduce_start {mean}` over tp gives the mean over
      all tokens; its gradient rule divides by tp. Loss parallel is refused
      (not built).

    ```mlir
    %h = kiln.rms_norm %x, %n : tensor<2x8x16xf32>, tensor<16xf32>     // x: [B, S/tp, D]
    %q = kiln.linear wq %h, %wq param("...q_proj.weight") : ... -> tensor<2x16x32xf32>
    // becomes, at tp = 2:
    %t = kiln.transpose %h [1, 0, 2] : tensor<2x8x16xf32> -> tensor<8x2x16xf32>
    %f = kiln.reshape %t : tensor<8x2x16xf32> -> tensor<256xf32>
    %s = kiln.all_gather_start %f over tp {group = "...q_proj.weight", ranks = 2 : i64} : tensor<256xf32> -> tensor<512xf32>
    %g = kiln.wait %s : tensor<512xf32>
    %u = kiln.reshape %g : tensor<512xf32> -> tensor<16x2x16xf32>
    %hh = kiln.transpose %u [1, 0, 2] : tensor<16x2x16xf32> -> tensor<2x16x16xf32>
    %q = kiln.linear wq %hh, %wq param("...q_proj.weight") : tensor<2x16x16xf32>, tensor<16x16xf32> -> tensor<2x16x16xf32>
    ```
  }];
}

def KilnAutodiff : Pass<"kiln-autodiff", "mlir::ModuleOp"> {
  let summary = "Reverse-mode differentiation of @forward_loss";
  let description = [{
    Clones `@forward_loss` into `@loss_and_grads` and appends, before its
    return, the backward of every op that reaches the loss, in reverse
    order. Each op's rule comes from its DifferentiableOpInterface;
    gradients of a value used twice are summed with `kiln.add`. The function
    returns the loss and then one gradient per `kiln.param` argument, tagged
    `kiln.grad = "<param>"`. `@forward_loss` stays for evaluation.

    ```mlir
    func.func @forward_loss(%x: tensor<4x8xf32> {kiln.input = "x"}, %t: tensor<4xi32> {kiln.input = "targets"},
                            %w: tensor<16x8xf32> {kiln.param = "w", ...}) -> tensor<f32> {
      %y = kiln.linear w1 %x, %w param("w") : ... -> tensor<4x16xf32>
      %l = kiln.cross_entropy %y, %t : ...
      return %l : tensor<f32>
    }
    // becomes, besides @forward_loss:
    func.func @loss_and_grads(...) -> (tensor<f32>, tensor<16x8xf32> {kiln.grad = "w"}) {
      %y = kiln.linear w1 %x, %w param("w") : ...
      %l = kiln.cross_entropy %y, %t : ...
      %one = arith.constant dense<1.000000e+00> : tensor<f32>
      %dy = kiln.cross_entropy_grad %one, %y, %t : ...
      %dx = kiln.linear_grad_input w1 %dy, %w param("w") : ...    // erased when unused
      %dw = kiln.linear_grad_weight w1 %dy, %x param("w") : ...
      return %l, %dw : tensor<f32>, tensor<16x8xf32>
    }
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
}

def KilnOptimizer : Pass<"kiln-optimizer", "mlir::ModuleOp"> {
  let summary = "Append gradient clipping and AdamW: @loss_and_grads to @train_step";
  let description = [{
    Builds `@train_step` from a copy of `@loss_and_grads` (which stays, so
    that gradients can be checked against a reference). For every parameter it adds
    two optimizer-state arguments (`kiln.state = "exp_avg.<param>"` and
    `"exp_avg_sq.<param>"`), and one `step` input (the 1-based number of the
    step being taken). It appends one `kiln.grad_norm` over all gradients,
    one `kiln.lr_schedule`, and one `kiln.adamw` per parameter. The results
    are the loss, the gradient norm, the learning rate, then the new value of
    every parameter and state, each tagged `kiln.state = "<name>"` with the
    name of the argument it replaces.

    Hyperparameters come from the module's `kiln.optimizer` dictionary (set
    by the frontend from the model file's [optimizer], [lr_scheduler] and
    [training] sections).

    ```mlir
    func.func @train_step(%w: tensor<16x8xf32> {kiln.param = "w"}, ...,
                          %m: tensor<16x8xf32> {kiln.state = "exp_avg.w"},
                          %v: tensor<16x8xf32> {kiln.state = "exp_avg_sq.w"},
                          %step: tensor<i64> {kiln.input = "step"}) -> (...) {
      ...
      %norm = kiln.grad_norm %dw : tensor<16x8xf32>
      %lr = kiln.lr_schedule %step {decay = "cosine", ...}
      %w2, %m2, %v2 = kiln.adamw %w, %dw, %m, %v, %norm, %lr, %step {...} : tensor<16x8xf32>
      return %loss, %norm, %lr, %w2, %m2, %v2 : ...
    }
    ```
  }];
}

def KilnGradAccum : Pass<"kiln-grad-accum", "mlir::ModuleOp"> {
  let summary = "Gradient accumulation: the step's forward and backward once "
                "per microbatch";
  let description = [{
    When the module's `kiln.microbatches` is M > 1 (a no-op otherwise),
    after the shard and fp8 phases: every entry that reads `tokens` and
    `targets` takes M times their rows, and what its loss, the gradients
    AdamW reads, or its logits depend on runs once per microbatch on that
    microbatch's rows. The loss gradient's seed is divided by M
    (`kiln.divide`), gradients are summed as the microbatches go, losses
    summed and divided by M, the delayed FP8 recipe's amaxes combined with
    `kiln.maximum`, logits put back in row order. The gradient norm and
    AdamW run once, on the sums. What the results
    need but the batch does not (weight casts, FP8 weight quantization,
    and with `kiln.fsdp`'s reshard_after_forward false the parameter
    all-gathers) runs once, before the first microbatch. docs/pp.md,
    "Gradient accumulation". Under pipeline parallel (a mesh with pp > 1)
    it runs even for one microbatch: `pipe_recv` results are per
    microbatch, `pipe_send`s are results, every clone is marked
    `kiln.microbatch = k` for kiln-pipeline-schedule, and each FSDP
    gradient buffer is summed over the microbatches before its one
    reduce-scatter.
  }];
}

def KilnPipelineSchedule : Pass<"kiln-pipeline-schedule", "mlir::ModuleOp"> {
  let summary = "Pipeline parallel: a rank's microbatch forwards and "
                "backwards in the schedule's order, transfers as tagged "
                "starts and waits";
  let description = [{
    With a mesh whose pp > 1 and the module's `kiln.pp` dictionary
    (`{rank, stages, schedule}`), after kiln-grad-accum has cloned each
    entry once per microbatch and marked the clones (`kiln.microbatch`):
    each microbatch op is put in a unit, the forward or the backward of one
    microbatch on one of the rank's stages (its connected group names the
    stage, the stage's gradient starts the backward). The units are placed
    in the order PipelineOrder.h gives the rank for GPipe, 1F1B or
    Interleaved1F1B; what runs once goes as early as its operands allow.
    Each `pipe_recv` becomes a `pipe_recv_start` and its `wait` at the
    start of its unit; each `pipe_send` a `pipe_send_start` where its data
    is ready and a `wait` before the first unit that the simulated
    timeline starts after the receiving unit has begun. Tags name the
    microbatch, the receiving stage and the direction (docs/pp.md).

    ```mlir
    kiln.pipe_send %h activation {stage = 0 : i64, stages = 2 : i64} : tensor<1x32x64xf32>
    // becomes, microbatch 3 at pp 2:
    %t = kiln.pipe_send_start %h over pp {peer = 1 : i64, ranks = 2 : i64, tag = 14 : i64} : tensor<1x32x64xf32> -> tensor<f32>
    ...                                   // later units
    %d = kiln.wait %t : tensor<f32>
    ```
  }];
}

def KilnPipelineSync : Pass<"kiln-pipeline-sync", "mlir::ModuleOp"> {
  let summary = "Pipeline parallel: the loss and the clipping norm over "
                "every stage";
  let description = [{
    With a mesh whose pp > 1: the loss of @train_step, @forward_loss and
    @loss_and_grads (0 on a rank without the last stage) is summed over
    pp, and the squares of the gradient norm AdamW clips by are summed
    over pp before the square root (docs/pp.md).

    ```mlir
    %n = kiln.grad_norm %g0, %g1 : tensor<64xf32>, tensor<64x64xf32>
    // becomes
    %s = kiln.grad_norm %g0, %g1 {squared} : tensor<64xf32>, tensor<64x64xf32>
    %a = kiln.all_reduce_start %s over pp {ranks = 2 : i64, reduction = "sum"} : tensor<f32>
    %w = kiln.wait %a : tensor<f32>
    %n = kiln.sqrt %w : tensor<f32>
    ```
  }];
}

def KilnAsyncTp : Pass<"kiln-async-tp", "mlir::ModuleOp"> {
  let summary = "Async TP: tp collectives as rings of chunks overlapping their GEMMs";
  let description = [{
    With `async = true` in the module's `kiln.tp` dictionary
    (`parallelism.enable_async_tensor_parallel`) and a mesh with tp > 1,
    rewrites `@forward_loss` as kiln-tp-partition wrote it (docs/tp.md,
    "Async TP"):

    - an all-gather over tp of the sequence whose gathered `[B, S, D]` feeds
      only linears (q/k/v, w1/w3, the output projection) becomes `tp` ring
      steps: the rank multiplies the chunk it holds while `send_recv_start
      {shift = 1}` passes it on; each linear's chunk results are put back in
      sequence order with `flatten`;
    - a row-parallel linear (o, w2) followed by a reduce-scatter (sum) over
      tp becomes `tp` GEMMs of the rank's rows of one sequence chunk each,
      whose partial sums travel the ring, each rank adding its own: after
      `tp - 1` steps the rank holds its chunk's sum.

    Anything else is left as it is. Runs before autodiff, so the backward's
    rings come from the send_recv gradient rule.
  }];
}

def KilnAsyncTpGrads : Pass<"kiln-async-tp-grads", "mlir::ModuleOp"> {
  let summary = "One weight-gradient GEMM per async TP linear, as plain TP's";
  let description = [{
    After kiln-autodiff: the chunk GEMMs of a linear that kiln-async-tp
    split (marked `kiln.async_chunk = c`) each got a weight-gradient GEMM,
    summed with adds. Their output gradients and inputs are put back in
    sequence order and the sum becomes one `linear_grad_weight` over the
    whole sequence, plain TP's GEMM, so the weight gradient has its bits.
    Removes the marks. A no-op without them.
  }];
}

def KilnTpGradSync : Pass<"kiln-tp-grad-sync", "mlir::ModuleOp"> {
  let summary = "Sum the tp-replicated gradients over tp; the grad norm over tp";
  let description = [{
    When the module's `#kiln.mesh` has `tp` > 1 (a no-op otherwise), in
    `@loss_and_grads` and `@train_step` (right after `kiln-optimizer`): the
    gradient of each tp-replicated parameter (a `kiln.param` argument
    without `kiln.tp_shard`: the norms), which autodiff
    leaves as the rank's share from its sequence shard, is summed over tp
    by an `all_reduce_start over tp {reduction = "sum"}` + `wait` right
    after its definition; every use (the `kiln.grad` result, AdamW,
    `kiln.grad_norm`) reads the sum. Each `kiln.grad_norm` becomes the
    square root of the tp-sharded gradients' squares summed over tp plus
    the replicated gradients' squares (the same on every rank: counted
    once). That norm is `buildTpSquares`'s (TpNorm.h), which kiln-fsdp
    recognises.

    ```mlir
    %g = kiln.embedding_grad ... : ... -> tensor<64x16xf32>
    %n = kiln.grad_norm %g, %w : tensor<64x16xf32>, tensor<8x16xf32>
    // becomes, at tp = 2 (%w's parameter is tp-sharded):
    %g = kiln.embedding_grad ... : ... -> tensor<64x16xf32>
    %s = kiln.all_reduce_start %g over tp {ranks = 2 : i64, reduction = "sum"} : tensor<64x16xf32>
    %G = kiln.wait %s : tensor<64x16xf32>
    %q = kiln.grad_norm %w {squared} : tensor<8x16xf32>
    %t = kiln.all_reduce_start %q over tp {ranks = 2 : i64, reduction = "sum"} : tensor<f32>
    %T = kiln.wait %t : tensor<f32>
    %r = kiln.grad_norm %G {squared} : tensor<64x16xf32>
    %a = kiln.add %T, %r : tensor<f32>
    %n = kiln.sqrt %a : tensor<f32>
    ```
  }];
}

def KilnMixedPrecision : Pass<"kiln-mixed-precision", "mlir::ModuleOp"> {
  let summary = "Compute in the param dtype, reduce in the reduce dtype, update in f32";
  let description = [{
    FSDP2's MixedPrecisionPolicy as explicit casts, in every function with
    `kiln.param` arguments. The parameters stay f32 (master weights); each
    is cast once to the param dtype and every compute op (forward and
    backward) then runs in that dtype. What stays f32: scalars (loss,
    norms), attention's logsumexp, the optimizer. Each gradient is cast to
    the reduce dtype, then to f32 for the optimizer (casts to the type a
    value already has fold away). The ops that sum into a parameter's
    gradient run in the wider of the param and reduce dtypes: with bf16
    compute and an f32 reduce, `kiln.embedding_grad` reads its bf16 operand
    and produces the f32 gradient (its sums are f32 on every backend), and
    the adds that build a gradient from its contributions (a tied
    embedding's) add in f32, so no gradient is rounded to bf16 only to be
    cast back. Reads the module's `kiln.precision` dictionary (`param`,
    `reduce`: "bfloat16" or "float32"); with both "float32" nothing
    changes.

    ```mlir
    %y = kiln.linear w1 %x, %w param("w") : tensor<4x8xf32>, tensor<16x8xf32> -> tensor<4x16xf32>
    // becomes
    %wc = kiln.cast %w : tensor<16x8xf32> -> tensor<16x8xbf16>
    %xc = kiln.cast %x : tensor<4x8xf32> -> tensor<4x8xbf16>
    %y = kiln.linear w1 %xc, %wc param("w") : tensor<4x8xbf16>, tensor<16x8xbf16> -> tensor<4x16xbf16>
    ...
    %gw = kiln.linear_grad_weight w1 %dy, %xc param("w") : ... -> tensor<16x8xbf16>
    %gf = kiln.cast %gw : tensor<16x8xbf16> -> tensor<16x8xf32>
    %p, %m, %v = kiln.adamw %w, %gf, ...
    // and an embedding's gradient, f32 straight away:
    %de = kiln.embedding_grad %dh, %tok param("e") : tensor<2x4x8xbf16>, tensor<2x4xi32> -> tensor<16x8xf32>
    ```
  }];
}

def KilnFsdp : Pass<"kiln-fsdp", "mlir::ModuleOp"> {
  let summary = "Shard parameters, gradients and optimizer state over ranks (FSDP)";
  let description = [{
    Shards over the mesh's `dp_shard` axis: `ranks` is the module's
    `#kiln.mesh`'s `dp_shard` (the frontend's, from `[parallelism]` and the
    world size; one rank without a mesh), `reshard_after_forward` its
    `kiln.fsdp` dictionary's, unless the `ranks` option is set (then the
    module's mesh is set to that `dp_shard`). For `ranks` > 1, rewrites
    `@train_step` and `@forward_loss` (the IR of
    one rank: its share of the batch) so that each parameter group (the
    embedding, each transformer block `model.layers.<i>`, and `head`: the
    final norm with the output projection) lives as one flat f32 shard of
    `ceil(total / ranks)` elements per rank (the group's parameters packed
    in argument order, zero padding at the end), with its AdamW moments
    sharded alike:

    - before the group's first forward use: the shard cast to the param
      dtype, one `all_gather_start`/`wait`, one `unflatten` per parameter;
      with `reshard-after-forward` the backward gathers again before its
      first use (else it reuses the forward's copy);
    - the group's gradients packed with `flatten`, one
      `reduce_scatter_start {mean}`/`wait` to the rank's shard, in the
      reduce dtype (`kiln.precision`'s `reduce`; a bf16 shard is then cast
      to f32 for AdamW);
    - the gradient norm from each rank's `grad_norm {squared}` of its
      shards, an `all_reduce_start {sum}` and `sqrt`; one `adamw` per
      group on the shards; the loss output averaged over ranks.

    `@loss_and_grads` and `@forward_logits` (single-rank entries) are
    removed. Shard arguments carry `kiln.state = "<group>"` and
    `kiln.shard_of` (name, offset, shape and initialiser of every parameter
    in the flat buffer), so initialisation and checkpoints can stay in the
    unsharded layout.

    With the module's `#kiln.float8<..., enable_fsdp_float8_all_gather =
    true>`, each block's weights whose linears kiln-fp8-select marked
    `#kiln.fp8_choice<fp8, ...>` (in `@train_step`) go to a group of their
    own, `model.layers.<i>.fp8`, which kiln-fp8-all-gather gathers as e4m3
    codes; a linear with no mark is an error.

    With the mesh's `tp` > 1 (the IR of one tp position), each parameter
    without `kiln.tp_shard` (the norms) goes to a group of
    its own, `<group>.replicated`, and a part whose parameter has a
    `kiln.tp_shard` carries it in `kiln.shard_of` (`tp_shard`). AdamW must
    read kiln-tp-grad-sync's norm (TpNorm.h; else an error), whose split
    must agree with the groups; it becomes `buildTpSquares` of the rank's
    shards (the sharded groups' squares all-reduced over tp, plus the
    replicated groups'), all-reduced over `dp_shard`, then `sqrt`.

    ```mlir
    %c = kiln.cast %shard : tensor<4160xf32> -> tensor<4160xbf16>
    %s = kiln.all_gather_start %c {group = "model.layers.0", ranks = 2 : i64} : tensor<4160xbf16> -> tensor<8320xbf16>
    %full = kiln.wait %s : tensor<8320xbf16>
    %wq = kiln.unflatten %full[64] : tensor<8320xbf16> -> tensor<64x64xbf16>
    ...
    %flat = kiln.flatten %gn, %gq, ... [0, 64, ...] : ... -> tensor<8320xf32>
    %r = kiln.reduce_scatter_start %flat {group = "model.layers.0", ranks = 2 : i64, reduction = "mean"} : tensor<8320xf32> -> tensor<4160xf32>
    %g = kiln.wait %r : tensor<4160xf32>
    ```
  }];
  let options = [
    Option<"ranks", "ranks", "int64_t", "0",
           "Ranks of the mesh's dp_shard axis (0: the module's kiln.mesh)">,
    Option<"reshardAfterForward", "reshard-after-forward", "bool", "true",
           "Gather each group again for its backward (with ranks = 0: the "
           "module's kiln.fsdp)">,
  ];
}

def KilnActivationCheckpoint : Pass<"kiln-activation-checkpoint", "mlir::ModuleOp"> {
  let summary = "Recompute a block's activations in its backward instead of keeping them";
  let description = [{
    In every function with a backward (from its first `cross_entropy_grad`
    on), a value computed in the forward of transformer block `i` (an op
    named `model.layers.<i>.*`) and read by the backward of the same block
    is computed again just before its first backward reader, from the
    block's input and the saved values: a clone of its op marked
    `kiln.recomputed` (the mark also keeps CSE from merging it back). With
    `full` the block's input (the residual stream entering it) is all that
    is kept; with `selective` the GEMM and attention results are kept too
    and only the cheap ops (norms, rope, SwiGLU, residual adds, reshapes,
    casts) are recomputed; `none` changes nothing. `selective` has three
    policies (the `selective` option, or the module's `kiln.selective_ac`
    from `[activation_checkpoint] selective_ac_option`):
    - `gemm` (the default): every GEMM and attention result is kept;
    - `op`, TorchTitan's op policy: attention is kept, and of a block's
      GEMMs, counted by weight in forward order, the 1st, 3rd, 5th, ...
      (wq, wv, w1, w2 of a Llama block; wk, wo, w3 are recomputed);
    - a positive number N, TorchTitan's layer policy: blocks N-1, 2N-1, ...
      are recomputed as `full` does, the others not at all.
    The mode comes from the module's `kiln.activation_checkpoint`
    (`[activation_checkpoint] mode`) unless the `mode` option is set. A
    clone reads its own block's clones and another block's values as
    saved. Recomputed values are bit-identical to the forward's, so
    training is unchanged; the arena shrinks because the forward's values
    die at the end of the forward.

    ```mlir
    %n = kiln.rms_norm %h, %w {eps = 1.0e-05 : f64} : ...        // forward
    ...
    %dx, %dw = kiln.rms_norm_grad %g, %h, %w ...
    %dq = kiln.linear_grad_weight wq %gq, %n ...                  // reads %n
    // with selective or full: %n is recomputed before its backward reader
    %n2 = kiln.rms_norm %h, %w {eps = 1.0e-05 : f64, kiln.recomputed} : ...
    %dq = kiln.linear_grad_weight wq %gq, %n2 ...
    ```
  }];
  let options = [
    Option<"mode", "mode", "std::string", "\"\"",
           "none, selective or full (empty: the module's kiln.activation_checkpoint)">,
    Option<"selective", "selective", "std::string", "\"\"",
           "selective's policy: gemm, op or a number of blocks N (empty: "
           "the module's kiln.selective_ac, else gemm)">,
  ];
}

def KilnScheduleCollectives : Pass<"kiln-schedule-collectives", "mlir::func::FuncOp"> {
  let summary = "Order collectives for overlap: prefetch gathers, reduce-scatter early, wait late";
  let description = [{
    Moves the ops `kiln-fsdp` and `kiln-tp-partition` wrote so that
    communication overlaps compute:

    - each reduce-scatter of an input gradient (sequence parallel's dual of
      the gather before q/k/v, w1/w3 or the output projection) ahead of the
      weight gradients computed beside it since the previous collective on
      its axis: what follows the last value they share with it goes after
      it, so those GEMMs run while it does (Megatron's overlap);
    - each gradient buffer (its `flatten`, the casts feeding it, and its
      `reduce_scatter_start`) right after the last gradient it packs, so a
      block's reduce-scatter runs during the backward of the blocks before
      it;
    - each `kiln.wait` down to just before the first op that reads it, but
      a reduce-scatter's no later than where the next group's gradient
      buffer is packed (so at most two unsharded gradient buffers exist);
    - each group's `all_gather_start` (with the cast of its shard) up to
      just after the previous gather's `wait`: the next block's parameters
      arrive while the current block computes, and at most two gathered
      groups are alive at once;
    - then each `all_gather_start` ahead of the `reduce_scatter_start`s
      over its axis issued since the last GEMM, attention or embedding: an
      axis runs its collectives in issue order, and the gather is read
      first.

    ```mlir
    %g0 = kiln.all_gather_start %s0 ... ; %w0 = kiln.wait %g0
    ... block 0 ...
    %g1 = kiln.all_gather_start %s1 ... ; %w1 = kiln.wait %g1
    ... block 1 ...
    // becomes
    %g0 = kiln.all_gather_start %s0 ... ; %w0 = kiln.wait %g0
    %g1 = kiln.all_gather_start %s1 ...
    ... block 0 ...
    %w1 = kiln.wait %g1
    ... block 1 ...
    ```
  }];
}

def KilnLogitsEntry : Pass<"kiln-logits-entry", "mlir::ModuleOp"> {
  let summary = "Add @forward_logits: the forward without the loss, for sampling";
  let description = [{
    Clones `@forward_loss` into `@forward_logits`, which returns the input
    of the `kiln.cross_entropy` that computed the loss (the logits,
    `[batch, seq, vocab]`, tagged `kiln.output = "logits"`) and no longer
    takes the targets. The plan writes it as the entry `logits`; `kiln
    sample` runs it. A module without `@forward_loss` is left alone. Under
    tensor parallel the loss is the wait of an `all_reduce_start {mean}`
    over tp of the cross-entropy (kiln-tp-partition); the logits are then
    the gathered `[batch, seq, vocab]` every tp rank holds.

    ```mlir
    func.func @forward_loss(%tok: tensor<1x8xi32> {kiln.input = "tokens"},
                            %tgt: tensor<1x8xi32> {kiln.input = "targets"}, ...) -> tensor<f32> {
      ...
      %logits = kiln.linear output %h, %w param("lm_head.weight") : ...
      %loss = kiln.cross_entropy %logits, %tgt : ...
      return %loss : tensor<f32>
    }
    // adds
    func.func @forward_logits(%tok: tensor<1x8xi32> {kiln.input = "tokens"}, ...)
        -> (tensor<1x8x256xf32> {kiln.output = "logits"}) {
      ...
      %logits = kiln.linear output %h, %w param("lm_head.weight") : ...
      return %logits : tensor<1x8x256xf32>
    }
    ```
  }];
}

def KilnFuseElementwise : Pass<"kiln-fuse-elementwise", "mlir::func::FuncOp"> {
  let summary = "Group elementwise and row-wise ops into kiln.fused_group";
  let description = [{
    Walks each function in order and puts every fusible op (see
    `kiln.fused_group`) into the group of one of its operands' producers,
    or else of an earlier op that reads one of its operands (so the input
    is read once), when both have the same iteration space and no op outside the group
    reads the group's values before this op (so the group can run where its
    last op was, and every reader still comes after it). Otherwise the op
    starts a group of its own. Groups of two or more ops become
    `kiln.fused_group` ops at the position of their last op, yielding the
    values read after them; a group of one op stays as it is (the plan
    writes it as a one-op group). GEMMs, attention, rope, the loss and the
    optimizer are never fused.

    ```mlir
    %s = kiln.add %x, %dx : tensor<2x4x8xbf16>
    %n = kiln.rms_norm %s, %w {eps = 1.0e-05 : f64} : tensor<2x4x8xbf16>, tensor<8xbf16>
    %y = kiln.linear wq %n, %wq param("q") : ...
    // becomes
    %g:2 = kiln.fused_group(%x, %dx, %w) : (...) -> (tensor<2x4x8xbf16>, tensor<2x4x8xbf16>) {
    ^bb0(%a: tensor<2x4x8xbf16>, %b: tensor<2x4x8xbf16>, %c: tensor<8xbf16>):
      %0 = kiln.add %a, %b : tensor<2x4x8xbf16>
      %1 = kiln.rms_norm %0, %c {eps = 1.0e-05 : f64} : tensor<2x4x8xbf16>, tensor<8xbf16>
      kiln.yield %0, %1 : tensor<2x4x8xbf16>, tensor<2x4x8xbf16>
    }
    %y = kiln.linear wq %g#1, %wq param("q") : ...
    ```
  }];
}

def KilnFp8Select : Pass<"kiln-fp8-select", "mlir::ModuleOp"> {
  let summary = "Decide which linears run in FP8, and why";
  let description = [{
    Reads the module's FP8 policy (`kiln.float8 = #kiln.float8<...>`, set by
    the frontend when `[float8] enable = true`); without it the pass does
    nothing. Every `kiln.linear` of every function gets `fp8 =
    #kiln.fp8_choice<...>`, by these rules in order (the first that applies
    decides):

    1. the output projection (`role = output`) is `bf16, output_projection`
       unless `force_output_projection` (then, if nothing below excludes
       it, `fp8, forced_output_projection`, with a warning);
    2. M (tokens of the input), N or K not divisible by 16:
       `bf16, not_divisible_by_16` (FP8 tensor-core GEMMs need it);
    3. a `filter_fqns` pattern found in the parameter name:
       `bf16, filtered = "<pattern>"`;
    4. with `auto_filter_small_kn`, a GEMM too small to pay for its casts
       (torchao's H100 thresholds: tensorwise and delayed when N <= 4096 and
       K <= 1024; rowwise when K <= 2048, N <= 1024, or K <= 4096 and
       N <= 2048): `bf16, small_gemm`;
    5. otherwise `fp8`.

    It runs first in the shard phase: kiln-fsdp puts the FP8 weights in
    groups of their own for the FP8 all-gather, kiln-fp8-linear rewrites
    the `fp8` linears, and `kiln explain --fp8` prints the marks; none of
    them decides again. A module whose linears are all BF16 gets a warning
    listing each reason.

    ```mlir
    module attributes {kiln.float8 = #kiln.float8<recipe = tensorwise, auto_filter_small_kn = false>} {
      func.func @f(%x: tensor<128x64xbf16>, %wq: tensor<64x64xbf16>, %w1: tensor<200x64xbf16>, %e: tensor<256x64xbf16>) -> ... {
        %q = kiln.linear wq %x, %wq param("q") : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xbf16>
        %h = kiln.linear w1 %x, %w1 param("w1") : tensor<128x64xbf16>, tensor<200x64xbf16> -> tensor<128x200xbf16>
        %o = kiln.linear output %q, %e param("lm_head.weight") : tensor<128x64xbf16>, tensor<256x64xbf16> -> tensor<128x256xbf16>
        ...
    // becomes
        %q = kiln.linear wq %x, %wq param("q") {fp8 = #kiln.fp8_choice<fp8>} : ...
        %h = kiln.linear w1 %x, %w1 param("w1") {fp8 = #kiln.fp8_choice<bf16, not_divisible_by_16>} : ...
        %o = kiln.linear output %q, %e param("lm_head.weight") {fp8 = #kiln.fp8_choice<bf16, output_projection>} : ...
    ```
  }];
}

def KilnFp8Linear : Pass<"kiln-fp8-linear", "mlir::ModuleOp"> {
  let summary = "Rewrite eligible linears into FP8 scaled GEMMs (all three GEMMs)";
  let description = [{
    Reads the module's FP8 policy (`kiln.float8 = #kiln.float8<...>`, set
    by the frontend when `[float8] enable = true`); without it the pass does
    nothing. In every function, each `kiln.linear` that kiln-fp8-select
    marked `#kiln.fp8_choice<fp8, ...>` (a linear with no mark is an error),
    and the `kiln.linear_grad_input` / `kiln.linear_grad_weight` with its
    `param`, become `kiln.quantize` + `kiln.scaled_matmul`. The forward GEMM
    gets `fast_accumulation = true`, the two backward GEMMs `false`
    (torchao's choice: gradients accumulate with full fp32 promotion).

    - `tensorwise`: one `kiln.amax` per operand, e4m3 for activations and
      weights, e5m2 for the output gradient. The forward's codes and scales
      are what the backward reads: the weight's and the input's codes are
      transposed right after their quantization (the K-major operands of
      the grad-input and grad-weight GEMMs) and a recomputed linear
      (activation checkpointing) multiplies the forward's codes again. A
      weight is quantized from the copy each op reads, so a weight
      gathered again for the backward (FSDP resharding) is quantized again
      (the same bits) instead of keeping the forward's codes alive.
    - `delayed` (in `@train_step`; other functions as tensorwise): each
      cast's amax goes into a history argument (`kiln.state =
      "fp8_amax_history.<input|weight|grad_output>.<param>"`, length
      `amax_history_len`); the quantize reads `kiln.delayed_amax` of the
      history alone (`amax_compute_algo`); before the return, the current
      amaxes (all-reduced with `max` over ranks under FSDP) enter the
      histories with `kiln.amax_history_update`, returned as the same
      states. A copy of the step, `@fp8_calibration`, in which an empty
      history scales with the current amax and which returns only the
      histories (everything else removed), fills them before the first
      step.
    - `rowwise`: scales per row of each operand as the GEMM reads it,
      rounded down to powers of two, all e4m3; the backward transposes its
      bf16 operands and quantizes them again along the token axis.

    Operands are made 2-D ([tokens, features]) with `kiln.reshape`s that
    keep the last dimension, which fuse away. Linears marked `bf16` stay as
    they are.

    Under tensor parallel (the module's mesh has tp > 1) a tensorwise scale
    is the whole tensor's: the amax of every operand that is not the same
    on every tp rank (`isTpReplicated`, Fp8Tp.h: anything but an all-gather
    over tp's result) is all-reduced `max` over tp before its quantize, and
    the delayed histories are all-reduced over tp after dp_shard. Rowwise
    under tp is an error.

    ```mlir
    %a = kiln.amax %h : tensor<128x32xbf16> -> tensor<f32>  // o's input: the rank's heads
    %r = kiln.all_reduce_start %a over tp {ranks = 2 : i64, reduction = "max"} : tensor<f32>
    %m = kiln.wait %r : tensor<f32>
    %hq, %hs = kiln.quantize %h, %m : ...
    ```

    ```mlir
    %y = kiln.linear w1 %x, %w param("p") {fp8 = #kiln.fp8_choice<fp8>} : tensor<128x64xbf16>, tensor<192x64xbf16> -> tensor<128x192xbf16>
    // becomes (tensorwise)
    %ax = kiln.amax %x : tensor<128x64xbf16> -> tensor<f32>
    %xq, %xs = kiln.quantize %x, %ax : ... -> tensor<128x64xf8E4M3FN>, tensor<f32>
    %xqt = kiln.transpose %xq [1, 0] : ...                      // for grad_weight
    %aw = kiln.amax %w : ...
    %wq, %ws = kiln.quantize %w, %aw : ...
    %wqt = kiln.transpose %wq [1, 0] : ...                      // for grad_input
    %y = kiln.scaled_matmul "output" w1 %xq, %xs, %wq, %ws param("p") {fast_accumulation = true} : ... -> tensor<128x192xbf16>
    ```
  }];
}

def KilnFp8AllGather : Pass<"kiln-fp8-all-gather", "mlir::ModuleOp"> {
  let summary = "Gather FP8 weights as e4m3 codes cast on the shards";
  let description = [{
    With the module's `#kiln.float8<..., enable_fsdp_float8_all_gather =
    true>` (tensorwise only: the attribute's verifier holds that rule),
    after `kiln-fp8-linear` on one rank's FSDP step: a group whose every
    gathered parameter view is only quantized tensorwise to e4m3 (the
    `<block>.fp8` groups `kiln-fsdp` makes for this) is gathered as codes,
    one byte per element instead of two. At the function's start each such
    shard is cast to the param dtype and `kiln.shard_amax` takes each
    weight's amax over the rank's part; one `all_reduce_start {max}` over
    the vector of all of them gives every weight its amax, and
    `kiln.shard_quantize` casts the shard with each weight's scale. Every
    all-gather of the group (the backward's too, when resharding) then
    gathers the codes; each view's `amax` + `quantize` becomes an
    `unflatten` of the gathered codes and of the scales. The codes equal
    those the bf16 gather would have given after quantizing, bit for bit.
    Under tensor parallel a view's amax is all-reduced over tp by
    `kiln-fp8-linear` (the view is the rank's tp slice); the vector is then
    all-reduced over dp_shard and over tp.

    ```mlir
    // at the start of the function:
    %c = kiln.cast %shard : tensor<12352xf32> -> tensor<12352xbf16>
    %a = kiln.shard_amax %c {offsets = array<i64: 0, 4096, ...>, sizes = array<i64: 4096, 2048, ...>, ranks = 2 : i64} : tensor<12352xbf16> -> tensor<7xf32>
    %all = kiln.flatten %a, ... [0, ...] : ... -> tensor<14xf32>
    %r = kiln.all_reduce_start %all {ranks = 2 : i64, reduction = "max"} : tensor<14xf32>
    %max = kiln.wait %r : tensor<14xf32>
    %m = kiln.unflatten %max[0] : tensor<14xf32> -> tensor<7xf32>
    %codes, %scales = kiln.shard_quantize %c, %m {...} : tensor<12352xbf16>, tensor<7xf32> -> tensor<12352xf8E4M3FN>, tensor<7xf32>
    // where the group was gathered:
    %g = kiln.all_gather_start %codes {group = "model.layers.0.fp8", ranks = 2 : i64} : tensor<12352xf8E4M3FN> -> tensor<24704xf8E4M3FN>
    %full = kiln.wait %g : tensor<24704xf8E4M3FN>
    %wq = kiln.unflatten %full[0] : tensor<24704xf8E4M3FN> -> tensor<64x64xf8E4M3FN>
    %ws = kiln.unflatten %scales[0] : tensor<7xf32> -> tensor<f32>
    ```
  }];
}

def KilnFp8TpAllGather : Pass<"kiln-fp8-tp-all-gather", "mlir::ModuleOp"> {
  let summary = "Gather the sequence-parallel activations of FP8 linears as e4m3 codes";
  let description = [{
    With tensorwise FP8 under tensor parallel (tp > 1), after
    `kiln-fp8-linear`: an all-gather over tp whose gathered value (through
    its reshapes and transposes) is read only by one tensorwise e4m3
    quantize and its amax, the input of the column-parallel FP8 linears,
    gathers the codes instead. The rank's shard is quantized with its amax
    all-reduced `max` over tp (the gathered tensor's amax), so the codes
    and the scale are those of quantizing the gathered tensor, bit for
    bit, at half the bytes. A gather with any other reader stays bf16.

    ```mlir
    %g = kiln.all_gather_start %x over tp {group = "q", ranks = 2 : i64} : tensor<1024xbf16> -> tensor<2048xbf16>
    %w = kiln.wait %g : tensor<2048xbf16>
    %a = kiln.amax %w : tensor<2048xbf16> -> tensor<f32>
    %q, %s = kiln.quantize %w, %a : ...
    // becomes
    %a = kiln.amax %x : tensor<1024xbf16> -> tensor<f32>
    %r = kiln.all_reduce_start %a over tp {ranks = 2 : i64, reduction = "max"} : tensor<f32>
    %m = kiln.wait %r : tensor<f32>
    %xq, %s = kiln.quantize %x, %m : tensor<1024xbf16>, tensor<f32> -> tensor<1024xf8E4M3FN>, tensor<f32>
    %g = kiln.all_gather_start %xq over tp {group = "q", ranks = 2 : i64} : tensor<1024xf8E4M3FN> -> tensor<2048xf8E4M3FN>
    %q = kiln.wait %g : tensor<2048xf8E4M3FN>
    ```
  }];
}

def KilnAssignBuffers : Pass<"kiln-assign-buffers", "mlir::func::FuncOp"> {
  let summary = "Give every buffer an offset in the function's arena, from liveness";
  let description = [{
    Each result of a kiln op that is a buffer of its own lives from its op
    to its last reader; a collective's operands and result stay live until
    its `kiln.wait` (and the result until the wait result's last reader).
    Buffers are placed by BufferPlanner (largest first, long-lived first
    or a first fit, whichever needs the least), each size rounded up to 64
    bytes, so two buffers share bytes only when their live ranges are
    disjoint. A wait's result is its start's buffer; AdamW's and
    amax_history_update's results are the states they update in place:
    none of these gets an offset.

    Each op gets `kiln.arena_offsets` and `kiln.arena_sizes` (bytes, one
    entry per result); the function gets `kiln.arena_bytes` (the arena's
    size) and `kiln.live_at_peak` (the step where the most bytes are live,
    and how many of them are parameter copies, gradients and activations).
    The plan emitter writes these numbers as they are. A function with a
    loss gradient also gets `kiln.live_at_loss` (the bytes live at its
    step) and `kiln.live_in_backward` (the most bytes live from there to
    the step before the embedding's gradient): `kiln plan` extrapolates
    both with the layers, and they are not written to the plan. Runs last
    in the schedule phase: any later move of an op would make them stale.

    With `place=false` it only counts: the function gets `kiln.live_at_peak`
    (and the two above) but no offsets and no `kiln.arena_bytes`, so the
    module cannot be emitted until the pass runs again with placement.
    `kiln plan` compiles its probes so: what they need is at least the
    bytes live, and most of them do not fit by that count alone.

    ```mlir
    func.func @f(%x: tensor<64xf32> {kiln.input = "x"}) -> tensor<64xf32> {
      %a = kiln.silu %x : tensor<64xf32>
      %b = kiln.silu %a : tensor<64xf32>
      %c = kiln.silu %b : tensor<64xf32>
      return %c : tensor<64xf32>
    }
    // becomes (%c reuses %a's bytes: %a is dead once %b exists)
    func.func @f(...) -> tensor<64xf32> attributes {kiln.arena_bytes = 512 : i64,
        kiln.live_at_peak = {activations = 512 : i64, gradients = 0 : i64,
                             parameter_copies = 0 : i64, peak_step = 1 : i64}} {
      %a = kiln.silu %x {kiln.arena_offsets = array<i64: 0>, kiln.arena_sizes = array<i64: 256>} : tensor<64xf32>
      %b = kiln.silu %a {kiln.arena_offsets = array<i64: 256>, kiln.arena_sizes = array<i64: 256>} : tensor<64xf32>
      %c = kiln.silu %b {kiln.arena_offsets = array<i64: 0>, kiln.arena_sizes = array<i64: 256>} : tensor<64xf32>
      return %c : tensor<64xf32>
    }
    ```
  }];
  let options = [
    Option<"place", "place", "bool", "true",
           "Give the buffers offsets and the function its arena (false: "
           "count the bytes live only)">,
  ];
}

#endif // KILN_TRANSFORMS_PASSES_TD
