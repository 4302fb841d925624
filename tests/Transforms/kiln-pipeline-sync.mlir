// RUN: kiln-opt %s -split-input-file -kiln-pipeline-sync -verify-diagnostics | FileCheck %s

// Pipeline parallel (docs/pp.md, "Global quantities"): the step's loss is
// summed over pp (the last stage's plus the other ranks' 0), and the norm
// AdamW clips by takes every stage's squares: the rank's squares are
// summed over pp before the square root.
// CHECK-LABEL: func.func @train_step(
// CHECK: %[[SQ:.+]] = kiln.grad_norm %arg0 {squared} : tensor<8x8xf32>
// CHECK-NEXT: %[[SUM:.+]] = kiln.all_reduce_start %[[SQ]] over pp {ranks = 2 : i64, reduction = "sum"} : tensor<f32>
// CHECK-NEXT: %[[ALL:.+]] = kiln.wait %[[SUM]] : tensor<f32>
// CHECK-NEXT: %[[NORM:.+]] = kiln.sqrt %[[ALL]] : tensor<f32>
// CHECK: kiln.adamw %arg1, %arg0, %arg2, %arg3, %[[NORM]],
// CHECK: %[[LOSS:.+]] = kiln.all_reduce_start %arg4 over pp {ranks = 2 : i64, reduction = "sum"} : tensor<f32>
// CHECK-NEXT: %[[STEP:.+]] = kiln.wait %[[LOSS]] : tensor<f32>
// CHECK-NEXT: return %[[STEP]],
module attributes {kiln.mesh = #kiln.mesh<pp = 2, dp_shard = 1, tp = 1>} {
  func.func @train_step(%g: tensor<8x8xf32>, %w: tensor<8x8xf32>, %m: tensor<8x8xf32>, %v: tensor<8x8xf32>, %loss: tensor<f32>, %step: tensor<i64>) -> (tensor<f32>, tensor<8x8xf32>) {
    %lr = kiln.lr_schedule %step {decay = "cosine", min_lr = 0.000000e+00 : f64, peak = 8.000000e-04 : f64, total_steps = 1000 : i64, warmup_steps = 200 : i64}
    %norm = kiln.grad_norm %g : tensor<8x8xf32>
    %p, %pm, %pv = kiln.adamw %w, %g, %m, %v, %norm, %lr, %step {beta1 = 9.000000e-01 : f64, beta2 = 0.95 : f64, eps = 1.000000e-08 : f64, max_norm = 1.000000e+00 : f64, weight_decay = 1.000000e-01 : f64} : tensor<8x8xf32>
    return %loss, %p : tensor<f32>, tensor<8x8xf32>
  }
}

// -----

// A norm already of squares (FSDP's, tp's: TpNorm.h) keeps its sums and
// gains the one over pp before its square root.
// CHECK-LABEL: func.func @train_step(
// CHECK: %[[SQ:.+]] = kiln.grad_norm %arg0 {squared}
// CHECK-NEXT: %[[DP:.+]] = kiln.all_reduce_start %[[SQ]] over dp_shard
// CHECK-NEXT: %[[DPW:.+]] = kiln.wait %[[DP]]
// CHECK-NEXT: %[[PP:.+]] = kiln.all_reduce_start %[[DPW]] over pp {ranks = 2 : i64, reduction = "sum"}
// CHECK-NEXT: %[[PPW:.+]] = kiln.wait %[[PP]]
// CHECK-NEXT: kiln.sqrt %[[PPW]]
module attributes {kiln.mesh = #kiln.mesh<pp = 2, dp_shard = 2, tp = 1>} {
  func.func @train_step(%g: tensor<8x8xf32>, %w: tensor<8x8xf32>, %m: tensor<8x8xf32>, %v: tensor<8x8xf32>, %loss: tensor<f32>, %step: tensor<i64>) -> (tensor<f32>, tensor<8x8xf32>) {
    %lr = kiln.lr_schedule %step {decay = "cosine", min_lr = 0.000000e+00 : f64, peak = 8.000000e-04 : f64, total_steps = 1000 : i64, warmup_steps = 200 : i64}
    %sq = kiln.grad_norm %g {squared} : tensor<8x8xf32>
    %s = kiln.all_reduce_start %sq over dp_shard {ranks = 2 : i64, reduction = "sum"} : tensor<f32>
    %w2 = kiln.wait %s : tensor<f32>
    %norm = kiln.sqrt %w2 : tensor<f32>
    %p, %pm, %pv = kiln.adamw %w, %g, %m, %v, %norm, %lr, %step {beta1 = 9.000000e-01 : f64, beta2 = 0.95 : f64, eps = 1.000000e-08 : f64, max_norm = 1.000000e+00 : f64, weight_decay = 1.000000e-01 : f64} : tensor<8x8xf32>
    return %loss, %p : tensor<f32>, tensor<8x8xf32>
  }
}

// -----

// Without pipeline parallel the pass changes nothing.
// CHECK-LABEL: func.func @train_step(
// CHECK-NOT: over pp
// CHECK: return
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 1, tp = 1>} {
  func.func @train_step(%loss: tensor<f32>) -> tensor<f32> {
    return %loss : tensor<f32>
  }
}
