// RUN: kiln-opt %s -split-input-file -kiln-fuse-elementwise | FileCheck %s

// A residual add and the norm after it: one group, yielding the sum (the
// next residual) and the normalised value (the GEMM's input).
// CHECK-LABEL: func.func @residual_norm(
// CHECK-SAME: %[[X:.+]]: tensor<2x4x8xbf16>, %[[D:.+]]: tensor<2x4x8xbf16>, %[[W:.+]]: tensor<8xbf16>, %[[Q:.+]]: tensor<8x8xbf16>
// CHECK: %[[G:.+]]:2 = kiln.fused_group(%[[X]], %[[D]], %[[W]]) : (tensor<2x4x8xbf16>, tensor<2x4x8xbf16>, tensor<8xbf16>) -> (tensor<2x4x8xbf16>, tensor<2x4x8xbf16>) {
// CHECK-NEXT: ^bb0(%[[A:.+]]: tensor<2x4x8xbf16>, %[[B:.+]]: tensor<2x4x8xbf16>, %[[C:.+]]: tensor<8xbf16>):
// CHECK-NEXT: %[[S:.+]] = kiln.add %[[A]], %[[B]]
// CHECK-NEXT: %[[N:.+]] = kiln.rms_norm %[[S]], %[[C]]
// CHECK-NEXT: kiln.yield %[[S]], %[[N]] : tensor<2x4x8xbf16>, tensor<2x4x8xbf16>
// CHECK-NEXT: }
// CHECK-NEXT: %[[Y:.+]] = kiln.linear wq %[[G]]#1, %[[Q]]
// CHECK-NEXT: return %[[G]]#0, %[[Y]]
func.func @residual_norm(%x: tensor<2x4x8xbf16>, %d: tensor<2x4x8xbf16>, %w: tensor<8xbf16>, %q: tensor<8x8xbf16>) -> (tensor<2x4x8xbf16>, tensor<2x4x8xbf16>) {
  %s = kiln.add %x, %d : tensor<2x4x8xbf16>
  %n = kiln.rms_norm %s, %w {eps = 1.0e-05 : f64} : tensor<2x4x8xbf16>, tensor<8xbf16>
  %y = kiln.linear wq %n, %q param("q") : tensor<2x4x8xbf16>, tensor<8x8xbf16> -> tensor<2x4x8xbf16>
  return %s, %y : tensor<2x4x8xbf16>, tensor<2x4x8xbf16>
}

// -----

// SwiGLU: silu and the product fuse; silu's result is also read later (by
// the backward), so the group yields it too.
// CHECK-LABEL: func.func @swiglu(
// CHECK: %[[G:.+]]:2 = kiln.fused_group(%{{.+}}, %{{.+}}) : (tensor<4x16xf32>, tensor<4x16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>)
// CHECK: kiln.silu
// CHECK-NEXT: kiln.mul
// CHECK-NEXT: kiln.yield
// CHECK: return %[[G]]#0, %[[G]]#1
func.func @swiglu(%g: tensor<4x16xf32>, %u: tensor<4x16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>) {
  %s = kiln.silu %g : tensor<4x16xf32>
  %p = kiln.mul %s, %u : tensor<4x16xf32>
  return %s, %p : tensor<4x16xf32>, tensor<4x16xf32>
}

// -----

// The backward of a block's end: two gradient contributions summed, the
// norm's backward, and the residual's sum. The weight gradient is a sum over
// rows: a group output that nothing in the group reads.
// CHECK-LABEL: func.func @norm_backward(
// CHECK: %[[G:.+]]:2 = kiln.fused_group(%{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}) : (tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8xf32>, tensor<8x8xf32>) -> (tensor<8xf32>, tensor<8x8xf32>)
// CHECK-NEXT: ^bb0(
// CHECK-NEXT: kiln.add
// CHECK-NEXT: kiln.rms_norm_grad
// CHECK-NEXT: kiln.add
// CHECK-NEXT: kiln.yield
// CHECK: return %[[G]]#1, %[[G]]#0
func.func @norm_backward(%a: tensor<8x8xf32>, %b: tensor<8x8xf32>, %x: tensor<8x8xf32>, %w: tensor<8xf32>, %r: tensor<8x8xf32>) -> (tensor<8x8xf32>, tensor<8xf32>) {
  %dy = kiln.add %a, %b : tensor<8x8xf32>
  %dx, %dw = kiln.rms_norm_grad %dy, %x, %w {eps = 1.0e-05 : f64} : tensor<8x8xf32>, tensor<8xf32>
  %sum = kiln.add %r, %dx : tensor<8x8xf32>
  return %sum, %dw : tensor<8x8xf32>, tensor<8xf32>
}

// -----

// A value read by a GEMM between two elementwise ops cannot be in a group
// that runs after the GEMM: the second add starts its own group, and lone
// ops stay as they are.
// CHECK-LABEL: func.func @reader_in_between(
// CHECK-NOT: kiln.fused_group
// CHECK: kiln.add
// CHECK-NEXT: kiln.linear
// CHECK-NEXT: kiln.add
// CHECK-NOT: kiln.fused_group
func.func @reader_in_between(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4x8xf32> {
  %a = kiln.add %x, %x : tensor<4x8xf32>
  %y = kiln.linear wq %a, %w param("q") : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
  %b = kiln.add %a, %y : tensor<4x8xf32>
  return %b : tensor<4x8xf32>
}

// -----

// Different iteration spaces never fuse: the weight's cast ([8], one row)
// and the norm over [4, 8].
// CHECK-LABEL: func.func @spaces_differ(
// CHECK-NOT: kiln.fused_group
func.func @spaces_differ(%x: tensor<4x8xbf16>, %w: tensor<8xf32>) -> tensor<4x8xbf16> {
  %c = kiln.cast %w : tensor<8xf32> -> tensor<8xbf16>
  %n = kiln.rms_norm %x, %c {eps = 1.0e-05 : f64} : tensor<4x8xbf16>, tensor<8xbf16>
  return %n : tensor<4x8xbf16>
}

// -----

// A transposed result exists only once the group has run: an op reading it
// is not fused with the transpose.
// CHECK-LABEL: func.func @transpose_is_terminal(
// CHECK: %[[G:.+]]:2 = kiln.fused_group
// CHECK-NEXT: ^bb0(
// CHECK-NEXT: kiln.cast
// CHECK-NEXT: kiln.transpose
// CHECK-NEXT: kiln.yield
// CHECK: kiln.silu %[[G]]#1
func.func @transpose_is_terminal(%x: tensor<8x8xf32>) -> (tensor<8x8xbf16>, tensor<8x8xbf16>) {
  %c = kiln.cast %x : tensor<8x8xf32> -> tensor<8x8xbf16>
  %t = kiln.transpose %c [1, 0] : tensor<8x8xbf16> -> tensor<8x8xbf16>
  %s = kiln.silu %t : tensor<8x8xbf16>
  return %c, %s : tensor<8x8xbf16>, tensor<8x8xbf16>
}

// -----

// SwiGLU's backward: the two products of the incoming gradient are
// siblings (they read the same input) and join one group with silu_grad.
// CHECK-LABEL: func.func @swiglu_backward(
// CHECK: %[[G:.+]]:2 = kiln.fused_group(%{{.+}}, %{{.+}}, %{{.+}}, %{{.+}})
// CHECK-NEXT: ^bb0(
// CHECK-NEXT: kiln.mul
// CHECK-NEXT: kiln.mul
// CHECK-NEXT: kiln.silu_grad
// CHECK-NEXT: kiln.yield
// CHECK: return %[[G]]#0, %[[G]]#1
func.func @swiglu_backward(%dp: tensor<4x16xf32>, %u: tensor<4x16xf32>, %s: tensor<4x16xf32>, %g: tensor<4x16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>) {
  %ds = kiln.mul %dp, %u : tensor<4x16xf32>
  %du = kiln.mul %dp, %s : tensor<4x16xf32>
  %dg = kiln.silu_grad %ds, %g : tensor<4x16xf32>
  return %du, %dg : tensor<4x16xf32>, tensor<4x16xf32>
}
