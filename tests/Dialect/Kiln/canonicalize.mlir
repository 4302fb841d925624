// RUN: kiln-opt %s -split-input-file -canonicalize | FileCheck %s

// CHECK-LABEL: func.func @reshape_noop(
// CHECK-SAME: %[[A:[^:]+]]: tensor<
// CHECK-NOT: kiln.reshape
// CHECK: return %[[A]] :
func.func @reshape_noop(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = kiln.reshape %a : tensor<4x8xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// CHECK-LABEL: func.func @reshape_chain(
// CHECK-SAME: %[[A:[^:]+]]: tensor<4x8xf32>
// CHECK-NEXT: %[[R:.+]] = kiln.reshape %[[A]] : tensor<4x8xf32> -> tensor<2x16xf32>
// CHECK-NEXT: return %[[R]]
func.func @reshape_chain(%a: tensor<4x8xf32>) -> tensor<2x16xf32> {
  %0 = kiln.reshape %a : tensor<4x8xf32> -> tensor<32xf32>
  %1 = kiln.reshape %0 : tensor<32xf32> -> tensor<2x16xf32>
  return %1 : tensor<2x16xf32>
}

// -----

// A reshape there and back disappears.
// CHECK-LABEL: func.func @reshape_round_trip(
// CHECK-SAME: %[[A:[^:]+]]: tensor<
// CHECK-NOT: kiln.reshape
// CHECK: return %[[A]] :
func.func @reshape_round_trip(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = kiln.reshape %a : tensor<4x8xf32> -> tensor<32xf32>
  %1 = kiln.reshape %0 : tensor<32xf32> -> tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}

// -----

// CHECK-LABEL: func.func @transpose_identity
// CHECK-NOT: kiln.transpose
func.func @transpose_identity(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = kiln.transpose %a [0, 1] : tensor<4x8xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// Two transposes compose into one: [1, 2, 0] then [2, 0, 1] is [0, 1, 2],
// which folds away; [1, 0, 2] then [0, 2, 1] is [1, 2, 0].
// CHECK-LABEL: func.func @transpose_inverse(
// CHECK-SAME: %[[A:[^:]+]]: tensor<
// CHECK-NOT: kiln.transpose
// CHECK: return %[[A]] :
func.func @transpose_inverse(%a: tensor<2x3x4xf32>) -> tensor<2x3x4xf32> {
  %0 = kiln.transpose %a [1, 2, 0] : tensor<2x3x4xf32> -> tensor<3x4x2xf32>
  %1 = kiln.transpose %0 [2, 0, 1] : tensor<3x4x2xf32> -> tensor<2x3x4xf32>
  return %1 : tensor<2x3x4xf32>
}

// CHECK-LABEL: func.func @transpose_compose(
// CHECK-SAME: %[[A:[^:]+]]: tensor<
// CHECK-NEXT: %[[T:.+]] = kiln.transpose %[[A]] [1, 2, 0] : tensor<2x3x4xf32> -> tensor<3x4x2xf32>
// CHECK-NEXT: return %[[T]]
func.func @transpose_compose(%a: tensor<2x3x4xf32>) -> tensor<3x4x2xf32> {
  %0 = kiln.transpose %a [1, 0, 2] : tensor<2x3x4xf32> -> tensor<3x2x4xf32>
  %1 = kiln.transpose %0 [0, 2, 1] : tensor<3x2x4xf32> -> tensor<3x4x2xf32>
  return %1 : tensor<3x4x2xf32>
}

// -----

// Pure ops whose results are unused are removed.
// CHECK-LABEL: func.func @dead_ops
// CHECK-NOT: kiln.
func.func @dead_ops(%a: tensor<4x8xf32>) {
  %0 = kiln.silu %a : tensor<4x8xf32>
  %1 = kiln.add %0, %a : tensor<4x8xf32>
  return
}
