// RUN: kiln-opt %s -split-input-file -kiln-tp-grad-sync -verify-diagnostics | FileCheck %s

// tp = 2: "e" is tp-replicated (no kiln.tp_shard, as a norm is),
// "w" tp-sharded. In @loss_and_grads the replicated gradient is summed
// over tp right after it is complete (the add), and the kiln.grad result
// returns the sum; the sharded gradient is returned as it is.
// CHECK-LABEL: func.func @loss_and_grads(
// CHECK-SAME: %[[GA:[^:]+]]: tensor<8x4xf32>, %[[GB:[^:]+]]: tensor<8x4xf32>, %[[GW:[^:]+]]: tensor<2x4xf32>, %[[L:[^:]+]]: tensor<f32>)
// CHECK-NEXT: %[[GE:.+]] = kiln.add %[[GA]], %[[GB]] : tensor<8x4xf32>
// CHECK-NEXT: %[[S:.+]] = kiln.all_reduce_start %[[GE]] over tp {ranks = 2 : i64, reduction = "sum"} : tensor<8x4xf32>
// CHECK-NEXT: %[[SUM:.+]] = kiln.wait %[[S]] : tensor<8x4xf32>
// CHECK-NEXT: return %[[L]], %[[SUM]], %[[GW]]
//
// In @train_step the replicated gradient (here an argument: summed at the
// top) feeds AdamW and the norm summed; the norm is the root of the
// sharded gradients' squares summed over tp plus the replicated ones'
// squares, counted once.
// CHECK-LABEL: func.func @train_step(
// CHECK-SAME: %[[E:[^:]+]]: tensor<8x4xf32> {{{[^}]*}}kiln.param = "e"}
// CHECK-SAME: %[[W:[^:]+]]: tensor<2x4xf32> {{{[^}]*}}kiln.param = "w", kiln.tp_shard = #kiln.tp_shard<dim = 0, index = 1>}
// CHECK-SAME: %[[TGE:[^:]+]]: tensor<8x4xf32>, %[[TGW:[^:]+]]: tensor<2x4xf32>
// CHECK-NEXT: %[[TS:.+]] = kiln.all_reduce_start %[[TGE]] over tp {ranks = 2 : i64, reduction = "sum"} : tensor<8x4xf32>
// CHECK-NEXT: %[[TSUM:.+]] = kiln.wait %[[TS]] : tensor<8x4xf32>
// CHECK-NEXT: %[[SQW:.+]] = kiln.grad_norm %[[TGW]] {squared} : tensor<2x4xf32>
// CHECK-NEXT: %[[RS:.+]] = kiln.all_reduce_start %[[SQW]] over tp {ranks = 2 : i64, reduction = "sum"} : tensor<f32>
// CHECK-NEXT: %[[RSUM:.+]] = kiln.wait %[[RS]] : tensor<f32>
// CHECK-NEXT: %[[SQE:.+]] = kiln.grad_norm %[[TSUM]] {squared} : tensor<8x4xf32>
// CHECK-NEXT: %[[TOT:.+]] = kiln.add %[[RSUM]], %[[SQE]] : tensor<f32>
// CHECK-NEXT: %[[NORM:.+]] = kiln.sqrt %[[TOT]] : tensor<f32>
// CHECK-NEXT: kiln.adamw %[[E]], %[[TSUM]], %{{[^,]+}}, %{{[^,]+}}, %[[NORM]],
// CHECK-NEXT: kiln.adamw %[[W]], %[[TGW]], %{{[^,]+}}, %{{[^,]+}}, %[[NORM]],
// CHECK-NEXT: return %{{[^,]+}}, %[[NORM]],
// CHECK-NOT: all_reduce_start
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 1, tp = 2>} {
  func.func @loss_and_grads(%e: tensor<8x4xf32> {kiln.param = "e", kiln.init = #kiln.init<ones>},
                            %w: tensor<2x4xf32> {kiln.param = "w", kiln.init = #kiln.init<ones>,
                                                 kiln.tp_shard = #kiln.tp_shard<dim = 0, index = 1>},
                            %ga: tensor<8x4xf32>, %gb: tensor<8x4xf32>, %gw: tensor<2x4xf32>, %l: tensor<f32>)
      -> (tensor<f32>, tensor<8x4xf32> {kiln.grad = "e"}, tensor<2x4xf32> {kiln.grad = "w"}) {
    %ge = kiln.add %ga, %gb : tensor<8x4xf32>
    return %l, %ge, %gw : tensor<f32>, tensor<8x4xf32>, tensor<2x4xf32>
  }
  func.func @train_step(%e: tensor<8x4xf32> {kiln.param = "e", kiln.init = #kiln.init<ones>},
                        %w: tensor<2x4xf32> {kiln.param = "w", kiln.init = #kiln.init<ones>,
                                             kiln.tp_shard = #kiln.tp_shard<dim = 0, index = 1>},
                        %ge: tensor<8x4xf32>, %gw: tensor<2x4xf32>, %l: tensor<f32>,
                        %me: tensor<8x4xf32>, %ve: tensor<8x4xf32>, %mw: tensor<2x4xf32>, %vw: tensor<2x4xf32>,
                        %lr: tensor<f32>, %step: tensor<i64>)
      -> (tensor<f32>, tensor<f32>, tensor<8x4xf32>, tensor<2x4xf32>) {
    %norm = kiln.grad_norm %ge, %gw : tensor<8x4xf32>, tensor<2x4xf32>
    %pe, %ae, %se = kiln.adamw %e, %ge, %me, %ve, %norm, %lr, %step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, max_norm = 1.0 : f64, weight_decay = 0.1 : f64} : tensor<8x4xf32>
    %pw, %aw, %sw = kiln.adamw %w, %gw, %mw, %vw, %norm, %lr, %step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, max_norm = 1.0 : f64, weight_decay = 0.1 : f64} : tensor<2x4xf32>
    return %l, %norm, %pe, %pw : tensor<f32>, tensor<f32>, tensor<8x4xf32>, tensor<2x4xf32>
  }
}

// -----

// tp = 1 (and no mesh): nothing changes.
// CHECK-LABEL: func.func @loss_and_grads(
// CHECK-NEXT: %[[GE:.+]] = kiln.add
// CHECK-NEXT: return %{{[^,]+}}, %[[GE]]
// CHECK-LABEL: func.func @train_step(
// CHECK-NEXT: kiln.grad_norm %{{[^,]+}}, %{{[^ ]+}} : tensor<8x4xf32>, tensor<2x4xf32>
// CHECK-NOT: all_reduce_start
// CHECK-NOT: kiln.sqrt
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 2, tp = 1>} {
  func.func @loss_and_grads(%e: tensor<8x4xf32> {kiln.param = "e", kiln.init = #kiln.init<ones>},
                            %w: tensor<2x4xf32> {kiln.param = "w", kiln.init = #kiln.init<ones>},
                            %ga: tensor<8x4xf32>, %gb: tensor<8x4xf32>, %gw: tensor<2x4xf32>, %l: tensor<f32>)
      -> (tensor<f32>, tensor<8x4xf32> {kiln.grad = "e"}, tensor<2x4xf32> {kiln.grad = "w"}) {
    %ge = kiln.add %ga, %gb : tensor<8x4xf32>
    return %l, %ge, %gw : tensor<f32>, tensor<8x4xf32>, tensor<2x4xf32>
  }
  func.func @train_step(%ge: tensor<8x4xf32>, %gw: tensor<2x4xf32>) -> tensor<f32> {
    %norm = kiln.grad_norm %ge, %gw : tensor<8x4xf32>, tensor<2x4xf32>
    return %norm : tensor<f32>
  }
}

// -----

// A replicated parameter whose gradient is not returned.
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 1, tp = 2>} {
  // expected-error @+1 {{kiln-tp-grad-sync: no gradient for the tp-replicated parameter 'n'}}
  func.func @loss_and_grads(%n: tensor<4xf32> {kiln.param = "n", kiln.init = #kiln.init<ones>}, %l: tensor<f32>)
      -> tensor<f32> {
    return %l : tensor<f32>
  }
}

// -----

// expected-error @+1 {{kiln-tp-grad-sync needs @loss_and_grads or @train_step (run kiln-autodiff first)}}
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 1, tp = 2>} {
}
