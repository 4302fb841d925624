// RUN: kiln-opt %s -split-input-file -kiln-optimizer -verify-diagnostics | FileCheck %s

// Two parameters: one grad_norm over both gradients, one lr_schedule, one
// adamw each; two state arguments per parameter and the step; results are
// loss, grad_norm, lr, new params, new exp_avg, new exp_avg_sq.
// CHECK-LABEL: func.func @train_step(
// CHECK-SAME: %[[W:[^:]+]]: tensor<16x8xf32> {kiln.init = #kiln.init<ones>, kiln.param = "w"}
// CHECK-SAME: %[[N:[^:]+]]: tensor<8xf32> {kiln.init = #kiln.init<ones>, kiln.param = "n"}
// CHECK-SAME: %[[MW:[^:]+]]: tensor<16x8xf32> {kiln.state = "exp_avg.w"}
// CHECK-SAME: %[[VW:[^:]+]]: tensor<16x8xf32> {kiln.state = "exp_avg_sq.w"}
// CHECK-SAME: %[[MN:[^:]+]]: tensor<8xf32> {kiln.state = "exp_avg.n"}
// CHECK-SAME: %[[VN:[^:]+]]: tensor<8xf32> {kiln.state = "exp_avg_sq.n"}
// CHECK-SAME: %[[STEP:[^:]+]]: tensor<i64> {kiln.input = "step"})
// CHECK-SAME: -> (tensor<f32> {kiln.output = "loss"}, tensor<f32> {kiln.output = "grad_norm"}, tensor<f32> {kiln.output = "lr"},
// CHECK-SAME: tensor<16x8xf32> {kiln.state = "w"}, tensor<8xf32> {kiln.state = "n"},
// CHECK-SAME: tensor<16x8xf32> {kiln.state = "exp_avg.w"}, tensor<8xf32> {kiln.state = "exp_avg.n"},
// CHECK-SAME: tensor<16x8xf32> {kiln.state = "exp_avg_sq.w"}, tensor<8xf32> {kiln.state = "exp_avg_sq.n"})
// CHECK: %[[NORM:.+]] = kiln.grad_norm %[[GW:.+]], %[[GN:.+]] : tensor<16x8xf32>, tensor<8xf32>
// CHECK: %[[LR:.+]] = kiln.lr_schedule %[[STEP]] {decay = "cosine", min_lr = 1.000000e-05 : f64, peak = 1.000000e-03 : f64, total_steps = 100 : i64, warmup_steps = 10 : i64}
// CHECK: %[[PW:.+]], %[[AW:.+]], %[[SW:.+]] = kiln.adamw %[[W]], %[[GW]], %[[MW]], %[[VW]], %[[NORM]], %[[LR]], %[[STEP]] {beta1 = 9.000000e-01 : f64, beta2 = 0.94999999999999996 : f64, eps = 1.000000e-08 : f64, max_norm = 1.000000e+00 : f64, weight_decay = 1.000000e-01 : f64} : tensor<16x8xf32>
// CHECK: %[[PN:.+]], %[[AN:.+]], %[[SN:.+]] = kiln.adamw %[[N]], %[[GN]], %[[MN]], %[[VN]], %[[NORM]], %[[LR]], %[[STEP]]
// CHECK: return %{{.+}}, %[[NORM]], %[[LR]], %[[PW]], %[[PN]], %[[AW]], %[[AN]], %[[SW]], %[[SN]]
module attributes {kiln.optimizer = {lr = 1.0e-3 : f64, min_lr = 1.0e-5 : f64, beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64,
                                     weight_decay = 0.1 : f64, max_norm = 1.0 : f64, warmup_steps = 10 : i64, total_steps = 100 : i64,
                                     decay = "cosine"}} {
  func.func @loss_and_grads(%w: tensor<16x8xf32> {kiln.param = "w", kiln.init = #kiln.init<ones>},
                            %n: tensor<8xf32> {kiln.param = "n", kiln.init = #kiln.init<ones>},
                            %gw: tensor<16x8xf32>, %gn: tensor<8xf32>, %l: tensor<f32>)
      -> (tensor<f32>, tensor<16x8xf32> {kiln.grad = "w"}, tensor<8xf32> {kiln.grad = "n"}) {
    return %l, %gw, %gn : tensor<f32>, tensor<16x8xf32>, tensor<8xf32>
  }
}

// -----

// expected-error @+1 {{kiln-optimizer needs the module attribute 'kiln.optimizer'}}
module {
  func.func @loss_and_grads(%w: tensor<8xf32> {kiln.param = "w", kiln.init = #kiln.init<ones>}, %l: tensor<f32>)
      -> (tensor<f32>, tensor<8xf32> {kiln.grad = "w"}) {
    return %l, %w : tensor<f32>, tensor<8xf32>
  }
}

// -----

// expected-error @+1 {{kiln-optimizer needs a func.func @loss_and_grads (run kiln-autodiff first)}}
module {
}

// -----

// expected-error @+1 {{kiln.optimizer lacks float 'eps'}}
module attributes {kiln.optimizer = {lr = 1.0e-3 : f64, min_lr = 0.0 : f64, beta1 = 0.9 : f64, beta2 = 0.95 : f64,
                                     weight_decay = 0.1 : f64, max_norm = 1.0 : f64, warmup_steps = 10 : i64, total_steps = 100 : i64,
                                     decay = "cosine"}} {
  func.func @loss_and_grads(%w: tensor<8xf32> {kiln.param = "w", kiln.init = #kiln.init<ones>}, %l: tensor<f32>)
      -> (tensor<f32>, tensor<8xf32> {kiln.grad = "w"}) {
    return %l, %w : tensor<f32>, tensor<8xf32>
  }
}

// -----

module attributes {kiln.optimizer = {lr = 1.0e-3 : f64, min_lr = 0.0 : f64, beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64,
                                     weight_decay = 0.1 : f64, max_norm = 1.0 : f64, warmup_steps = 10 : i64, total_steps = 100 : i64,
                                     decay = "cosine"}} {
  // expected-error @+1 {{'func.func' op has no gradient for parameter 'v'}}
  func.func @loss_and_grads(%w: tensor<8xf32> {kiln.param = "w", kiln.init = #kiln.init<ones>},
                            %v: tensor<8xf32> {kiln.param = "v", kiln.init = #kiln.init<ones>}, %l: tensor<f32>)
      -> (tensor<f32>, tensor<8xf32> {kiln.grad = "w"}) {
    return %l, %w : tensor<f32>, tensor<8xf32>
  }
}
