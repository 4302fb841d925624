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

// An untied embedding, bf16 compute and f32 reduce: embedding_grad reads
// its operand in bf16 and sums straight into the f32 gradient; no cast
// follows it. The add of activation gradients before it stays bf16.
// CHECK-LABEL: func.func @embedding_untied(
// CHECK: %[[DH:.+]] = kiln.add %{{.+}}, %{{.+}} : tensor<2x4x8xbf16>
// CHECK: %[[DE:.+]] = kiln.embedding_grad %[[DH]], %{{.+}} param("e") : tensor<2x4x8xbf16>, tensor<2x4xi32> -> tensor<16x8xf32>
// CHECK-NOT: kiln.cast
// CHECK: return %[[DE]] :
module attributes {kiln.precision = {param = "bfloat16", reduce = "float32"}} {
  func.func @embedding_untied(%tok: tensor<2x4xi32> {kiln.input = "tokens"},
                              %e: tensor<16x8xf32> {kiln.param = "e", kiln.init = #kiln.init<ones>},
                              %a: tensor<2x4x8xf32>, %b: tensor<2x4x8xf32>) -> (tensor<16x8xf32> {kiln.grad = "e"}) {
    %dh = kiln.add %a, %b : tensor<2x4x8xf32>
    %de = kiln.embedding_grad %dh, %tok param("e") : tensor<2x4x8xf32>, tensor<2x4xi32> -> tensor<16x8xf32>
    return %de : tensor<16x8xf32>
  }
}

// -----

// kiln-tp-grad-sync's sums over tp, bf16 compute and f32 reduce: they run
// in the reduce dtype, as the gradient sums do: the embedding's f32
// gradient is summed as it is, a norm's bf16 gradient is cast to f32
// before its all-reduce (not after).
// CHECK-LABEL: func.func @tp_sums(
// CHECK: %[[DE:.+]] = kiln.embedding_grad {{.*}} -> tensor<16x8xf32>
// CHECK-NEXT: %[[SE:.+]] = kiln.all_reduce_start %[[DE]] over tp {ranks = 2 : i64, reduction = "sum"} : tensor<16x8xf32>
// CHECK-NEXT: %[[WE:.+]] = kiln.wait %[[SE]] : tensor<16x8xf32>
// CHECK: %[[DN:.+]] = kiln.mul %{{.+}}, %{{.+}} : tensor<8xbf16>
// CHECK-NEXT: %[[CN:.+]] = kiln.cast %[[DN]] : tensor<8xbf16> -> tensor<8xf32>
// CHECK-NEXT: %[[SN:.+]] = kiln.all_reduce_start %[[CN]] over tp {ranks = 2 : i64, reduction = "sum"} : tensor<8xf32>
// CHECK-NEXT: %[[WN:.+]] = kiln.wait %[[SN]] : tensor<8xf32>
// CHECK-NEXT: return %[[WE]], %[[WN]] :
module attributes {kiln.precision = {param = "bfloat16", reduce = "float32"}} {
  func.func @tp_sums(%tok: tensor<2x4xi32> {kiln.input = "tokens"},
                     %e: tensor<16x8xf32> {kiln.param = "e", kiln.init = #kiln.init<ones>},
                     %a: tensor<2x4x8xf32>, %n1: tensor<8xf32>, %n2: tensor<8xf32>)
      -> (tensor<16x8xf32> {kiln.grad = "e"}, tensor<8xf32> {kiln.grad = "n"}) {
    %de = kiln.embedding_grad %a, %tok param("e") : tensor<2x4x8xf32>, tensor<2x4xi32> -> tensor<16x8xf32>
    %se = kiln.all_reduce_start %de over tp {ranks = 2 : i64, reduction = "sum"} : tensor<16x8xf32>
    %we = kiln.wait %se : tensor<16x8xf32>
    %dn = kiln.mul %n1, %n2 : tensor<8xf32>
    %sn = kiln.all_reduce_start %dn over tp {ranks = 2 : i64, reduction = "sum"} : tensor<8xf32>
    %wn = kiln.wait %sn : tensor<8xf32>
    return %we, %wn : tensor<16x8xf32>, tensor<8xf32>
  }
}

// -----

// A tied embedding, bf16 compute and f32 reduce: the output projection's
// weight gradient (a GEMM, bf16 like every linear_grad_weight) is cast to
// f32 and added to the f32 embedding gradient; the sum goes to grad_norm
// and AdamW as it is.
// CHECK-LABEL: func.func @embedding_tied(
// CHECK-SAME: %[[E:[^:]+]]: tensor<16x8xf32> {kiln.init = #kiln.init<ones>, kiln.param = "e"}
// CHECK: %[[DW:.+]] = kiln.linear_grad_weight output {{.*}} param("e") : tensor<2x4x16xbf16>, tensor<2x4x8xbf16> -> tensor<16x8xbf16>
// CHECK: %[[DE:.+]] = kiln.embedding_grad %{{.+}}, %{{.+}} param("e") : tensor<2x4x8xbf16>, tensor<2x4xi32> -> tensor<16x8xf32>
// CHECK: %[[DWF:.+]] = kiln.cast %[[DW]] : tensor<16x8xbf16> -> tensor<16x8xf32>
// CHECK-NEXT: %[[G:.+]] = kiln.add %[[DWF]], %[[DE]] : tensor<16x8xf32>
// CHECK-NOT: kiln.cast
// CHECK: kiln.grad_norm %[[G]] : tensor<16x8xf32>
// CHECK: kiln.adamw %[[E]], %[[G]], {{.*}} : tensor<16x8xf32>
module attributes {kiln.precision = {param = "bfloat16", reduce = "float32"}} {
  func.func @embedding_tied(%tok: tensor<2x4xi32> {kiln.input = "tokens"}, %x: tensor<2x4x8xf32>,
                            %e: tensor<16x8xf32> {kiln.param = "e", kiln.init = #kiln.init<ones>},
                            %dy: tensor<2x4x16xf32>, %dh: tensor<2x4x8xf32>,
                            %m: tensor<16x8xf32>, %v: tensor<16x8xf32>, %s: tensor<i64>) -> tensor<16x8xf32> {
    %dw = kiln.linear_grad_weight output %dy, %x param("e") : tensor<2x4x16xf32>, tensor<2x4x8xf32> -> tensor<16x8xf32>
    %de = kiln.embedding_grad %dh, %tok param("e") : tensor<2x4x8xf32>, tensor<2x4xi32> -> tensor<16x8xf32>
    %g = kiln.add %dw, %de : tensor<16x8xf32>
    %n = kiln.grad_norm %g : tensor<16x8xf32>
    %lr = kiln.lr_schedule %s {decay = "cosine", min_lr = 0.0 : f64, peak = 1.0e-3 : f64, total_steps = 10 : i64, warmup_steps = 1 : i64}
    %p, %m2, %v2 = kiln.adamw %e, %g, %m, %v, %n, %lr, %s {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, max_norm = 1.0 : f64, weight_decay = 0.1 : f64} : tensor<16x8xf32>
    return %p : tensor<16x8xf32>
  }
}

// -----

// Gradients reduced in bf16: the tied embedding's gradients are bf16 and so
// is their sum, cast to f32 only for the optimizer.
// CHECK-LABEL: func.func @embedding_tied_reduce_bf16(
// CHECK: %[[DW:.+]] = kiln.linear_grad_weight output {{.*}} -> tensor<16x8xbf16>
// CHECK: %[[DE:.+]] = kiln.embedding_grad {{.*}} : tensor<2x4x8xbf16>, tensor<2x4xi32> -> tensor<16x8xbf16>
// CHECK: %[[G:.+]] = kiln.add %[[DW]], %[[DE]] : tensor<16x8xbf16>
// CHECK: %[[GF:.+]] = kiln.cast %[[G]] : tensor<16x8xbf16> -> tensor<16x8xf32>
// CHECK: return %[[GF]] :
module attributes {kiln.precision = {param = "bfloat16", reduce = "bfloat16"}} {
  func.func @embedding_tied_reduce_bf16(%tok: tensor<2x4xi32> {kiln.input = "tokens"}, %x: tensor<2x4x8xf32>,
                                        %e: tensor<16x8xf32> {kiln.param = "e", kiln.init = #kiln.init<ones>},
                                        %dy: tensor<2x4x16xf32>, %dh: tensor<2x4x8xf32>) -> (tensor<16x8xf32> {kiln.grad = "e"}) {
    %dw = kiln.linear_grad_weight output %dy, %x param("e") : tensor<2x4x16xf32>, tensor<2x4x8xf32> -> tensor<16x8xf32>
    %de = kiln.embedding_grad %dh, %tok param("e") : tensor<2x4x8xf32>, tensor<2x4xi32> -> tensor<16x8xf32>
    %g = kiln.add %dw, %de : tensor<16x8xf32>
    return %g : tensor<16x8xf32>
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

// -----

// Loss parallel under bf16: the logits are bf16 like any activation, but
// the target ids (exact only in f32 past 256), through their gather, the
// row max and the statistics stay f32, and so do their gradients.
// CHECK-LABEL: func.func @loss_parallel(
// CHECK: %[[Y:.+]] = kiln.reshape %{{.+}} : tensor<16xbf16> -> tensor<1x2x8xbf16>
// CHECK: %[[ID:.+]] = kiln.index_to_float %{{.+}} : tensor<1x1xi32> -> tensor<1x1xf32>
// CHECK: kiln.reshape %[[ID]] : tensor<1x1xf32> -> tensor<1xf32>
// CHECK: kiln.all_gather_start %{{.+}} over tp {group = "targets", ranks = 2 : i64} : tensor<1xf32> -> tensor<2xf32>
// CHECK: %[[T:.+]] = kiln.reshape %{{.+}} : tensor<2xf32> -> tensor<1x2xf32>
// CHECK: %[[M0:.+]] = kiln.vocab_parallel_max %[[Y]] {{.*}} : tensor<1x2x8xbf16> -> tensor<1x2xf32>
// CHECK: kiln.all_reduce_start %[[M0]] over tp {ranks = 2 : i64, reduction = "max"} : tensor<1x2xf32>
// CHECK: kiln.vocab_parallel_stats %[[Y]], %{{.+}}, %[[T]] {{.*}} : tensor<1x2x8xbf16>, tensor<1x2xf32>, tensor<1x2xf32> -> tensor<1x2x2xf32>
// CHECK: kiln.all_reduce_start %{{.+}} over tp {ranks = 2 : i64, reduction = "sum"} : tensor<1x2x2xf32>
// CHECK: kiln.vocab_parallel_loss_grad %{{.+}}, %{{.+}} : tensor<1x2x2xf32>
// CHECK: kiln.vocab_parallel_stats_grad %{{.+}}, %[[Y]], %{{.+}}, %[[T]] {{.*}} : tensor<1x2x2xf32>, tensor<1x2x8xbf16>, tensor<1x2xf32>, tensor<1x2xf32>
module attributes {kiln.precision = {param = "bfloat16", reduce = "float32"}} {
func.func @loss_parallel(%t: tensor<1x1xi32> {kiln.input = "targets"},
                         %w: tensor<16xf32> {kiln.param = "w"}) -> (tensor<f32>, tensor<1x2x8xf32>) {
  %y = kiln.reshape %w : tensor<16xf32> -> tensor<1x2x8xf32>
  %i = kiln.index_to_float %t : tensor<1x1xi32> -> tensor<1x1xf32>
  %if = kiln.reshape %i : tensor<1x1xf32> -> tensor<1xf32>
  %is = kiln.all_gather_start %if over tp {group = "targets", ranks = 2 : i64} : tensor<1xf32> -> tensor<2xf32>
  %iw = kiln.wait %is : tensor<2xf32>
  %ids = kiln.reshape %iw : tensor<2xf32> -> tensor<1x2xf32>
  %m0 = kiln.vocab_parallel_max %y {vocab_start = 8 : i64, vocab_size = 16 : i64} : tensor<1x2x8xf32> -> tensor<1x2xf32>
  %ms = kiln.all_reduce_start %m0 over tp {ranks = 2 : i64, reduction = "max"} : tensor<1x2xf32>
  %m = kiln.wait %ms : tensor<1x2xf32>
  %s0 = kiln.vocab_parallel_stats %y, %m, %ids {vocab_start = 8 : i64, vocab_size = 16 : i64} : tensor<1x2x8xf32>, tensor<1x2xf32>, tensor<1x2xf32> -> tensor<1x2x2xf32>
  %ss = kiln.all_reduce_start %s0 over tp {ranks = 2 : i64, reduction = "sum"} : tensor<1x2x2xf32>
  %s = kiln.wait %ss : tensor<1x2x2xf32>
  %l = kiln.vocab_parallel_loss %s, %m : tensor<1x2x2xf32>, tensor<1x2xf32>
  %one = arith.constant dense<1.0> : tensor<f32>
  %ds = kiln.vocab_parallel_loss_grad %one, %s : tensor<1x2x2xf32>
  %dy = kiln.vocab_parallel_stats_grad %ds, %y, %m, %ids {vocab_start = 8 : i64, vocab_size = 16 : i64} : tensor<1x2x2xf32>, tensor<1x2x8xf32>, tensor<1x2xf32>, tensor<1x2xf32>
  return %l, %dy : tensor<f32>, tensor<1x2x8xf32>
}
}
