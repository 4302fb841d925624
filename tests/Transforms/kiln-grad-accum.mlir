// RUN: kiln-opt %s -split-input-file -kiln-grad-accum -verify-diagnostics | FileCheck %s

// Two microbatches of one sequence (docs/pp.md, "Gradient accumulation").
// The step takes both rows of tokens and targets; each microbatch's rows
// are a reshape and an unflatten of them (offsets 0 and 4). The loss
// gradient's seed is divided by 2 once (it does not read the batch), so
// each microbatch's gradient is its share of the whole batch's. The
// forward and backward run once per microbatch, the second after the
// first's gradient; the gradients are summed as they come, the losses
// summed and divided by 2; the gradient norm, the learning rate and AdamW
// run once, on the sums.
// CHECK-LABEL: func.func @train_step(
// CHECK-SAME: %[[TOK:[^:]+]]: tensor<2x4xi32> {kiln.input = "tokens"}, %[[TGT:[^:]+]]: tensor<2x4xi32> {kiln.input = "targets"}
// CHECK: %[[LR:.+]] = kiln.lr_schedule
// CHECK: %[[ONE:.+]] = arith.constant dense<1.000000e+00> : tensor<f32>
// CHECK: %[[SEED:.+]] = kiln.divide %[[ONE]] by 2 : tensor<f32>
// CHECK: %[[TOKF:.+]] = kiln.reshape %[[TOK]] : tensor<2x4xi32> -> tensor<8xi32>
// CHECK: %[[TGTF:.+]] = kiln.reshape %[[TGT]] : tensor<2x4xi32> -> tensor<8xi32>
// CHECK: %[[T0:.+]] = kiln.unflatten %[[TOKF]][0] : tensor<8xi32> -> tensor<4xi32>
// CHECK: %[[TOK0:.+]] = kiln.reshape %[[T0]] : tensor<4xi32> -> tensor<1x4xi32>
// CHECK: kiln.unflatten %[[TGTF]][0] : tensor<8xi32> -> tensor<4xi32>
// CHECK: %[[X0:.+]] = kiln.embedding %{{.+}}[%[[TOK0]]]
// CHECK: %[[L0:.+]] = kiln.cross_entropy %[[X0]]
// CHECK: kiln.cross_entropy_grad %[[SEED]], %[[X0]]
// CHECK: %[[G0:.+]] = kiln.embedding_grad
// CHECK: kiln.unflatten %[[TOKF]][4] : tensor<8xi32> -> tensor<4xi32>
// CHECK: kiln.unflatten %[[TGTF]][4] : tensor<8xi32> -> tensor<4xi32>
// CHECK: %[[L1:.+]] = kiln.cross_entropy
// CHECK: kiln.cross_entropy_grad %[[SEED]]
// CHECK: %[[G1:.+]] = kiln.embedding_grad
// CHECK: %[[LS:.+]] = kiln.add %[[L0]], %[[L1]] : tensor<f32>
// CHECK: %[[GRAD:.+]] = kiln.add %[[G0]], %[[G1]] : tensor<8x8xf32>
// CHECK: %[[LOSS:.+]] = kiln.divide %[[LS]] by 2 : tensor<f32>
// CHECK-NOT: kiln.embedding
// CHECK: %[[NORM:.+]] = kiln.grad_norm %[[GRAD]]
// CHECK: kiln.adamw %{{.+}}, %[[GRAD]], %{{.+}}, %{{.+}}, %[[NORM]], %[[LR]]
// CHECK: return %[[LOSS]], %[[NORM]], %[[LR]]
module attributes {kiln.microbatches = 2 : i64} {
func.func @train_step(%tok: tensor<1x4xi32> {kiln.input = "tokens"}, %tgt: tensor<1x4xi32> {kiln.input = "targets"}, %w: tensor<8x8xf32> {kiln.param = "w"}, %m: tensor<8x8xf32> {kiln.state = "exp_avg.w"}, %v: tensor<8x8xf32> {kiln.state = "exp_avg_sq.w"}, %step: tensor<i64> {kiln.input = "step"}) -> (tensor<f32> {kiln.output = "loss"}, tensor<f32> {kiln.output = "grad_norm"}, tensor<f32> {kiln.output = "lr"}, tensor<8x8xf32> {kiln.state = "w"}, tensor<8x8xf32> {kiln.state = "exp_avg.w"}, tensor<8x8xf32> {kiln.state = "exp_avg_sq.w"}) {
  %lr = kiln.lr_schedule %step {decay = "cosine", min_lr = 0.000000e+00 : f64, peak = 8.000000e-04 : f64, total_steps = 1000 : i64, warmup_steps = 200 : i64}
  %x = kiln.embedding %w[%tok] param("w") : tensor<8x8xf32>, tensor<1x4xi32> -> tensor<1x4x8xf32>
  %loss = kiln.cross_entropy %x, %tgt : tensor<1x4x8xf32>, tensor<1x4xi32> -> tensor<f32>
  %one = arith.constant dense<1.000000e+00> : tensor<f32>
  %dx = kiln.cross_entropy_grad %one, %x, %tgt : tensor<1x4x8xf32>, tensor<1x4xi32>
  %g = kiln.embedding_grad %dx, %tok param("w") : tensor<1x4x8xf32>, tensor<1x4xi32> -> tensor<8x8xf32>
  %norm = kiln.grad_norm %g : tensor<8x8xf32>
  %p, %pm, %pv = kiln.adamw %w, %g, %m, %v, %norm, %lr, %step {beta1 = 9.000000e-01 : f64, beta2 = 0.95 : f64, eps = 1.000000e-08 : f64, max_norm = 1.000000e+00 : f64, weight_decay = 1.000000e-01 : f64} : tensor<8x8xf32>
  return %loss, %norm, %lr, %p, %pm, %pv : tensor<f32>, tensor<f32>, tensor<f32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>
}
}

// -----

// What does not depend on the batch runs once, before the first
// microbatch: here the weight's bf16 cast; without resharding, FSDP's
// parameter all-gather too (held across the microbatches).
// CHECK-LABEL: func.func @forward_loss(
// CHECK: kiln.all_gather_start %{{.+}} over dp_shard
// CHECK: kiln.wait
// CHECK: %[[W:.+]] = kiln.unflatten
// CHECK: %[[C:.+]] = kiln.cast %[[W]]
// CHECK-NOT: kiln.all_gather_start
// CHECK-NOT: kiln.cast
// CHECK: kiln.embedding %[[C]]
// CHECK: kiln.embedding %[[C]]
module attributes {kiln.microbatches = 2 : i64, kiln.mesh = #kiln.mesh<dp_shard = 2, tp = 1>, kiln.fsdp = {reshard_after_forward = false}} {
func.func @forward_loss(%tok: tensor<1x4xi32> {kiln.input = "tokens"}, %tgt: tensor<1x4xi32> {kiln.input = "targets"}, %shard: tensor<32xf32> {kiln.param = "w"}) -> tensor<f32> {
  %g = kiln.all_gather_start %shard over dp_shard {group = "w", ranks = 2 : i64} : tensor<32xf32> -> tensor<64xf32>
  %gw = kiln.wait %g : tensor<64xf32>
  %w = kiln.unflatten %gw[0] : tensor<64xf32> -> tensor<8x8xf32>
  %c = kiln.cast %w : tensor<8x8xf32> -> tensor<8x8xbf16>
  %x = kiln.embedding %c[%tok] param("w") : tensor<8x8xbf16>, tensor<1x4xi32> -> tensor<1x4x8xbf16>
  %loss = kiln.cross_entropy %x, %tgt : tensor<1x4x8xbf16>, tensor<1x4xi32> -> tensor<f32>
  return %loss : tensor<f32>
}
}

// -----

// With resharding (the default), the gather and what is computed from the
// gathered parameter run per microbatch; what only reads the shard would
// still run once.
// CHECK-LABEL: func.func @forward_loss(
// CHECK-COUNT-2: kiln.all_gather_start %{{.+}} over dp_shard
// CHECK-NOT: kiln.all_gather_start
module attributes {kiln.microbatches = 2 : i64, kiln.mesh = #kiln.mesh<dp_shard = 2, tp = 1>, kiln.fsdp = {reshard_after_forward = true}} {
func.func @forward_loss(%tok: tensor<1x4xi32> {kiln.input = "tokens"}, %tgt: tensor<1x4xi32> {kiln.input = "targets"}, %shard: tensor<32xf32> {kiln.param = "w"}) -> tensor<f32> {
  %g = kiln.all_gather_start %shard over dp_shard {group = "w", ranks = 2 : i64} : tensor<32xf32> -> tensor<64xf32>
  %gw = kiln.wait %g : tensor<64xf32>
  %w = kiln.unflatten %gw[0] : tensor<64xf32> -> tensor<8x8xf32>
  %c = kiln.cast %w : tensor<8x8xf32> -> tensor<8x8xbf16>
  %x = kiln.embedding %c[%tok] param("w") : tensor<8x8xbf16>, tensor<1x4xi32> -> tensor<1x4x8xbf16>
  %loss = kiln.cross_entropy %x, %tgt : tensor<1x4x8xbf16>, tensor<1x4xi32> -> tensor<f32>
  return %loss : tensor<f32>
}
}

// -----

// The delayed FP8 recipe: the step's amax of an activation is the largest
// of its microbatches' (kiln.maximum), and its history is updated once; a
// weight's amax does not read the batch, runs once and is not combined.
// CHECK-LABEL: func.func @fp8_calibration(
// CHECK: %[[WA:.+]] = kiln.amax %{{.+}} : tensor<8x8xf32> -> tensor<f32>
// CHECK: %[[A0:.+]] = kiln.amax %{{.+}} : tensor<1x4x8xf32> -> tensor<f32>
// CHECK: %[[A1:.+]] = kiln.amax %{{.+}} : tensor<1x4x8xf32> -> tensor<f32>
// CHECK: %[[A:.+]] = kiln.maximum %[[A0]], %[[A1]] : tensor<f32>
// CHECK: kiln.amax_history_update %{{.+}}, %[[A]]
// CHECK: kiln.amax_history_update %{{.+}}, %[[WA]]
module attributes {kiln.microbatches = 2 : i64} {
func.func @fp8_calibration(%tok: tensor<1x4xi32> {kiln.input = "tokens"}, %w: tensor<8x8xf32> {kiln.param = "w"}, %h: tensor<4xf32> {kiln.state = "amax_history.x"}, %hw: tensor<4xf32> {kiln.state = "amax_history.w"}) -> (tensor<4xf32>, tensor<4xf32>) {
  %wa = kiln.amax %w : tensor<8x8xf32> -> tensor<f32>
  %x = kiln.embedding %w[%tok] param("w") : tensor<8x8xf32>, tensor<1x4xi32> -> tensor<1x4x8xf32>
  %a = kiln.amax %x : tensor<1x4x8xf32> -> tensor<f32>
  %h2 = kiln.amax_history_update %h, %a : tensor<4xf32>
  %hw2 = kiln.amax_history_update %hw, %wa : tensor<4xf32>
  return %h2, %hw2 : tensor<4xf32>, tensor<4xf32>
}
}

// -----

// The logits entry: each microbatch's logits, put back in row order.
// CHECK-LABEL: func.func @forward_logits(
// CHECK-SAME: tensor<2x4xi32> {kiln.input = "tokens"}
// CHECK-SAME: -> tensor<2x4x8xf32>
// CHECK: %[[A:.+]] = kiln.embedding
// CHECK: %[[B:.+]] = kiln.embedding
// CHECK: %[[FA:.+]] = kiln.reshape %[[A]] : tensor<1x4x8xf32> -> tensor<32xf32>
// CHECK: %[[FB:.+]] = kiln.reshape %[[B]] : tensor<1x4x8xf32> -> tensor<32xf32>
// CHECK: %[[ALL:.+]] = kiln.flatten %[[FA]], %[[FB]] [0, 32] : tensor<32xf32>, tensor<32xf32> -> tensor<64xf32>
// CHECK: %[[OUT:.+]] = kiln.reshape %[[ALL]] : tensor<64xf32> -> tensor<2x4x8xf32>
// CHECK: return %[[OUT]]
module attributes {kiln.microbatches = 2 : i64} {
func.func @forward_logits(%tok: tensor<1x4xi32> {kiln.input = "tokens"}, %w: tensor<8x8xf32> {kiln.param = "w"}) -> tensor<1x4x8xf32> {
  %x = kiln.embedding %w[%tok] param("w") : tensor<8x8xf32>, tensor<1x4xi32> -> tensor<1x4x8xf32>
  return %x : tensor<1x4x8xf32>
}
}

// -----

// Without kiln.microbatches (or with 1), nothing changes.
// CHECK-LABEL: func.func @forward_loss(
// CHECK-SAME: tensor<1x4xi32>
// CHECK-NOT: kiln.unflatten
module attributes {kiln.microbatches = 1 : i64} {
func.func @forward_loss(%tok: tensor<1x4xi32> {kiln.input = "tokens"}, %tgt: tensor<1x4xi32> {kiln.input = "targets"}, %w: tensor<8x8xf32> {kiln.param = "w"}) -> tensor<f32> {
  %x = kiln.embedding %w[%tok] param("w") : tensor<8x8xf32>, tensor<1x4xi32> -> tensor<1x4x8xf32>
  %loss = kiln.cross_entropy %x, %tgt : tensor<1x4x8xf32>, tensor<1x4xi32> -> tensor<f32>
  return %loss : tensor<f32>
}
}

// -----

// An entry whose other results read one microbatch's values cannot be
// combined: an error, not a silently wrong step.
module attributes {kiln.microbatches = 2 : i64} {
// expected-error @+1 {{reads the batch, and kiln-grad-accum does not know how to combine its microbatches' results}}
func.func @other(%tok: tensor<1x4xi32> {kiln.input = "tokens"}, %w: tensor<8x8xf32> {kiln.param = "w"}) -> tensor<1x4x8xf32> {
  %x = kiln.embedding %w[%tok] param("w") : tensor<8x8xf32>, tensor<1x4xi32> -> tensor<1x4x8xf32>
  return %x : tensor<1x4x8xf32>
}
}

// -----

// A step result that is neither the loss nor a gradient AdamW reads (here
// the embedding's output) is a value of one microbatch: an error.
module attributes {kiln.microbatches = 2 : i64} {
func.func @train_step(%tok: tensor<1x4xi32> {kiln.input = "tokens"}, %tgt: tensor<1x4xi32> {kiln.input = "targets"}, %w: tensor<8x8xf32> {kiln.param = "w"}) -> (tensor<f32> {kiln.output = "loss"}, tensor<1x4x8xf32>) {
  %x = kiln.embedding %w[%tok] param("w") : tensor<8x8xf32>, tensor<1x4xi32> -> tensor<1x4x8xf32>
  %loss = kiln.cross_entropy %x, %tgt : tensor<1x4x8xf32>, tensor<1x4xi32> -> tensor<f32>
  // expected-error @+1 {{reads a value of one microbatch (kiln.embedding), which kiln-grad-accum cannot combine}}
  return %loss, %x : tensor<f32>, tensor<1x4x8xf32>
}
}

// -----

// Pipeline parallel (docs/pp.md): a middle stage reads no batch rows; its
// receives bring each microbatch's activation and gradient, its sends are
// results. Both microbatches' clones are marked for kiln-pipeline-schedule;
// the weight's gradient is summed.
// CHECK-LABEL: func.func @loss_and_grads(
// CHECK: %[[H0:.+]] = kiln.pipe_recv activation {kiln.microbatch = 0 : i64, stage = 1 : i64, stages = 3 : i64}
// CHECK: kiln.pipe_send %{{.+}} activation {kiln.microbatch = 0 : i64, stage = 1 : i64, stages = 3 : i64}
// CHECK: kiln.pipe_recv gradient {kiln.microbatch = 0 : i64,
// CHECK: %[[G0:.+]] = kiln.mul %{{.+}}, %[[H0]] {kiln.microbatch = 0 : i64}
// CHECK: %[[H1:.+]] = kiln.pipe_recv activation {kiln.microbatch = 1 : i64,
// CHECK: kiln.pipe_send %{{.+}} activation {kiln.microbatch = 1 : i64,
// CHECK: %[[G1:.+]] = kiln.mul %{{.+}}, %[[H1]] {kiln.microbatch = 1 : i64}
// CHECK: %[[SUM:.+]] = kiln.add %[[G0]], %[[G1]] : tensor<4xf32>
// CHECK: return %{{.+}}, %[[SUM]]
module attributes {kiln.mesh = #kiln.mesh<pp = 3, dp_shard = 1, tp = 1>, kiln.microbatches = 2 : i64} {
  func.func @loss_and_grads(%tok: tensor<1x4xi32> {kiln.input = "tokens"}, %w: tensor<4xf32> {kiln.param = "w"}) -> (tensor<f32>, tensor<4xf32> {kiln.grad = "w"}) {
    %zero = arith.constant dense<0.000000e+00> : tensor<f32>
    %h = kiln.pipe_recv activation {stage = 1 : i64, stages = 3 : i64} : tensor<4xf32>
    %a = kiln.mul %h, %w : tensor<4xf32>
    kiln.pipe_send %a activation {stage = 1 : i64, stages = 3 : i64} : tensor<4xf32>
    %g = kiln.pipe_recv gradient {stage = 1 : i64, stages = 3 : i64} : tensor<4xf32>
    %dw = kiln.mul %g, %h : tensor<4xf32>
    return %zero, %dw : tensor<f32>, tensor<4xf32>
  }
}
