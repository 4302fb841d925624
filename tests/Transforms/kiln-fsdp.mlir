// RUN: kiln-opt %s -split-input-file -kiln-fsdp=ranks=2 -verify-diagnostics | FileCheck %s
// RUN: kiln-opt %s -split-input-file -kiln-fsdp="ranks=2 reshard-after-forward=false" -verify-diagnostics | FileCheck %s --check-prefix=KEEP
// Without the option, the module's kiln.mesh decides (none: one rank, nothing).
// RUN: kiln-opt %s -split-input-file -kiln-fsdp -verify-diagnostics | FileCheck %s --check-prefix=ATTR

// One block's two parameters (4 + 16 = 20 elements) become one f32 shard of
// 10 per rank, with its two AdamW moments. The forward and (resharding
// after forward) the backward each gather the shard and take the weights
// out of it; the gradients are packed, reduce-scattered (mean) to the
// rank's shard, their norm summed over ranks; one AdamW updates the three
// shards; the loss is averaged over ranks.
// CHECK-LABEL: func.func @train_step(
// CHECK-SAME: %[[TOK:[^:]+]]: tensor<1x4xi32> {kiln.input = "tokens"}
// CHECK-SAME: %[[X:[^:]+]]: tensor<1x4x4xf32> {kiln.input = "x"}
// CHECK-SAME: %[[LR:[^:]+]]: tensor<f32> {kiln.input = "lr"}
// CHECK-SAME: %[[STEP:[^:]+]]: tensor<i64> {kiln.input = "step"}
// CHECK-SAME: %[[SHARD:[^:]+]]: tensor<10xf32> {kiln.shard_of = [{init = #kiln.init<ones>, name = "model.layers.0.norm.weight", offset = 0 : i64, shape = array<i64: 4>}, {init = #kiln.init<zeros>, name = "model.layers.0.q.weight", offset = 4 : i64, shape = array<i64: 4, 4>}], kiln.state = "model.layers.0"}
// CHECK-SAME: %[[M:[^:]+]]: tensor<10xf32> {kiln.shard_of = [{init = #kiln.init<zeros>, name = "exp_avg.model.layers.0.norm.weight", offset = 0 : i64, shape = array<i64: 4>}, {init = #kiln.init<zeros>, name = "exp_avg.model.layers.0.q.weight", offset = 4 : i64, shape = array<i64: 4, 4>}], kiln.state = "exp_avg.model.layers.0"}
// CHECK-SAME: %[[V:[^:]+]]: tensor<10xf32> {kiln.shard_of = [{{.*}}], kiln.state = "exp_avg_sq.model.layers.0"})
// CHECK-SAME: -> (tensor<f32> {kiln.output = "loss"}, tensor<10xf32> {kiln.state = "model.layers.0"}, tensor<10xf32> {kiln.state = "exp_avg.model.layers.0"}, tensor<10xf32> {kiln.state = "exp_avg_sq.model.layers.0"})
// CHECK-NEXT: %[[G:.+]] = kiln.all_gather_start %[[SHARD]] over dp_shard {group = "model.layers.0", ranks = 2 : i64} : tensor<10xf32> -> tensor<20xf32>
// CHECK-NEXT: %[[F:.+]] = kiln.wait %[[G]] : tensor<20xf32>
// CHECK-NEXT: %[[N:.+]] = kiln.unflatten %[[F]][0] : tensor<20xf32> -> tensor<4xf32>
// CHECK-NEXT: %[[Q:.+]] = kiln.unflatten %[[F]][4] : tensor<20xf32> -> tensor<4x4xf32>
// CHECK-NEXT: %[[H:.+]] = kiln.rms_norm %[[X]], %[[N]]
// CHECK-NEXT: %[[Y:.+]] = kiln.linear wq %[[H]], %[[Q]]
// CHECK-NEXT: %[[L:.+]] = kiln.cross_entropy %[[Y]], %[[TOK]]
// CHECK: %[[DY:.+]] = kiln.cross_entropy_grad %{{.+}}, %[[Y]], %[[TOK]]
// CHECK-NEXT: %[[DQ:.+]] = kiln.linear_grad_weight wq %[[DY]], %[[H]]
// CHECK-NEXT: %[[G2:.+]] = kiln.all_gather_start %[[SHARD]] over dp_shard {group = "model.layers.0", ranks = 2 : i64}
// CHECK-NEXT: %[[F2:.+]] = kiln.wait %[[G2]]
// CHECK-NEXT: %[[N2:.+]] = kiln.unflatten %[[F2]][0]
// CHECK-NEXT: %[[Q2:.+]] = kiln.unflatten %[[F2]][4]
// CHECK-NEXT: %[[DH:.+]] = kiln.linear_grad_input wq %[[DY]], %[[Q2]]
// CHECK-NEXT: %{{.+}}, %[[DN:.+]] = kiln.rms_norm_grad %[[DH]], %[[X]], %[[N2]]
// CHECK-NEXT: %[[FLAT:.+]] = kiln.flatten %[[DN]], %[[DQ]] [0, 4] : tensor<4xf32>, tensor<4x4xf32> -> tensor<20xf32>
// CHECK-NEXT: %[[R:.+]] = kiln.reduce_scatter_start %[[FLAT]] over dp_shard {group = "model.layers.0", ranks = 2 : i64, reduction = "mean"} : tensor<20xf32> -> tensor<10xf32>
// CHECK-NEXT: %[[GS:.+]] = kiln.wait %[[R]] : tensor<10xf32>
// CHECK-NEXT: %[[SQ:.+]] = kiln.grad_norm %[[GS]] {squared} : tensor<10xf32>
// CHECK-NEXT: %[[SUM:.+]] = kiln.all_reduce_start %[[SQ]] over dp_shard {ranks = 2 : i64, reduction = "sum"}
// CHECK-NEXT: %[[TOTAL:.+]] = kiln.wait %[[SUM]]
// CHECK-NEXT: %[[NORM:.+]] = kiln.sqrt %[[TOTAL]]
// CHECK-NEXT: %[[P:.+]], %[[PM:.+]], %[[PV:.+]] = kiln.adamw %[[SHARD]], %[[GS]], %[[M]], %[[V]], %[[NORM]], %[[LR]], %[[STEP]] {{.*}} : tensor<10xf32>
// CHECK-NEXT: %[[LS:.+]] = kiln.all_reduce_start %[[L]] over dp_shard {ranks = 2 : i64, reduction = "mean"}
// CHECK-NEXT: %[[LW:.+]] = kiln.wait %[[LS]]
// CHECK-NEXT: return %[[LW]], %[[P]], %[[PM]], %[[PV]]

// Not resharding after forward: the backward reads the forward's weights;
// the shard is gathered once.
// KEEP-LABEL: func.func @train_step(
// KEEP: %[[F:.+]] = kiln.wait
// KEEP-NEXT: %[[N:.+]] = kiln.unflatten %[[F]][0]
// KEEP-NEXT: %[[Q:.+]] = kiln.unflatten %[[F]][4]
// KEEP: %[[DY:.+]] = kiln.cross_entropy_grad
// KEEP-NOT: kiln.all_gather_start
// KEEP: kiln.linear_grad_input wq %[[DY]], %[[Q]]
// KEEP-NEXT: kiln.rms_norm_grad %{{.+}}, %{{.+}}, %[[N]]

// ATTR-LABEL: func.func @train_step(
// ATTR-NOT: kiln.all_gather_start
// ATTR-NOT: kiln.reduce_scatter_start
// ATTR: return
func.func @train_step(%tok: tensor<1x4xi32> {kiln.input = "tokens"},
                      %n: tensor<4xf32> {kiln.param = "model.layers.0.norm.weight", kiln.init = #kiln.init<ones>},
                      %q: tensor<4x4xf32> {kiln.param = "model.layers.0.q.weight", kiln.init = #kiln.init<zeros>},
                      %mn: tensor<4xf32> {kiln.state = "exp_avg.model.layers.0.norm.weight"},
                      %vn: tensor<4xf32> {kiln.state = "exp_avg_sq.model.layers.0.norm.weight"},
                      %mq: tensor<4x4xf32> {kiln.state = "exp_avg.model.layers.0.q.weight"},
                      %vq: tensor<4x4xf32> {kiln.state = "exp_avg_sq.model.layers.0.q.weight"},
                      %x: tensor<1x4x4xf32> {kiln.input = "x"},
                      %lr: tensor<f32> {kiln.input = "lr"},
                      %step: tensor<i64> {kiln.input = "step"})
    -> (tensor<f32> {kiln.output = "loss"},
        tensor<4xf32> {kiln.state = "model.layers.0.norm.weight"}, tensor<4x4xf32> {kiln.state = "model.layers.0.q.weight"},
        tensor<4xf32> {kiln.state = "exp_avg.model.layers.0.norm.weight"}, tensor<4x4xf32> {kiln.state = "exp_avg.model.layers.0.q.weight"},
        tensor<4xf32> {kiln.state = "exp_avg_sq.model.layers.0.norm.weight"}, tensor<4x4xf32> {kiln.state = "exp_avg_sq.model.layers.0.q.weight"}) {
  %h = kiln.rms_norm %x, %n {eps = 1.0e-05 : f64} : tensor<1x4x4xf32>, tensor<4xf32>
  %y = kiln.linear wq %h, %q param("model.layers.0.q.weight") : tensor<1x4x4xf32>, tensor<4x4xf32> -> tensor<1x4x4xf32>
  %l = kiln.cross_entropy %y, %tok : tensor<1x4x4xf32>, tensor<1x4xi32> -> tensor<f32>
  %one = arith.constant dense<1.0> : tensor<f32>
  %dy = kiln.cross_entropy_grad %one, %y, %tok : tensor<1x4x4xf32>, tensor<1x4xi32>
  %dq = kiln.linear_grad_weight wq %dy, %h param("model.layers.0.q.weight") : tensor<1x4x4xf32>, tensor<1x4x4xf32> -> tensor<4x4xf32>
  %dh = kiln.linear_grad_input wq %dy, %q param("model.layers.0.q.weight") : tensor<1x4x4xf32>, tensor<4x4xf32> -> tensor<1x4x4xf32>
  %dx, %dn = kiln.rms_norm_grad %dh, %x, %n {eps = 1.0e-05 : f64} : tensor<1x4x4xf32>, tensor<4xf32>
  %norm = kiln.grad_norm %dn, %dq : tensor<4xf32>, tensor<4x4xf32>
  %pn, %an, %sn = kiln.adamw %n, %dn, %mn, %vn, %norm, %lr, %step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, max_norm = 1.0 : f64, weight_decay = 0.1 : f64} : tensor<4xf32>
  %pq, %aq, %sq = kiln.adamw %q, %dq, %mq, %vq, %norm, %lr, %step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, max_norm = 1.0 : f64, weight_decay = 0.1 : f64} : tensor<4x4xf32>
  return %l, %pn, %pq, %an, %aq, %sn, %sq : tensor<f32>, tensor<4xf32>, tensor<4x4xf32>, tensor<4xf32>, tensor<4x4xf32>, tensor<4xf32>, tensor<4x4xf32>
}

// -----

// Evaluation: the embedding and the head are groups of their own (the
// head's 15 elements padded to 16: 8 per rank); bf16 compute gathers the
// shard cast to bf16. The module's kiln.mesh asks for 2 ranks.
// CHECK-LABEL: func.func @forward_loss(
// CHECK-SAME: %[[TOK:[^:]+]]: tensor<1x2xi32> {kiln.input = "tokens"}
// CHECK-SAME: %[[E:[^:]+]]: tensor<6xf32> {kiln.shard_of = [{{.*}}name = "model.embed_tokens.weight"{{.*}}], kiln.state = "model.embed_tokens"}
// CHECK-SAME: %[[O:[^:]+]]: tensor<8xf32> {kiln.shard_of = [{{.*}}name = "lm_head.weight"{{.*}}], kiln.state = "head"}
// CHECK-NEXT: %[[EC:.+]] = kiln.cast %[[E]] : tensor<6xf32> -> tensor<6xbf16>
// CHECK-NEXT: %[[EG:.+]] = kiln.all_gather_start %[[EC]] over dp_shard {group = "model.embed_tokens", ranks = 2 : i64} : tensor<6xbf16> -> tensor<12xbf16>
// CHECK-NEXT: %[[EF:.+]] = kiln.wait %[[EG]]
// CHECK-NEXT: %[[ET:.+]] = kiln.unflatten %[[EF]][0] : tensor<12xbf16> -> tensor<4x3xbf16>
// CHECK-NEXT: %[[H:.+]] = kiln.embedding %[[ET]][%[[TOK]]]
// CHECK-NEXT: %[[OC:.+]] = kiln.cast %[[O]] : tensor<8xf32> -> tensor<8xbf16>
// CHECK-NEXT: %[[OG:.+]] = kiln.all_gather_start %[[OC]] over dp_shard {group = "head", ranks = 2 : i64} : tensor<8xbf16> -> tensor<16xbf16>
// CHECK-NEXT: %[[OF:.+]] = kiln.wait %[[OG]]
// CHECK-NEXT: %[[OT:.+]] = kiln.unflatten %[[OF]][0] : tensor<16xbf16> -> tensor<5x3xbf16>
// CHECK-NEXT: kiln.linear output %[[H]], %[[OT]]
// CHECK: kiln.all_reduce_start %{{.+}} over dp_shard {ranks = 2 : i64, reduction = "mean"} : tensor<f32>

// ATTR-LABEL: func.func @forward_loss(
// ATTR: kiln.all_gather_start {{.*}}group = "model.embed_tokens"
// ATTR: kiln.all_gather_start {{.*}}group = "head"
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 2, tp = 1>, kiln.fsdp = {reshard_after_forward = true}} {
  func.func @forward_loss(%tok: tensor<1x2xi32> {kiln.input = "tokens"},
                          %e: tensor<4x3xf32> {kiln.param = "model.embed_tokens.weight", kiln.init = #kiln.init<ones>},
                          %o: tensor<5x3xf32> {kiln.param = "lm_head.weight", kiln.init = #kiln.init<zeros>},
                          %t: tensor<1x2xi32> {kiln.input = "targets"}) -> tensor<f32> {
    %ec = kiln.cast %e : tensor<4x3xf32> -> tensor<4x3xbf16>
    %h = kiln.embedding %ec[%tok] param("model.embed_tokens.weight") : tensor<4x3xbf16>, tensor<1x2xi32> -> tensor<1x2x3xbf16>
    %oc = kiln.cast %o : tensor<5x3xf32> -> tensor<5x3xbf16>
    %y = kiln.linear output %h, %oc param("lm_head.weight") : tensor<1x2x3xbf16>, tensor<5x3xbf16> -> tensor<1x2x5xbf16>
    %yf = kiln.cast %y : tensor<1x2x5xbf16> -> tensor<1x2x5xf32>
    %l = kiln.cross_entropy %yf, %t : tensor<1x2x5xf32>, tensor<1x2xi32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// A step where one parameter has an AdamW update and another has none.
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 2, tp = 1>, kiln.fsdp = {reshard_after_forward = true}} {
  // expected-error @+1 {{'func.func' op kiln-fsdp: some parameters have an AdamW update and some do not}}
  func.func @train_step(%a: tensor<4xf32> {kiln.param = "model.layers.0.a", kiln.init = #kiln.init<ones>},
                        %b: tensor<4xf32> {kiln.param = "model.layers.0.b", kiln.init = #kiln.init<ones>},
                        %m: tensor<4xf32> {kiln.state = "exp_avg.model.layers.0.a"},
                        %v: tensor<4xf32> {kiln.state = "exp_avg_sq.model.layers.0.a"},
                        %lr: tensor<f32> {kiln.input = "lr"}, %step: tensor<i64> {kiln.input = "step"})
      -> (tensor<f32> {kiln.output = "loss"}, tensor<4xf32> {kiln.state = "model.layers.0.a"}) {
    %norm = kiln.grad_norm %b : tensor<4xf32>
    %p, %pm, %pv = kiln.adamw %a, %b, %m, %v, %norm, %lr, %step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, max_norm = 1.0 : f64, weight_decay = 0.1 : f64} : tensor<4xf32>
    return %norm, %p : tensor<f32>, tensor<4xf32>
  }
}

// -----

// dp_shard x tp (the working case: kiln-fsdp-tp.mlir), where AdamW reads
// the optimizer's norm, not kiln-tp-grad-sync's: the tp sum of the sharded
// squares is missing.
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 2, tp = 2>} {
  // expected-error @+1 {{'func.func' op kiln-fsdp: with tp > 1 (2) AdamW must read kiln-tp-grad-sync's gradient norm (run it first)}}
  func.func @train_step(%a: tensor<4xf32> {kiln.param = "model.layers.0.a", kiln.init = #kiln.init<ones>,
                                           kiln.tp_shard = #kiln.tp_shard<dim = 0, index = 0>},
                        %g: tensor<4xf32>,
                        %m: tensor<4xf32> {kiln.state = "exp_avg.model.layers.0.a"},
                        %v: tensor<4xf32> {kiln.state = "exp_avg_sq.model.layers.0.a"},
                        %lr: tensor<f32> {kiln.input = "lr"}, %step: tensor<i64> {kiln.input = "step"})
      -> (tensor<f32> {kiln.output = "loss"}, tensor<4xf32> {kiln.state = "model.layers.0.a"}) {
    %norm = kiln.grad_norm %g : tensor<4xf32>
    %p, %pm, %pv = kiln.adamw %a, %g, %m, %v, %norm, %lr, %step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, max_norm = 1.0 : f64, weight_decay = 0.1 : f64} : tensor<4xf32>
    return %norm, %p : tensor<f32>, tensor<4xf32>
  }
}

// -----

// dp_shard x tp: a norm that sums the squares of a tp-replicated
// parameter's gradient ("b": no #kiln.tp_shard) over tp, as if it were
// sharded; kiln-fsdp would otherwise count it in the wrong group.
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 2, tp = 2>} {
  func.func @train_step(%a: tensor<4xf32> {kiln.param = "model.layers.0.a", kiln.init = #kiln.init<ones>,
                                           kiln.tp_shard = #kiln.tp_shard<dim = 0, index = 0>},
                        %b: tensor<4xf32> {kiln.param = "model.layers.0.b", kiln.init = #kiln.init<ones>},
                        %ga: tensor<4xf32>, %gb: tensor<4xf32>,
                        %ma: tensor<4xf32> {kiln.state = "exp_avg.model.layers.0.a"},
                        %va: tensor<4xf32> {kiln.state = "exp_avg_sq.model.layers.0.a"},
                        %mb: tensor<4xf32> {kiln.state = "exp_avg.model.layers.0.b"},
                        %vb: tensor<4xf32> {kiln.state = "exp_avg_sq.model.layers.0.b"},
                        %lr: tensor<f32> {kiln.input = "lr"}, %step: tensor<i64> {kiln.input = "step"})
      -> (tensor<f32> {kiln.output = "grad_norm"}, tensor<4xf32> {kiln.state = "model.layers.0.a"}, tensor<4xf32> {kiln.state = "model.layers.0.b"}) {
    %sq = kiln.grad_norm %ga, %gb {squared} : tensor<4xf32>, tensor<4xf32>
    %s = kiln.all_reduce_start %sq over tp {ranks = 2 : i64, reduction = "sum"} : tensor<f32>
    %w = kiln.wait %s : tensor<f32>
    %norm = kiln.sqrt %w : tensor<f32>
    %pa, %pma, %pva = kiln.adamw %a, %ga, %ma, %va, %norm, %lr, %step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, max_norm = 1.0 : f64, weight_decay = 0.1 : f64} : tensor<4xf32>
    // expected-error @+1 {{'kiln.adamw' op kiln-fsdp: the gradient norm does not count the gradient of 'model.layers.0.b' as tp-replicated, as its #kiln.tp_shard says}}
    %pb, %pmb, %pvb = kiln.adamw %b, %gb, %mb, %vb, %norm, %lr, %step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, max_norm = 1.0 : f64, weight_decay = 0.1 : f64} : tensor<4xf32>
    return %norm, %pa, %pb : tensor<f32>, tensor<4xf32>, tensor<4xf32>
  }
}
