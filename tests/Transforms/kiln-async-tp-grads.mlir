// RUN: kiln-opt %s -split-input-file -kiln-async-tp-grads | FileCheck %s

// Two chunk linears of one weight (kiln.async_chunk 1 and 0, as rank 1 of
// tp 2 computes them): their weight gradients, summed by autodiff, become
// one linear_grad_weight over the whole sequence, chunk 0's rows first
// (plain TP's GEMM); the marks are gone.
// CHECK-LABEL: func.func @chunks(
// CHECK-SAME: %[[X1:[^:]+]]: tensor<1x2x4xf32>, %[[X0:[^:]+]]: tensor<1x2x4xf32>, %[[D1:[^:]+]]: tensor<1x2x6xf32>, %[[D0:[^:]+]]: tensor<1x2x6xf32>
// CHECK-NOT: async_chunk
// CHECK: %[[T0:.+]] = kiln.transpose %[[D0]] [1, 0, 2] : tensor<1x2x6xf32> -> tensor<2x1x6xf32>
// CHECK: %[[F0:.+]] = kiln.reshape %[[T0]] : tensor<2x1x6xf32> -> tensor<12xf32>
// CHECK: %[[T1:.+]] = kiln.transpose %[[D1]] [1, 0, 2]
// CHECK: %[[F1:.+]] = kiln.reshape %[[T1]]
// CHECK: %[[DF:.+]] = kiln.flatten %[[F0]], %[[F1]] [0, 12] : tensor<12xf32>, tensor<12xf32> -> tensor<24xf32>
// CHECK: %[[DR:.+]] = kiln.reshape %[[DF]] : tensor<24xf32> -> tensor<4x1x6xf32>
// CHECK: %[[DY:.+]] = kiln.transpose %[[DR]] [1, 0, 2] : tensor<4x1x6xf32> -> tensor<1x4x6xf32>
// CHECK: kiln.flatten %{{.+}}, %{{.+}} [0, 8] : tensor<8xf32>, tensor<8xf32> -> tensor<16xf32>
// CHECK: %[[X:.+]] = kiln.transpose %{{.+}} [1, 0, 2] : tensor<4x1x4xf32> -> tensor<1x4x4xf32>
// CHECK: %[[GW:.+]] = kiln.linear_grad_weight wq %[[DY]], %[[X]] param("q") : tensor<1x4x6xf32>, tensor<1x4x4xf32> -> tensor<6x4xf32>
// CHECK-NOT: kiln.add
// CHECK: return %{{.+}}, %{{.+}}, %[[GW]]
func.func @chunks(%x1: tensor<1x2x4xf32>, %x0: tensor<1x2x4xf32>, %d1: tensor<1x2x6xf32>, %d0: tensor<1x2x6xf32>, %w: tensor<6x4xf32>) -> (tensor<1x2x6xf32>, tensor<1x2x6xf32>, tensor<6x4xf32>) {
  %y1 = kiln.linear wq %x1, %w param("q") {kiln.async_chunk = 1 : i64} : tensor<1x2x4xf32>, tensor<6x4xf32> -> tensor<1x2x6xf32>
  %y0 = kiln.linear wq %x0, %w param("q") {kiln.async_chunk = 0 : i64} : tensor<1x2x4xf32>, tensor<6x4xf32> -> tensor<1x2x6xf32>
  %g0 = kiln.linear_grad_weight wq %d0, %x0 param("q") : tensor<1x2x6xf32>, tensor<1x2x4xf32> -> tensor<6x4xf32>
  %g1 = kiln.linear_grad_weight wq %d1, %x1 param("q") : tensor<1x2x6xf32>, tensor<1x2x4xf32> -> tensor<6x4xf32>
  %g = kiln.add %g0, %g1 : tensor<6x4xf32>
  return %y1, %y0, %g : tensor<1x2x6xf32>, tensor<1x2x6xf32>, tensor<6x4xf32>
}

// -----

// A chunk gradient summed with anything else is left as autodiff wrote it
// (only the marks go).
// CHECK-LABEL: func.func @other(
// CHECK-NOT: async_chunk
// CHECK: %[[G0:.+]] = kiln.linear_grad_weight wq
// CHECK: %[[G1:.+]] = kiln.linear_grad_weight wq
// CHECK: %[[S:.+]] = kiln.add %[[G0]], %[[G1]]
// CHECK: kiln.add %[[S]], %{{.+}}
func.func @other(%x1: tensor<1x2x4xf32>, %x0: tensor<1x2x4xf32>, %d1: tensor<1x2x6xf32>, %d0: tensor<1x2x6xf32>, %w: tensor<6x4xf32>, %e: tensor<6x4xf32>) -> (tensor<1x2x6xf32>, tensor<1x2x6xf32>, tensor<6x4xf32>) {
  %y1 = kiln.linear wq %x1, %w param("q") {kiln.async_chunk = 1 : i64} : tensor<1x2x4xf32>, tensor<6x4xf32> -> tensor<1x2x6xf32>
  %y0 = kiln.linear wq %x0, %w param("q") {kiln.async_chunk = 0 : i64} : tensor<1x2x4xf32>, tensor<6x4xf32> -> tensor<1x2x6xf32>
  %g0 = kiln.linear_grad_weight wq %d0, %x0 param("q") : tensor<1x2x6xf32>, tensor<1x2x4xf32> -> tensor<6x4xf32>
  %g1 = kiln.linear_grad_weight wq %d1, %x1 param("q") : tensor<1x2x6xf32>, tensor<1x2x4xf32> -> tensor<6x4xf32>
  %g = kiln.add %g0, %g1 : tensor<6x4xf32>
  %h = kiln.add %g, %e : tensor<6x4xf32>
  return %y1, %y0, %h : tensor<1x2x6xf32>, tensor<1x2x6xf32>, tensor<6x4xf32>
}
