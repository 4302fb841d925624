// RUN: kiln-opt %s -kiln-tp-grad-sync -kiln-fsdp | FileCheck %s

// FSDP on top of tensor parallel, mesh dp_shard = 2 x tp = 2: the IR of one
// tp position (index 1), as kiln-optimizer leaves it, through
// kiln-tp-grad-sync and kiln-fsdp. The block's norm weight (no
// #kiln.tp_shard: tp-replicated, 4 elements) goes to a group of its own,
// `model.layers.0.replicated` (2 per rank), apart from the tp-sharded q
// weight, group `model.layers.0` (8 elements, 4 per rank); the sharded
// parts and their moments carry the parameter's #kiln.tp_shard.
// CHECK-LABEL: func.func @train_step(
// CHECK-SAME: %[[TOK:[^:]+]]: tensor<1x4xi32> {kiln.input = "tokens"}
// CHECK-SAME: %[[X:[^:]+]]: tensor<1x4x4xf32> {kiln.input = "x"}
// CHECK-SAME: %[[LR:[^:]+]]: tensor<f32> {kiln.input = "lr"}
// CHECK-SAME: %[[STEP:[^:]+]]: tensor<i64> {kiln.input = "step"}
// CHECK-SAME: %[[RS:[^:]+]]: tensor<2xf32> {kiln.shard_of = [{init = #kiln.init<ones>, name = "model.layers.0.norm.weight", offset = 0 : i64, shape = array<i64: 4>}], kiln.state = "model.layers.0.replicated"}
// CHECK-SAME: %[[RM:[^:]+]]: tensor<2xf32> {kiln.shard_of = [{init = #kiln.init<zeros>, name = "exp_avg.model.layers.0.norm.weight", offset = 0 : i64, shape = array<i64: 4>}], kiln.state = "exp_avg.model.layers.0.replicated"}
// CHECK-SAME: %[[RV:[^:]+]]: tensor<2xf32> {kiln.shard_of = [{init = #kiln.init<zeros>, name = "exp_avg_sq.model.layers.0.norm.weight", offset = 0 : i64, shape = array<i64: 4>}], kiln.state = "exp_avg_sq.model.layers.0.replicated"}
// CHECK-SAME: %[[SS:[^:]+]]: tensor<4xf32> {kiln.shard_of = [{init = #kiln.init<zeros>, name = "model.layers.0.q.weight", offset = 0 : i64, shape = array<i64: 2, 4>, tp_shard = #kiln.tp_shard<dim = 0, index = 1>}], kiln.state = "model.layers.0"}
// CHECK-SAME: %[[SM:[^:]+]]: tensor<4xf32> {kiln.shard_of = [{init = #kiln.init<zeros>, name = "exp_avg.model.layers.0.q.weight", offset = 0 : i64, shape = array<i64: 2, 4>, tp_shard = #kiln.tp_shard<dim = 0, index = 1>}], kiln.state = "exp_avg.model.layers.0"}
// CHECK-SAME: %[[SV:[^:]+]]: tensor<4xf32> {kiln.shard_of = [{init = #kiln.init<zeros>, name = "exp_avg_sq.model.layers.0.q.weight", offset = 0 : i64, shape = array<i64: 2, 4>, tp_shard = #kiln.tp_shard<dim = 0, index = 1>}], kiln.state = "exp_avg_sq.model.layers.0"})
// CHECK-SAME: -> (tensor<f32> {kiln.output = "loss"}, tensor<f32> {kiln.output = "grad_norm"}, tensor<2xf32> {kiln.state = "model.layers.0.replicated"}, tensor<2xf32> {kiln.state = "exp_avg.model.layers.0.replicated"}, tensor<2xf32> {kiln.state = "exp_avg_sq.model.layers.0.replicated"}, tensor<4xf32> {kiln.state = "model.layers.0"}, tensor<4xf32> {kiln.state = "exp_avg.model.layers.0"}, tensor<4xf32> {kiln.state = "exp_avg_sq.model.layers.0"})
//
// Each group is gathered over dp_shard alone, before its first use.
// CHECK-NEXT: %[[GR:.+]] = kiln.all_gather_start %[[RS]] over dp_shard {group = "model.layers.0.replicated", ranks = 2 : i64} : tensor<2xf32> -> tensor<4xf32>
// CHECK-NEXT: %[[FR:.+]] = kiln.wait %[[GR]]
// CHECK-NEXT: %[[N:.+]] = kiln.unflatten %[[FR]][0] : tensor<4xf32> -> tensor<4xf32>
// CHECK-NEXT: %[[H:.+]] = kiln.rms_norm %[[X]], %[[N]]
// CHECK-NEXT: %[[GS:.+]] = kiln.all_gather_start %[[SS]] over dp_shard {group = "model.layers.0", ranks = 2 : i64} : tensor<4xf32> -> tensor<8xf32>
// CHECK-NEXT: %[[FS:.+]] = kiln.wait %[[GS]]
// CHECK-NEXT: %[[Q:.+]] = kiln.unflatten %[[FS]][0] : tensor<8xf32> -> tensor<2x4xf32>
// CHECK-NEXT: kiln.linear wq %[[H]], %[[Q]]
//
// The backward: the replicated gradient is summed over tp
// (kiln-tp-grad-sync) and then, like the sharded one, reduce-scattered
// (mean) over dp_shard to the rank's shard of its group.
// CHECK: %[[DQ:.+]] = kiln.linear_grad_weight wq
// CHECK: %{{.+}}, %[[DN:.+]] = kiln.rms_norm_grad
// CHECK-NEXT: %[[TS:.+]] = kiln.all_reduce_start %[[DN]] over tp {ranks = 2 : i64, reduction = "sum"} : tensor<4xf32>
// CHECK-NEXT: %[[DNS:.+]] = kiln.wait %[[TS]]
// CHECK-NEXT: %[[FLATR:.+]] = kiln.flatten %[[DNS]] [0] : tensor<4xf32> -> tensor<4xf32>
// CHECK-NEXT: %[[RSR:.+]] = kiln.reduce_scatter_start %[[FLATR]] over dp_shard {group = "model.layers.0.replicated", ranks = 2 : i64, reduction = "mean"} : tensor<4xf32> -> tensor<2xf32>
// CHECK-NEXT: %[[GRR:.+]] = kiln.wait %[[RSR]]
// CHECK-NEXT: %[[FLATS:.+]] = kiln.flatten %[[DQ]] [0] : tensor<2x4xf32> -> tensor<8xf32>
// CHECK-NEXT: %[[RSS:.+]] = kiln.reduce_scatter_start %[[FLATS]] over dp_shard {group = "model.layers.0", ranks = 2 : i64, reduction = "mean"} : tensor<8xf32> -> tensor<4xf32>
// CHECK-NEXT: %[[GRS:.+]] = kiln.wait %[[RSS]]
//
// The norm: the sharded group's squares summed over tp, plus the
// replicated group's (the same at both tp positions: counted once), summed
// over dp_shard, then the root. Nothing of the unsharded norm is left.
// CHECK-NEXT: %[[SQS:.+]] = kiln.grad_norm %[[GRS]] {squared} : tensor<4xf32>
// CHECK-NEXT: %[[SUMTP:.+]] = kiln.all_reduce_start %[[SQS]] over tp {ranks = 2 : i64, reduction = "sum"} : tensor<f32>
// CHECK-NEXT: %[[TP:.+]] = kiln.wait %[[SUMTP]]
// CHECK-NEXT: %[[SQR:.+]] = kiln.grad_norm %[[GRR]] {squared} : tensor<2xf32>
// CHECK-NEXT: %[[LOCAL:.+]] = kiln.add %[[TP]], %[[SQR]] : tensor<f32>
// CHECK-NEXT: %[[SUMDP:.+]] = kiln.all_reduce_start %[[LOCAL]] over dp_shard {ranks = 2 : i64, reduction = "sum"} : tensor<f32>
// CHECK-NEXT: %[[TOTAL:.+]] = kiln.wait %[[SUMDP]]
// CHECK-NEXT: %[[NORM:.+]] = kiln.sqrt %[[TOTAL]]
// CHECK-NEXT: %[[PR:.+]], %[[PRM:.+]], %[[PRV:.+]] = kiln.adamw %[[RS]], %[[GRR]], %[[RM]], %[[RV]], %[[NORM]], %[[LR]], %[[STEP]] {{.*}} : tensor<2xf32>
// CHECK-NEXT: %[[PS:.+]], %[[PSM:.+]], %[[PSV:.+]] = kiln.adamw %[[SS]], %[[GRS]], %[[SM]], %[[SV]], %[[NORM]], %[[LR]], %[[STEP]] {{.*}} : tensor<4xf32>
// CHECK-NEXT: %[[LS:.+]] = kiln.all_reduce_start %{{.+}} over dp_shard {ranks = 2 : i64, reduction = "mean"} : tensor<f32>
// CHECK-NEXT: %[[LW:.+]] = kiln.wait %[[LS]]
// CHECK-NEXT: return %[[LW]], %[[NORM]], %[[PR]], %[[PRM]], %[[PRV]], %[[PS]], %[[PSM]], %[[PSV]]
// CHECK-NOT: kiln.grad_norm

// Evaluation has the same groups (they hold the same state).
// CHECK-LABEL: func.func @forward_loss(
// CHECK-SAME: %[[ERS:[^:]+]]: tensor<2xf32> {kiln.shard_of = [{init = #kiln.init<ones>, name = "model.layers.0.norm.weight", offset = 0 : i64, shape = array<i64: 4>}], kiln.state = "model.layers.0.replicated"}
// CHECK-SAME: %[[ESS:[^:]+]]: tensor<4xf32> {kiln.shard_of = [{init = #kiln.init<zeros>, name = "model.layers.0.q.weight", offset = 0 : i64, shape = array<i64: 2, 4>, tp_shard = #kiln.tp_shard<dim = 0, index = 1>}], kiln.state = "model.layers.0"})
// CHECK-NEXT: kiln.all_gather_start %[[ERS]] over dp_shard {group = "model.layers.0.replicated", ranks = 2 : i64}
// CHECK: kiln.all_gather_start %[[ESS]] over dp_shard {group = "model.layers.0", ranks = 2 : i64}
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 2, tp = 2>, kiln.fsdp = {reshard_after_forward = true}} {
func.func @train_step(%tok: tensor<1x4xi32> {kiln.input = "tokens"},
                      %n: tensor<4xf32> {kiln.param = "model.layers.0.norm.weight", kiln.init = #kiln.init<ones>},
                      %q: tensor<2x4xf32> {kiln.param = "model.layers.0.q.weight", kiln.init = #kiln.init<zeros>,
                                           kiln.tp_shard = #kiln.tp_shard<dim = 0, index = 1>},
                      %mn: tensor<4xf32> {kiln.state = "exp_avg.model.layers.0.norm.weight"},
                      %vn: tensor<4xf32> {kiln.state = "exp_avg_sq.model.layers.0.norm.weight"},
                      %mq: tensor<2x4xf32> {kiln.state = "exp_avg.model.layers.0.q.weight"},
                      %vq: tensor<2x4xf32> {kiln.state = "exp_avg_sq.model.layers.0.q.weight"},
                      %x: tensor<1x4x4xf32> {kiln.input = "x"},
                      %lr: tensor<f32> {kiln.input = "lr"},
                      %step: tensor<i64> {kiln.input = "step"})
    -> (tensor<f32> {kiln.output = "loss"}, tensor<f32> {kiln.output = "grad_norm"},
        tensor<4xf32> {kiln.state = "model.layers.0.norm.weight"}, tensor<2x4xf32> {kiln.state = "model.layers.0.q.weight"},
        tensor<4xf32> {kiln.state = "exp_avg.model.layers.0.norm.weight"}, tensor<2x4xf32> {kiln.state = "exp_avg.model.layers.0.q.weight"},
        tensor<4xf32> {kiln.state = "exp_avg_sq.model.layers.0.norm.weight"}, tensor<2x4xf32> {kiln.state = "exp_avg_sq.model.layers.0.q.weight"}) {
  %h = kiln.rms_norm %x, %n {eps = 1.0e-05 : f64} : tensor<1x4x4xf32>, tensor<4xf32>
  %y = kiln.linear wq %h, %q param("model.layers.0.q.weight") : tensor<1x4x4xf32>, tensor<2x4xf32> -> tensor<1x4x2xf32>
  %l = kiln.cross_entropy %y, %tok : tensor<1x4x2xf32>, tensor<1x4xi32> -> tensor<f32>
  %one = arith.constant dense<1.0> : tensor<f32>
  %dy = kiln.cross_entropy_grad %one, %y, %tok : tensor<1x4x2xf32>, tensor<1x4xi32>
  %dq = kiln.linear_grad_weight wq %dy, %h param("model.layers.0.q.weight") : tensor<1x4x2xf32>, tensor<1x4x4xf32> -> tensor<2x4xf32>
  %dh = kiln.linear_grad_input wq %dy, %q param("model.layers.0.q.weight") : tensor<1x4x2xf32>, tensor<2x4xf32> -> tensor<1x4x4xf32>
  %dx, %dn = kiln.rms_norm_grad %dh, %x, %n {eps = 1.0e-05 : f64} : tensor<1x4x4xf32>, tensor<4xf32>
  %norm = kiln.grad_norm %dn, %dq : tensor<4xf32>, tensor<2x4xf32>
  %pn, %an, %sn = kiln.adamw %n, %dn, %mn, %vn, %norm, %lr, %step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, max_norm = 1.0 : f64, weight_decay = 0.1 : f64} : tensor<4xf32>
  %pq, %aq, %sq = kiln.adamw %q, %dq, %mq, %vq, %norm, %lr, %step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, max_norm = 1.0 : f64, weight_decay = 0.1 : f64} : tensor<2x4xf32>
  return %l, %norm, %pn, %pq, %an, %aq, %sn, %sq : tensor<f32>, tensor<f32>, tensor<4xf32>, tensor<2x4xf32>, tensor<4xf32>, tensor<2x4xf32>, tensor<4xf32>, tensor<2x4xf32>
}
func.func @forward_loss(%tok: tensor<1x4xi32> {kiln.input = "tokens"},
                        %n: tensor<4xf32> {kiln.param = "model.layers.0.norm.weight", kiln.init = #kiln.init<ones>},
                        %q: tensor<2x4xf32> {kiln.param = "model.layers.0.q.weight", kiln.init = #kiln.init<zeros>,
                                             kiln.tp_shard = #kiln.tp_shard<dim = 0, index = 1>},
                        %x: tensor<1x4x4xf32> {kiln.input = "x"}) -> tensor<f32> {
  %h = kiln.rms_norm %x, %n {eps = 1.0e-05 : f64} : tensor<1x4x4xf32>, tensor<4xf32>
  %y = kiln.linear wq %h, %q param("model.layers.0.q.weight") : tensor<1x4x4xf32>, tensor<2x4xf32> -> tensor<1x4x2xf32>
  %l = kiln.cross_entropy %y, %tok : tensor<1x4x2xf32>, tensor<1x4xi32> -> tensor<f32>
  return %l : tensor<f32>
}
}
