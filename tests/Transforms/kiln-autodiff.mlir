// RUN: kiln-opt %s -split-input-file -kiln-autodiff -verify-diagnostics | FileCheck %s

// A linear feeding the loss: the gradient of the weight is grad^T * input,
// the input's gradient is not needed (data) and is not built.
// CHECK-LABEL: func.func @forward_loss(
// CHECK: return %{{.+}} : tensor<f32>
// CHECK-LABEL: func.func @loss_and_grads(
// CHECK-SAME: -> (tensor<f32>, tensor<16x8xf32> {kiln.grad = "w"})
// CHECK: %[[Y:.+]] = kiln.linear w1 %[[X:.+]], %[[W:.+]] param("w")
// CHECK: %[[L:.+]] = kiln.cross_entropy %[[Y]]
// CHECK: %[[ONE:.+]] = arith.constant dense<1.000000e+00> : tensor<f32>
// CHECK: %[[DY:.+]] = kiln.cross_entropy_grad %[[ONE]], %[[Y]], %{{.+}} : tensor<2x4x16xf32>, tensor<2x4xi32>
// CHECK-NOT: kiln.linear_grad_input
// CHECK: %[[DW:.+]] = kiln.linear_grad_weight w1 %[[DY]], %[[X]] param("w") : tensor<2x4x16xf32>, tensor<2x4x8xf32> -> tensor<16x8xf32>
// CHECK: return %[[L]], %[[DW]]
func.func @forward_loss(%x: tensor<2x4x8xf32> {kiln.input = "x"}, %t: tensor<2x4xi32> {kiln.input = "targets"},
                        %w: tensor<16x8xf32> {kiln.param = "w", kiln.init = #kiln.init<ones>}) -> tensor<f32> {
  %y = kiln.linear w1 %x, %w param("w") : tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x16xf32>
  %l = kiln.cross_entropy %y, %t : tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A tied table: the embedding and the output projection share %e, so its
// gradient is the sum of embedding_grad and the output's linear_grad_weight.
// Residual streams (a value used twice) sum their gradients too.
// CHECK-LABEL: func.func @loss_and_grads(
// CHECK-SAME: -> (tensor<f32>, tensor<16x8xf32> {kiln.grad = "e"}, tensor<8xf32> {kiln.grad = "n"})
// CHECK: %[[H:.+]] = kiln.embedding %[[E:.+]][%[[TOK:.+]]]
// CHECK: %[[N:.+]] = kiln.rms_norm %[[H]], %[[NW:.+]] {eps
// CHECK: %[[R:.+]] = kiln.add %[[H]], %[[N]]
// CHECK: %[[LOGITS:.+]] = kiln.linear output %[[R]], %[[E]]
// CHECK: %[[DL:.+]] = kiln.cross_entropy_grad
// CHECK: %[[DR:.+]] = kiln.linear_grad_input output %[[DL]], %[[E]] param("e")
// CHECK: %[[DE1:.+]] = kiln.linear_grad_weight output %[[DL]], %[[R]] param("e")
// CHECK: %[[DNX:.+]], %[[DNW:.+]] = kiln.rms_norm_grad %[[DR]], %[[H]], %[[NW]] {eps = 1.000000e-05 : f64}
// CHECK: %[[DH:.+]] = kiln.add %[[DR]], %[[DNX]]
// CHECK: %[[DE2:.+]] = kiln.embedding_grad %[[DH]], %[[TOK]] param("e") : tensor<2x4x8xf32>, tensor<2x4xi32> -> tensor<16x8xf32>
// CHECK: %[[DE:.+]] = kiln.add %[[DE1]], %[[DE2]] : tensor<16x8xf32>
// CHECK: return %{{.+}}, %[[DE]], %[[DNW]]
func.func @forward_loss(%tok: tensor<2x4xi32> {kiln.input = "tokens"}, %t: tensor<2x4xi32> {kiln.input = "targets"},
                        %e: tensor<16x8xf32> {kiln.param = "e", kiln.init = #kiln.init<ones>},
                        %nw: tensor<8xf32> {kiln.param = "n", kiln.init = #kiln.init<ones>}) -> tensor<f32> {
  %h = kiln.embedding %e[%tok] param("e") : tensor<16x8xf32>, tensor<2x4xi32> -> tensor<2x4x8xf32>
  %n = kiln.rms_norm %h, %nw {eps = 1.0e-5 : f64} : tensor<2x4x8xf32>, tensor<8xf32>
  %r = kiln.add %h, %n : tensor<2x4x8xf32>
  %y = kiln.linear output %r, %e param("e") : tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x16xf32>
  %l = kiln.cross_entropy %y, %t : tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Attention: the backward takes the saved output and logsumexp; reshape and
// transpose invert; mul swaps operands; silu has its own rule.
// CHECK-LABEL: func.func @loss_and_grads(
// CHECK: %[[QR:.+]] = kiln.rope %[[Q4:.+]] {theta
// CHECK: %[[T:.+]] = kiln.transpose %[[V4:.+]] [0, 1, 2, 3]
// CHECK: %[[O:.+]], %[[LSE:.+]] = kiln.attention %[[QR]], %[[K:.+]], %[[T]] {causal
// CHECK: %[[S:.+]] = kiln.silu %[[O3:.+]] :
// CHECK: %[[M:.+]] = kiln.mul %[[S]], %[[O3]] :
// CHECK: %[[DM1:.+]] = kiln.mul %[[DM:.+]], %[[O3]]
// CHECK: %[[DM2:.+]] = kiln.mul %[[DM]], %[[S]]
// CHECK: %[[DS:.+]] = kiln.silu_grad %[[DM1]], %[[O3]]
// CHECK: %[[DO3:.+]] = kiln.add %[[DM2]], %[[DS]]
// CHECK: %[[DO:.+]] = kiln.reshape %[[DO3]] : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
// CHECK: %[[DQ:.+]], %[[DK:.+]], %[[DV:.+]] = kiln.attention_grad %[[DO]], %[[QR]], %[[K]], %[[T]], %[[O]], %[[LSE]] {causal, scale = 5.000000e-01 : f64} : tensor<2x4x2x4xf32>, tensor<2x4x2x4xf32>, tensor<2x4x1x4xf32>, tensor<2x4x1x4xf32>, tensor<2x2x4xf32>
// CHECK: kiln.transpose %[[DV]] [0, 1, 2, 3]
// The query comes from a data input: its gradient chain (rope_grad, reshape)
// reaches no parameter and is dropped.
// CHECK-NOT: kiln.rope_grad
// CHECK: return %{{.+}}, %[[DK]], %{{.+}}, %{{.+}} :
func.func @forward_loss(%x: tensor<2x4x8xf32> {kiln.input = "x"}, %t: tensor<2x4xi32> {kiln.input = "targets"},
                        %k: tensor<2x4x1x4xf32> {kiln.param = "k", kiln.init = #kiln.init<ones>},
                        %v: tensor<2x4x1x4xf32> {kiln.param = "v", kiln.init = #kiln.init<ones>},
                        %w: tensor<16x8xf32> {kiln.param = "w", kiln.init = #kiln.init<ones>}) -> tensor<f32> {
  %q4 = kiln.reshape %x : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %qr = kiln.rope %q4 {theta = 10000.0 : f64} : tensor<2x4x2x4xf32>
  %vt = kiln.transpose %v [0, 1, 2, 3] : tensor<2x4x1x4xf32> -> tensor<2x4x1x4xf32>
  %o, %lse = kiln.attention %qr, %k, %vt {causal, scale = 0.5 : f64} : tensor<2x4x2x4xf32>, tensor<2x4x1x4xf32>, tensor<2x4x1x4xf32> -> tensor<2x2x4xf32>
  %o3 = kiln.reshape %o : tensor<2x4x2x4xf32> -> tensor<2x4x8xf32>
  %s = kiln.silu %o3 : tensor<2x4x8xf32>
  %m = kiln.mul %s, %o3 : tensor<2x4x8xf32>
  %y = kiln.linear output %m, %w param("w") : tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x16xf32>
  %l = kiln.cross_entropy %y, %t : tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// expected-error @+1 {{'func.func' op must return exactly the scalar loss}}
func.func @forward_loss(%x: tensor<4x8xf32> {kiln.param = "x", kiln.init = #kiln.init<ones>}) -> tensor<4x8xf32> {
  return %x : tensor<4x8xf32>
}

// -----

// expected-error @+1 {{'func.func' op parameter 'unused' does not reach the loss}}
func.func @forward_loss(%x: tensor<2x4x8xf32> {kiln.input = "x"}, %t: tensor<2x4xi32> {kiln.input = "targets"},
                        %w: tensor<16x8xf32> {kiln.param = "w", kiln.init = #kiln.init<ones>},
                        %u: tensor<8xf32> {kiln.param = "unused", kiln.init = #kiln.init<ones>}) -> tensor<f32> {
  %y = kiln.linear w1 %x, %w param("w") : tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x16xf32>
  %l = kiln.cross_entropy %y, %t : tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// expected-error @+1 {{kiln-autodiff needs a func.func @forward_loss}}
module {
  func.func @other() {
    return
  }
}
