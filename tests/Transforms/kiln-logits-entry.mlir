// RUN: kiln-opt %s -split-input-file -kiln-logits-entry -verify-diagnostics | FileCheck %s

// @forward_logits: the forward up to the loss's input, without the targets.
// CHECK-LABEL: func.func @forward_loss(
// CHECK: kiln.cross_entropy
// CHECK-LABEL: func.func @forward_logits(
// CHECK-SAME: %[[X:.+]]: tensor<2x4x8xf32> {kiln.input = "x"}, %[[W:.+]]: tensor<16x8xf32> {kiln.init = #kiln.init<ones>, kiln.param = "w"}) -> (tensor<2x4x16xf32> {kiln.output = "logits"})
// CHECK-NEXT: %[[Y:.+]] = kiln.linear output %[[X]], %[[W]] param("w")
// CHECK-NEXT: return %[[Y]] : tensor<2x4x16xf32>
func.func @forward_loss(%x: tensor<2x4x8xf32> {kiln.input = "x"}, %t: tensor<2x4xi32> {kiln.input = "targets"},
                        %w: tensor<16x8xf32> {kiln.param = "w", kiln.init = #kiln.init<ones>}) -> tensor<f32> {
  %y = kiln.linear output %x, %w param("w") : tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x16xf32>
  %l = kiln.cross_entropy %y, %t : tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// expected-error @+1 {{'func.func' op must return one kiln.cross_entropy to derive @forward_logits}}
func.func @forward_loss(%x: tensor<4xf32> {kiln.input = "x"}) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
