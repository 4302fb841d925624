// RUN: kiln-opt %s -split-input-file -kiln-mixed-precision -cse -verify-diagnostics | FileCheck %s

// bf16 compute, f32 reduce: the parameter is cast once per use to bf16
// (CSE merges the copies), compute runs in bf16, the logsumexp and
// the loss stay f32, the gradient goes back to f32 for the optimizer.
// CHECK-LABEL: func.func @step(
// CHECK-DAG: %[[XC:.+]] = kiln.cast %[[X:.+]] : tensor<2x4x8xf32> -> tensor<2x4x8xbf16>
// CHECK-DAG: %[[WC:.+]] = kiln.cast %[[W:[^ ]+]] : tensor<16x8xf32> -> tensor<16x8xbf16>
// CHECK: %[[Y:.+]] = kiln.linear w1 %[[XC]], %[[WC]] param("w") : tensor<2x4x8xbf16>, tensor<16x8xbf16> -> tensor<2x4x16xbf16>
// CHECK: %{{[a-z0-9_]+}}, %[[LSE:[a-z0-9_]+]] = kiln.attention {{.*}} -> tensor<2x2x4xf32>
// CHECK: %[[DQB:[a-z0-9_]+]], %{{.+}} = kiln.attention_grad {{.*}}, %[[LSE]] {{.*}} : tensor<2x4x2x4xbf16>, tensor<2x4x2x4xbf16>, tensor<2x4x1x4xbf16>, tensor<2x4x1x4xbf16>, tensor<2x2x4xf32>
// CHECK: %[[L:.+]] = kiln.cross_entropy %{{.+}}, %{{.+}} : tensor<2x4x16xbf16>, tensor<2x4xi32> -> tensor<f32>
// CHECK: %[[GW:.+]] = kiln.linear_grad_weight w1 {{.*}} -> tensor<16x8xbf16>
// CHECK: %[[GF:.+]] = kiln.cast %[[GW]] : tensor<16x8xbf16> -> tensor<16x8xf32>
// CHECK: kiln.grad_norm %[[GF]] : tensor<16x8xf32>
// CHECK: %[[P:[a-z0-9_]+]], {{.*}} = kiln.adamw %[[W]], %[[GF]], {{.*}} : tensor<16x8xf32>
// A value returned that is not a gradient goes straight back to f32.
// CHECK: %[[DQ:.+]] = kiln.cast %[[DQB]] : tensor<2x4x2x4xbf16> -> tensor<2x4x2x4xf32>
// CHECK: return %[[L]], %[[P]], %[[DQ]]
module attributes {kiln.precision = {param = "bfloat16", reduce = "float32"}} {
  func.func @step(%x: tensor<2x4x8xf32> {kiln.input = "x"}, %t: tensor<2x4xi32> {kiln.input = "targets"},
                  %w: tensor<16x8xf32> {kiln.param = "w", kiln.init = #kiln.init<ones>},
                  %q: tensor<2x4x2x4xf32>, %k: tensor<2x4x1x4xf32>,
                  %m: tensor<16x8xf32>, %v: tensor<16x8xf32>, %s: tensor<i64>) -> (tensor<f32>, tensor<16x8xf32>, tensor<2x4x2x4xf32>) {
    %y = kiln.linear w1 %x, %w param("w") : tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x16xf32>
    %o, %lse = kiln.attention %q, %k, %k {causal, scale = 0.5 : f64} : tensor<2x4x2x4xf32>, tensor<2x4x1x4xf32>, tensor<2x4x1x4xf32> -> tensor<2x2x4xf32>
    %dq, %dk, %dv = kiln.attention_grad %o, %q, %k, %k, %o, %lse {causal, scale = 0.5 : f64} : tensor<2x4x2x4xf32>, tensor<2x4x2x4xf32>, tensor<2x4x1x4xf32>, tensor<2x4x1x4xf32>, tensor<2x2x4xf32>
    %l = kiln.cross_entropy %y, %t : tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<f32>
    %gw = kiln.linear_grad_weight w1 %y, %x param("w") : tensor<2x4x16xf32>, tensor<2x4x8xf32> -> tensor<16x8xf32>
    %n = kiln.grad_norm %gw : tensor<16x8xf32>
    %lr = kiln.lr_schedule %s {decay = "cosine", min_lr = 0.0 : f64, peak = 1.0e-3 : f64, total_steps = 10 : i64, warmup_steps = 1 : i64}
    %p, %m2, %v2 = kiln.adamw %w, %gw, %m, %v, %n, %lr, %s {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, max_norm = 1.0 : f64, weight_decay = 0.1 : f64} : tensor<16x8xf32>
    return %l, %p, %dq : tensor<f32>, tensor<16x8xf32>, tensor<2x4x2x4xf32>
  }
}

// -----

// f32 params, bf16 reduce: compute stays f32, but each gradient is rounded
// through bf16 on its way to the optimizer; the new parameter is not.
// CHECK-LABEL: func.func @reduce_bf16(
// CHECK-SAME: %{{[^:]+}}: tensor<4x8xf32>, %[[W:[^:]+]]: tensor<16x8xf32> {kiln.init = #kiln.init<ones>, kiln.param = "w"}
// CHECK: %[[G:.+]] = kiln.linear_grad_weight {{.*}} -> tensor<16x8xf32>
// CHECK: %[[GB:.+]] = kiln.cast %[[G]] : tensor<16x8xf32> -> tensor<16x8xbf16>
// CHECK: %[[GF:.+]] = kiln.cast %[[GB]] : tensor<16x8xbf16> -> tensor<16x8xf32>
// CHECK: return %[[GF]], %[[W]] :
module attributes {kiln.precision = {param = "float32", reduce = "bfloat16"}} {
  func.func @reduce_bf16(%x: tensor<4x8xf32>, %w: tensor<16x8xf32> {kiln.param = "w", kiln.init = #kiln.init<ones>},
                         %dy: tensor<4x16xf32>) -> (tensor<16x8xf32> {kiln.grad = "w"}, tensor<16x8xf32> {kiln.state = "w"}) {
    %g = kiln.linear_grad_weight w1 %dy, %x param("w") : tensor<4x16xf32>, tensor<4x8xf32> -> tensor<16x8xf32>
    return %g, %w : tensor<16x8xf32>, tensor<16x8xf32>
  }
}

// -----

// float32 params: nothing to do.
// CHECK-LABEL: func.func @all_f32(
// CHECK-NOT: kiln.cast
module attributes {kiln.precision = {param = "float32", reduce = "float32"}} {
  func.func @all_f32(%x: tensor<4x8xf32>, %w: tensor<16x8xf32> {kiln.param = "w", kiln.init = #kiln.init<ones>}) -> tensor<4x16xf32> {
    %y = kiln.linear w1 %x, %w param("w") : tensor<4x8xf32>, tensor<16x8xf32> -> tensor<4x16xf32>
    return %y : tensor<4x16xf32>
  }
}

// -----

// expected-error @+1 {{kiln.precision 'param' must be "bfloat16" or "float32"}}
module attributes {kiln.precision = {param = "fp8", reduce = "float32"}} {
}

// -----

// expected-error @+1 {{kiln-mixed-precision needs the module attribute 'kiln.precision'}}
module {
}
