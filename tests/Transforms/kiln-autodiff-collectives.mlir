// RUN: kiln-opt %s -split-input-file -kiln-autodiff -verify-diagnostics | FileCheck %s

// Collectives in @forward_loss (tensor parallel, docs/tp.md "Autodiff of
// collectives") differentiate like any op, Megatron's convention; a start's
// gradient is a start + wait of the dual collective over the same axis.

// all_gather over tp <-> reduce_scatter (sum) over tp: each rank's gradient
// of the gathered value is a partial sum, the reduce-scatter adds them up
// and hands each rank its own chunk.
// CHECK-LABEL: func.func @loss_and_grads(
// CHECK-SAME: -> (tensor<f32>, tensor<8xf32> {kiln.grad = "w"})
// CHECK: %[[DL:.+]] = kiln.cross_entropy_grad
// CHECK: %[[DF:.+]] = kiln.reshape %[[DL]] : tensor<1x2x8xf32> -> tensor<16xf32>
// CHECK: %[[RS:.+]] = kiln.reduce_scatter_start %[[DF]] over tp {group = "g", ranks = 2 : i64, reduction = "sum"} : tensor<16xf32> -> tensor<8xf32>
// CHECK: %[[DW:.+]] = kiln.wait %[[RS]] : tensor<8xf32>
// CHECK: return %{{.+}}, %[[DW]] :
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 1, tp = 2>} {
func.func @forward_loss(%t: tensor<1x2xi32> {kiln.input = "targets"},
                        %w: tensor<8xf32> {kiln.param = "w", kiln.init = #kiln.init<ones>}) -> tensor<f32> {
  %s = kiln.all_gather_start %w over tp {group = "g", ranks = 2 : i64} : tensor<8xf32> -> tensor<16xf32>
  %g = kiln.wait %s : tensor<16xf32>
  %y = kiln.reshape %g : tensor<16xf32> -> tensor<1x2x8xf32>
  %l = kiln.cross_entropy %y, %t : tensor<1x2x8xf32>, tensor<1x2xi32> -> tensor<f32>
  return %l : tensor<f32>
}
}

// -----

// reduce_scatter (sum) over tp <-> all_gather over tp: each rank holds the
// whole gradient of its chunk, and every rank contributed to every chunk.
// With `mean`, the gathered gradient is divided by the axis's size.
// CHECK-LABEL: func.func @loss_and_grads(
// CHECK: %[[DL:.+]] = kiln.cross_entropy_grad
// CHECK: %[[DF:.+]] = kiln.reshape %[[DL]] : tensor<1x2x4xf32> -> tensor<8xf32>
// CHECK: %[[AG1:.+]] = kiln.all_gather_start %[[DF]] over tp {group = "mean", ranks = 4 : i64} : tensor<8xf32> -> tensor<32xf32>
// CHECK: %[[G1:.+]] = kiln.wait %[[AG1]] : tensor<32xf32>
// CHECK: %[[Q:.+]] = arith.constant dense<2.500000e-01> : tensor<32xf32>
// CHECK: %[[DM:.+]] = kiln.mul %[[G1]], %[[Q]] : tensor<32xf32>
// CHECK: %[[AG2:.+]] = kiln.all_gather_start %[[DF]] over tp {group = "sum", ranks = 4 : i64} : tensor<8xf32> -> tensor<32xf32>
// CHECK: %[[G2:.+]] = kiln.wait %[[AG2]] : tensor<32xf32>
// CHECK-NOT: kiln.mul
// CHECK: %[[DW:.+]] = kiln.add %[[DM]], %[[G2]] : tensor<32xf32>
// CHECK: return %{{.+}}, %[[DW]] :
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 1, tp = 4>} {
func.func @forward_loss(%t: tensor<1x2xi32> {kiln.input = "targets"},
                        %w: tensor<32xf32> {kiln.param = "w", kiln.init = #kiln.init<ones>}) -> tensor<f32> {
  %s1 = kiln.reduce_scatter_start %w over tp {group = "sum", ranks = 4 : i64, reduction = "sum"} : tensor<32xf32> -> tensor<8xf32>
  %r1 = kiln.wait %s1 : tensor<8xf32>
  %s2 = kiln.reduce_scatter_start %w over tp {group = "mean", ranks = 4 : i64, reduction = "mean"} : tensor<32xf32> -> tensor<8xf32>
  %r2 = kiln.wait %s2 : tensor<8xf32>
  %r = kiln.add %r1, %r2 : tensor<8xf32>
  %y = kiln.reshape %r : tensor<8xf32> -> tensor<1x2x4xf32>
  %l = kiln.cross_entropy %y, %t : tensor<1x2x4xf32>, tensor<1x2xi32> -> tensor<f32>
  return %l : tensor<f32>
}
}

// -----

// all_reduce (sum) <-> identity: what follows the all-reduce is repeated on
// every rank, so each rank's gradient of the sum is already the whole one;
// no collective in the backward.
// CHECK-LABEL: func.func @loss_and_grads(
// CHECK: kiln.all_reduce_start %{{.+}} over tp {ranks = 2 : i64, reduction = "sum"}
// CHECK: %[[DL:.+]] = kiln.cross_entropy_grad
// CHECK-NOT: kiln.all_reduce_start
// CHECK-NOT: kiln.all_gather_start
// CHECK-NOT: kiln.reduce_scatter_start
// CHECK: return %{{.+}}, %[[DL]] :
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 1, tp = 2>} {
func.func @forward_loss(%t: tensor<1x2xi32> {kiln.input = "targets"},
                        %w: tensor<1x2x8xf32> {kiln.param = "w", kiln.init = #kiln.init<ones>}) -> tensor<f32> {
  %s = kiln.all_reduce_start %w over tp {ranks = 2 : i64, reduction = "sum"} : tensor<1x2x8xf32>
  %y = kiln.wait %s : tensor<1x2x8xf32>
  %l = kiln.cross_entropy %y, %t : tensor<1x2x8xf32>, tensor<1x2xi32> -> tensor<f32>
  return %l : tensor<f32>
}
}

// -----

// all_reduce (mean) <-> division by the axis's size: the loss of the
// replicated cross-entropy under tensor parallel (kiln-tp-partition).
// CHECK-LABEL: func.func @loss_and_grads(
// CHECK: %[[ONE:.+]] = arith.constant dense<1.000000e+00> : tensor<f32>
// CHECK: %[[H:.+]] = arith.constant dense<5.000000e-01> : tensor<f32>
// CHECK: %[[DLOSS:.+]] = kiln.mul %[[ONE]], %[[H]] : tensor<f32>
// CHECK: %[[DL:.+]] = kiln.cross_entropy_grad %[[DLOSS]],
// CHECK: return %{{.+}}, %[[DL]] :
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 1, tp = 2>} {
func.func @forward_loss(%t: tensor<1x2xi32> {kiln.input = "targets"},
                        %w: tensor<1x2x8xf32> {kiln.param = "w", kiln.init = #kiln.init<ones>}) -> tensor<f32> {
  %c = kiln.cross_entropy %w, %t : tensor<1x2x8xf32>, tensor<1x2xi32> -> tensor<f32>
  %s = kiln.all_reduce_start %c over tp {ranks = 2 : i64, reduction = "mean"} : tensor<f32>
  %l = kiln.wait %s : tensor<f32>
  return %l : tensor<f32>
}
}

// -----

// all_reduce (max) <-> no gradient: the max is the softmax's shift, a
// constant of the loss. The weight's gradient is the direct path's alone.
// CHECK-LABEL: func.func @loss_and_grads(
// CHECK: %[[DL:.+]] = kiln.cross_entropy_grad
// CHECK-NOT: kiln.add
// CHECK-NOT: kiln.all_reduce_start
// CHECK: return %{{.+}}, %[[DL]] :
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 1, tp = 2>} {
func.func @forward_loss(%t: tensor<1x2xi32> {kiln.input = "targets"},
                        %w: tensor<1x2x8xf32> {kiln.param = "w", kiln.init = #kiln.init<ones>}) -> tensor<f32> {
  %s = kiln.all_reduce_start %w over tp {ranks = 2 : i64, reduction = "max"} : tensor<1x2x8xf32>
  %m = kiln.wait %s : tensor<1x2x8xf32>
  %y = kiln.add %w, %m : tensor<1x2x8xf32>
  %l = kiln.cross_entropy %y, %t : tensor<1x2x8xf32>, tensor<1x2xi32> -> tensor<f32>
  return %l : tensor<f32>
}
}

// -----

// flatten <-> unflatten of each part at its offset, unflatten <-> flatten
// into a zero buffer (kiln-tp-partition's loss places the rank's logits in
// a zero buffer with flatten).
// CHECK-LABEL: func.func @loss_and_grads(
// CHECK: %[[DL:.+]] = kiln.cross_entropy_grad
// CHECK: %[[DF:.+]] = kiln.reshape %[[DL]] : tensor<1x2x4xf32> -> tensor<8xf32>
// CHECK: %[[DB:.+]] = kiln.flatten %[[DF]] [4] : tensor<8xf32> -> tensor<16xf32>
// CHECK: %[[DW:.+]] = kiln.unflatten %[[DB]][2] : tensor<16xf32> -> tensor<1x2x3xf32>
// CHECK: return %{{.+}}, %[[DW]] :
func.func @forward_loss(%t: tensor<1x2xi32> {kiln.input = "targets"},
                        %w: tensor<1x2x3xf32> {kiln.param = "w", kiln.init = #kiln.init<ones>}) -> tensor<f32> {
  %f = kiln.flatten %w [2] : tensor<1x2x3xf32> -> tensor<16xf32>
  %u = kiln.unflatten %f[4] : tensor<16xf32> -> tensor<8xf32>
  %y = kiln.reshape %u : tensor<8xf32> -> tensor<1x2x4xf32>
  %l = kiln.cross_entropy %y, %t : tensor<1x2x4xf32>, tensor<1x2xi32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// send_recv (shift 1 over tp 4) <-> send_recv (shift 3): what a rank
// received came from one place back on the ring, so its gradient goes back
// there, three places along.
// CHECK-LABEL: func.func @loss_and_grads(
// CHECK: %[[DL:.+]] = kiln.cross_entropy_grad
// CHECK: %[[DF:.+]] = kiln.reshape %[[DL]] : tensor<1x2x4xf32> -> tensor<8xf32>
// CHECK: %[[SR:.+]] = kiln.send_recv_start %[[DF]] over tp {ranks = 4 : i64, shift = 3 : i64} : tensor<8xf32>
// CHECK: %[[DW:.+]] = kiln.wait %[[SR]] : tensor<8xf32>
// CHECK: return %{{.+}}, %[[DW]] :
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 1, tp = 4>} {
func.func @forward_loss(%t: tensor<1x2xi32> {kiln.input = "targets"},
                        %w: tensor<8xf32> {kiln.param = "w", kiln.init = #kiln.init<ones>}) -> tensor<f32> {
  %s = kiln.send_recv_start %w over tp {ranks = 4 : i64, shift = 1 : i64} : tensor<8xf32>
  %g = kiln.wait %s : tensor<8xf32>
  %y = kiln.reshape %g : tensor<8xf32> -> tensor<1x2x4xf32>
  %l = kiln.cross_entropy %y, %t : tensor<1x2x4xf32>, tensor<1x2xi32> -> tensor<f32>
  return %l : tensor<f32>
}
}

// -----

// Loss parallel (kiln-tp-partition with loss_parallel): the loss's rule
// gives the statistics' gradient (1/(N s), -1/N), the sum all-reduce's is
// the identity, the statistics' rule gives the slice's logits gradient
// (softmax - onehot on the slice, over N); the max, the shift, gets none:
// no gradient op reads the max's all-reduce, and no collective is added.
// CHECK-LABEL: func.func @loss_and_grads(
// CHECK-SAME: %[[T:[^:]+]]: tensor<1x2xf32> {kiln.input = "targets"}
// CHECK: %[[M:.+]] = kiln.wait %{{.+}} : tensor<1x2xf32>
// CHECK: %[[ST:.+]] = kiln.vocab_parallel_stats %[[Y:[^,]+]], %[[M]], %[[T]] {vocab_size = 15 : i64, vocab_start = 8 : i64}
// CHECK: %[[S:.+]] = kiln.wait %{{.+}} : tensor<1x2x2xf32>
// CHECK: kiln.vocab_parallel_loss %[[S]], %[[M]]
// CHECK: %[[DS:.+]] = kiln.vocab_parallel_loss_grad %{{.+}}, %[[S]] : tensor<1x2x2xf32>
// CHECK-NOT: _start
// CHECK: %[[DY:.+]] = kiln.vocab_parallel_stats_grad %[[DS]], %[[Y]], %[[M]], %[[T]] {vocab_size = 15 : i64, vocab_start = 8 : i64} : tensor<1x2x2xf32>, tensor<1x2x8xf32>, tensor<1x2xf32>, tensor<1x2xf32>
// CHECK: kiln.reshape %[[DY]] : tensor<1x2x8xf32> -> tensor<16xf32>
// CHECK-NOT: _start
// CHECK: return
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 1, tp = 2>} {
func.func @forward_loss(%t: tensor<1x2xf32> {kiln.input = "targets"},
                        %w: tensor<16xf32> {kiln.param = "w", kiln.init = #kiln.init<ones>}) -> tensor<f32> {
  %y = kiln.reshape %w : tensor<16xf32> -> tensor<1x2x8xf32>
  %m0 = kiln.vocab_parallel_max %y {vocab_start = 8 : i64, vocab_size = 15 : i64} : tensor<1x2x8xf32> -> tensor<1x2xf32>
  %ms = kiln.all_reduce_start %m0 over tp {ranks = 2 : i64, reduction = "max"} : tensor<1x2xf32>
  %m = kiln.wait %ms : tensor<1x2xf32>
  %s0 = kiln.vocab_parallel_stats %y, %m, %t {vocab_start = 8 : i64, vocab_size = 15 : i64} : tensor<1x2x8xf32>, tensor<1x2xf32>, tensor<1x2xf32> -> tensor<1x2x2xf32>
  %ss = kiln.all_reduce_start %s0 over tp {ranks = 2 : i64, reduction = "sum"} : tensor<1x2x2xf32>
  %s = kiln.wait %ss : tensor<1x2x2xf32>
  %l = kiln.vocab_parallel_loss %s, %m : tensor<1x2x2xf32>, tensor<1x2xf32>
  return %l : tensor<f32>
}
}
