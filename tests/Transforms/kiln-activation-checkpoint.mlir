// RUN: kiln-opt %s -split-input-file -kiln-activation-checkpoint="mode=selective selective=gemm" | FileCheck %s --check-prefix=SEL
// RUN: kiln-opt %s -split-input-file -kiln-activation-checkpoint=mode=full | FileCheck %s --check-prefix=FULL
// RUN: kiln-opt %s -split-input-file -kiln-activation-checkpoint=mode=none | FileCheck %s --check-prefix=NONE
// selective's policies: TorchTitan's op policy, and its layer policy.
// RUN: kiln-opt %s -split-input-file -kiln-activation-checkpoint="mode=selective selective=op" | FileCheck %s --check-prefix=OP
// RUN: kiln-opt %s -split-input-file -kiln-activation-checkpoint="mode=selective selective=2" | FileCheck %s --check-prefix=EVERY2
// Without the option, the module's kiln.activation_checkpoint decides.
// RUN: kiln-opt %s -split-input-file -kiln-activation-checkpoint -verify-diagnostics | FileCheck %s --check-prefix=ATTR

// One block (ops named model.layers.0.*) and a head. The backward of the
// block reads the norm's result (the grad-weight GEMM's input) and the
// q projection's (silu_grad's input). selective recomputes the norm only
// (GEMM results are kept); full recomputes the projection too, from a
// recomputed norm, before the first backward reader of either. The head's
// ops (named lm_head) belong to no block and are never recomputed.
// SEL-LABEL: func.func @block(
// SEL-SAME: %[[X:[^:]+]]: tensor<1x4x8xf32>, %[[W:[^:]+]]: tensor<8xf32>
// SEL: %[[N:.+]] = kiln.rms_norm %[[X]], %[[W]] {eps = 1.000000e-05 : f64}
// SEL-NEXT: %[[Q:.+]] = kiln.linear wq %[[N]]
// SEL: kiln.cross_entropy_grad
// SEL-NEXT: %[[DS:.+]] = kiln.linear_grad_input output
// SEL-NEXT: %[[DQ:.+]] = kiln.silu_grad %[[DS]], %[[Q]]
// SEL-NEXT: %[[N2:.+]] = kiln.rms_norm %[[X]], %[[W]] {eps = 1.000000e-05 : f64, kiln.recomputed}
// SEL-NEXT: %[[DW:.+]] = kiln.linear_grad_weight wq %[[DQ]], %[[N2]]
// SEL-NEXT: return %[[DW]]

// FULL-LABEL: func.func @block(
// FULL-SAME: %[[X:[^:]+]]: tensor<1x4x8xf32>, %[[W:[^:]+]]: tensor<8xf32>, %[[WQ:[^:]+]]: tensor<8x8xf32>
// FULL-NOT: kiln.recomputed
// FULL: kiln.cross_entropy_grad
// FULL-NEXT: %[[DS:.+]] = kiln.linear_grad_input output
// FULL-NEXT: %[[N2:.+]] = kiln.rms_norm %[[X]], %[[W]] {eps = 1.000000e-05 : f64, kiln.recomputed}
// FULL-NEXT: %[[Q2:.+]] = kiln.linear wq %[[N2]], %[[WQ]] param("q") {kiln.recomputed}
// FULL-NEXT: %[[DQ:.+]] = kiln.silu_grad %[[DS]], %[[Q2]]
// FULL-NEXT: %[[DW:.+]] = kiln.linear_grad_weight wq %[[DQ]], %[[N2]]
// FULL-NEXT: return %[[DW]]

// NONE-LABEL: func.func @block(
// NONE-NOT: kiln.recomputed
// NONE: return

// ATTR-LABEL: func.func @block(
// ATTR-NOT: kiln.recomputed
// ATTR: return
func.func @block(%x: tensor<1x4x8xf32>, %w: tensor<8xf32>, %wq: tensor<8x8xf32>, %wo: tensor<16x8xf32>, %t: tensor<1x4xi32>, %one: tensor<f32>) -> tensor<8x8xf32> {
  %n = kiln.rms_norm %x, %w {eps = 1.0e-05 : f64} : tensor<1x4x8xf32>, tensor<8xf32> loc("model.layers.0.input_layernorm")
  %q = kiln.linear wq %n, %wq param("q") : tensor<1x4x8xf32>, tensor<8x8xf32> -> tensor<1x4x8xf32> loc("model.layers.0.self_attn.q_proj")
  %s = kiln.silu %q : tensor<1x4x8xf32> loc("model.layers.0.mlp")
  %o = kiln.linear output %s, %wo param("o") : tensor<1x4x8xf32>, tensor<16x8xf32> -> tensor<1x4x16xf32> loc("lm_head")
  %dl = kiln.cross_entropy_grad %one, %o, %t : tensor<1x4x16xf32>, tensor<1x4xi32> loc("loss")
  %ds = kiln.linear_grad_input output %dl, %wo param("o") : tensor<1x4x16xf32>, tensor<16x8xf32> -> tensor<1x4x8xf32> loc("lm_head")
  %dq = kiln.silu_grad %ds, %q : tensor<1x4x8xf32> loc("model.layers.0.mlp")
  %dw = kiln.linear_grad_weight wq %dq, %n param("q") : tensor<1x4x8xf32>, tensor<1x4x8xf32> -> tensor<8x8xf32> loc("model.layers.0.self_attn.q_proj")
  return %dw : tensor<8x8xf32>
}

// -----

// Two blocks: block 1's backward reads its own silu (recomputed in both
// modes, from block 0's output as it was kept) and block 0's output (the
// block's input: read as saved, never recomputed).
// SEL-LABEL: func.func @two_blocks(
// SEL: %[[H0:.+]] = kiln.silu %{{.+}} : tensor<1x4x8xf32>
// SEL-NEXT: %[[H1:.+]] = kiln.silu %[[H0]] : tensor<1x4x8xf32>
// SEL: %[[G:.+]] = kiln.cross_entropy_grad
// SEL-NEXT: %[[H1R:.+]] = kiln.silu %[[H0]] {kiln.recomputed}
// SEL-NEXT: %[[D1:.+]] = kiln.silu_grad %[[G]], %[[H1R]]
// SEL-NEXT: %[[D0:.+]] = kiln.silu_grad %[[D1]], %[[H0]]
// SEL-NOT: kiln.recomputed

// FULL-LABEL: func.func @two_blocks(
// FULL: %[[H0:.+]] = kiln.silu %{{.+}} : tensor<1x4x8xf32>
// FULL: %[[G:.+]] = kiln.cross_entropy_grad
// FULL-NEXT: %[[H1R:.+]] = kiln.silu %[[H0]] {kiln.recomputed}
// FULL-NEXT: kiln.silu_grad %[[G]], %[[H1R]]
// FULL-NOT: kiln.recomputed

// NONE-LABEL: func.func @two_blocks(
// NONE-NOT: kiln.recomputed
// NONE: return
func.func @two_blocks(%x: tensor<1x4x8xf32>, %t: tensor<1x4xi32>, %one: tensor<f32>) -> tensor<1x4x8xf32> {
  %h0 = kiln.silu %x : tensor<1x4x8xf32> loc("model.layers.0.mlp")
  %h1 = kiln.silu %h0 : tensor<1x4x8xf32> loc("model.layers.1.mlp")
  %g = kiln.cross_entropy_grad %one, %h1, %t : tensor<1x4x8xf32>, tensor<1x4xi32> loc("loss")
  %d1 = kiln.silu_grad %g, %h1 : tensor<1x4x8xf32> loc("model.layers.1.mlp")
  %d0 = kiln.silu_grad %d1, %h0 : tensor<1x4x8xf32> loc("model.layers.1.mlp")
  return %d0 : tensor<1x4x8xf32>
}

// -----

// Tensor parallel's sequence all-gather inside a block is recomputed in
// both modes, start and wait together: every rank of the tp group runs the
// same clone, and the gathered activation (tp times the saved shard) is
// not kept from the forward.
// SEL-LABEL: func.func @tp_gather(
// SEL-SAME: %[[X:[^:]+]]: tensor<16xf32>
// SEL: kiln.cross_entropy_grad
// SEL-NEXT: %[[S:.+]] = kiln.all_gather_start %[[X]] over tp {group = "model.layers.0.self_attn.q_proj.weight", kiln.recomputed, ranks = 2 : i64}
// SEL-NEXT: %[[W:.+]] = kiln.wait %[[S]] {kiln.recomputed}
// SEL-NEXT: %[[R:.+]] = kiln.reshape %[[W]] {kiln.recomputed}
// SEL-NEXT: kiln.linear_grad_weight wq %{{.+}}, %[[R]]
// FULL-LABEL: func.func @tp_gather(
// FULL: kiln.cross_entropy_grad
// FULL-NEXT: kiln.all_gather_start {{.*}}kiln.recomputed
// FULL-NEXT: kiln.wait {{.*}}kiln.recomputed
// NONE-LABEL: func.func @tp_gather(
// NONE-NOT: kiln.recomputed
// NONE: return
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 1, tp = 2>} {
  func.func @tp_gather(%x: tensor<16xf32>, %wq: tensor<8x8xf32>, %t: tensor<1x4xi32>, %one: tensor<f32>) -> tensor<8x8xf32> {
    %s = kiln.all_gather_start %x over tp {group = "model.layers.0.self_attn.q_proj.weight", ranks = 2 : i64} : tensor<16xf32> -> tensor<32xf32> loc("model.layers.0.self_attn.q_proj")
    %w = kiln.wait %s : tensor<32xf32> loc("model.layers.0.self_attn.q_proj")
    %r = kiln.reshape %w : tensor<32xf32> -> tensor<1x4x8xf32> loc("model.layers.0.self_attn.q_proj")
    %q = kiln.linear wq %r, %wq param("q") : tensor<1x4x8xf32>, tensor<8x8xf32> -> tensor<1x4x8xf32> loc("model.layers.0.self_attn.q_proj")
    %g = kiln.cross_entropy_grad %one, %q, %t : tensor<1x4x8xf32>, tensor<1x4xi32> loc("loss")
    %dw = kiln.linear_grad_weight wq %g, %r param("q") : tensor<1x4x8xf32>, tensor<1x4x8xf32> -> tensor<8x8xf32> loc("model.layers.0.self_attn.q_proj")
    return %dw : tensor<8x8xf32>
  }
}

// -----

// selective's `op` policy (TorchTitan's): of a block's GEMMs, counted by
// weight in forward order, every second one is recomputed; attention is
// kept. Two GEMMs on one weight (async TP's chunks) count once. Here the
// second weight's GEMM (%b) is recomputed from a recomputed %s, and the
// first's (%a, %a2) and the third's (%c) are kept.
// OP-LABEL: func.func @op_policy(
// OP: %[[A:.+]] = kiln.linear wq %{{.+}}, %{{.+}} param("a")
// OP-NEXT: %[[A2:.+]] = kiln.linear wq %{{.+}}, %{{.+}} param("a")
// OP: %[[C:.+]] = kiln.linear wv
// OP-NEXT: %[[G:.+]] = kiln.cross_entropy_grad
// OP-NEXT: %[[SR:.+]] = kiln.add %[[A]], %[[A2]] {kiln.recomputed}
// OP-NEXT: %[[BR:.+]] = kiln.linear wk %[[SR]], %{{.+}} param("b") {kiln.recomputed}
// OP-NEXT: %[[DB:.+]] = kiln.silu_grad %[[G]], %[[BR]]
// OP-NEXT: kiln.linear_grad_weight wk %[[DB]], %[[SR]]
// OP-NEXT: kiln.silu_grad %[[DB]], %[[A2]]
// OP-NOT: kiln.recomputed
// OP: return
// The `gemm` policy (the default) keeps every GEMM: only %s is recomputed.
// SEL-LABEL: func.func @op_policy(
// SEL: kiln.cross_entropy_grad
// SEL: kiln.add {{.*}}kiln.recomputed
// SEL-NOT: kiln.recomputed
// SEL: return
func.func @op_policy(%x: tensor<1x4x8xf32>, %wa: tensor<8x8xf32>, %wb: tensor<8x8xf32>, %wc: tensor<8x8xf32>, %t: tensor<1x4xi32>, %one: tensor<f32>) -> (tensor<8x8xf32>, tensor<1x4x8xf32>) {
  %a = kiln.linear wq %x, %wa param("a") : tensor<1x4x8xf32>, tensor<8x8xf32> -> tensor<1x4x8xf32> loc("model.layers.0.self_attn.q_proj")
  %a2 = kiln.linear wq %x, %wa param("a") : tensor<1x4x8xf32>, tensor<8x8xf32> -> tensor<1x4x8xf32> loc("model.layers.0.self_attn.q_proj")
  %s = kiln.add %a, %a2 : tensor<1x4x8xf32> loc("model.layers.0.self_attn")
  %b = kiln.linear wk %s, %wb param("b") : tensor<1x4x8xf32>, tensor<8x8xf32> -> tensor<1x4x8xf32> loc("model.layers.0.self_attn.k_proj")
  %c = kiln.linear wv %b, %wc param("c") : tensor<1x4x8xf32>, tensor<8x8xf32> -> tensor<1x4x8xf32> loc("model.layers.0.self_attn.v_proj")
  %g = kiln.cross_entropy_grad %one, %c, %t : tensor<1x4x8xf32>, tensor<1x4xi32> loc("loss")
  %db = kiln.silu_grad %g, %b : tensor<1x4x8xf32> loc("model.layers.0.self_attn")
  %dw = kiln.linear_grad_weight wk %db, %s param("b") : tensor<1x4x8xf32>, tensor<1x4x8xf32> -> tensor<8x8xf32> loc("model.layers.0.self_attn.k_proj")
  %da = kiln.silu_grad %db, %a2 : tensor<1x4x8xf32> loc("model.layers.0.self_attn")
  return %dw, %da : tensor<8x8xf32>, tensor<1x4x8xf32>
}

// -----

// selective's layer policy (TorchTitan's `selective_ac_option = "2"`): every
// second block (blocks 1, 3, ...) is recomputed whole, as `full` would, and
// the others not at all.
// EVERY2-LABEL: func.func @every_other(
// EVERY2: %[[H0:.+]] = kiln.linear w1 %{{.+}}, %{{.+}} param("w1.0")
// EVERY2: %[[G:.+]] = kiln.cross_entropy_grad
// EVERY2-NEXT: %[[D2:.+]] = kiln.silu_grad %[[G]], %{{.+}}
// EVERY2-NEXT: %[[H1R:.+]] = kiln.linear w1 %[[H0]], %{{.+}} param("w1.1") {kiln.recomputed}
// EVERY2-NEXT: %[[D1:.+]] = kiln.silu_grad %[[D2]], %[[H1R]]
// EVERY2-NEXT: kiln.silu_grad %[[D1]], %[[H0]]
// EVERY2-NEXT: return
// Under full each block's clone reads the block before's value as saved:
// that block's own clone comes later, before its own backward.
// FULL-LABEL: func.func @every_other(
// FULL: %[[H1:.+]] = kiln.linear w1 %{{.+}}, %{{.+}} param("w1.1")
// FULL: kiln.cross_entropy_grad
// FULL-NEXT: kiln.linear w1 %[[H1]], %{{.+}} param("w1.2") {kiln.recomputed}
func.func @every_other(%x: tensor<1x4x8xf32>, %w: tensor<8x8xf32>, %t: tensor<1x4xi32>, %one: tensor<f32>) -> tensor<1x4x8xf32> {
  %h0 = kiln.linear w1 %x, %w param("w1.0") : tensor<1x4x8xf32>, tensor<8x8xf32> -> tensor<1x4x8xf32> loc("model.layers.0.mlp.gate_proj")
  %h1 = kiln.linear w1 %h0, %w param("w1.1") : tensor<1x4x8xf32>, tensor<8x8xf32> -> tensor<1x4x8xf32> loc("model.layers.1.mlp.gate_proj")
  %h2 = kiln.linear w1 %h1, %w param("w1.2") : tensor<1x4x8xf32>, tensor<8x8xf32> -> tensor<1x4x8xf32> loc("model.layers.2.mlp.gate_proj")
  %g = kiln.cross_entropy_grad %one, %h2, %t : tensor<1x4x8xf32>, tensor<1x4xi32> loc("loss")
  %d2 = kiln.silu_grad %g, %h2 : tensor<1x4x8xf32> loc("model.layers.2.mlp")
  %d1 = kiln.silu_grad %d2, %h1 : tensor<1x4x8xf32> loc("model.layers.1.mlp")
  %d0 = kiln.silu_grad %d1, %h0 : tensor<1x4x8xf32> loc("model.layers.0.mlp")
  return %d0 : tensor<1x4x8xf32>
}

// -----

// A pipeline stage without the loss: its backward begins where the next
// stage's gradient arrives, and its block's ops are recomputed there.
// SEL-LABEL: func.func @stage(
// SEL: kiln.pipe_recv gradient
// SEL-NEXT: kiln.silu %{{.+}} {kiln.recomputed}
// FULL-LABEL: func.func @stage(
// FULL: kiln.pipe_recv gradient
// FULL-NEXT: kiln.silu %{{.+}} {kiln.recomputed}
// NONE-LABEL: func.func @stage(
// NONE-NOT: kiln.recomputed
// NONE: return
module attributes {kiln.mesh = #kiln.mesh<pp = 2, dp_shard = 1, tp = 1>} {
  func.func @stage(%x: tensor<4xf32>) -> tensor<4xf32> {
    %h = kiln.silu %x : tensor<4xf32> loc("model.layers.0.mlp")
    %a = kiln.mul %h, %h : tensor<4xf32> loc("model.layers.0.mlp")
    kiln.pipe_send %a activation {stage = 0 : i64, stages = 2 : i64} : tensor<4xf32>
    %g = kiln.pipe_recv gradient {stage = 0 : i64, stages = 2 : i64} : tensor<4xf32> loc("model.layers.0.mlp")
    %d = kiln.mul %g, %h : tensor<4xf32> loc("model.layers.0.mlp")
    return %d : tensor<4xf32>
  }
}

// -----

// A function without a backward (no cross_entropy_grad) keeps everything.
// SEL-LABEL: func.func @forward_only(
// SEL-NOT: kiln.recomputed
// SEL: return
// FULL-LABEL: func.func @forward_only(
// FULL-NOT: kiln.recomputed
// FULL: return
func.func @forward_only(%x: tensor<1x4x8xf32>) -> tensor<1x4x8xf32> {
  %h0 = kiln.silu %x : tensor<1x4x8xf32> loc("model.layers.0.mlp")
  %h1 = kiln.silu %h0 : tensor<1x4x8xf32> loc("model.layers.0.mlp")
  %h2 = kiln.mul %h1, %h0 : tensor<1x4x8xf32> loc("model.layers.0.mlp")
  return %h2 : tensor<1x4x8xf32>
}

// -----

// The module's mode applies when the option is not given.
// ATTR-LABEL: func.func @module_mode(
// ATTR: %[[H:.+]] = kiln.silu %{{.+}} : tensor<1x4x8xf32>
// ATTR: %[[G:.+]] = kiln.cross_entropy_grad
// ATTR-NEXT: %[[HR:.+]] = kiln.silu %{{.+}} {kiln.recomputed}
// ATTR-NEXT: kiln.silu_grad %[[G]], %[[HR]]
module attributes {kiln.activation_checkpoint = "full"} {
  func.func @module_mode(%x: tensor<1x4x8xf32>, %t: tensor<1x4xi32>, %one: tensor<f32>) -> tensor<1x4x8xf32> {
    %h = kiln.silu %x : tensor<1x4x8xf32> loc("model.layers.0.mlp")
    %g = kiln.cross_entropy_grad %one, %h, %t : tensor<1x4x8xf32>, tensor<1x4xi32> loc("loss")
    %d = kiln.silu_grad %g, %h : tensor<1x4x8xf32> loc("model.layers.0.mlp")
    return %d : tensor<1x4x8xf32>
  }
}

// -----

// The module's selective policy applies when the option is not given.
// ATTR-LABEL: func.func @module_policy(
// ATTR: kiln.cross_entropy_grad
// ATTR-NEXT: kiln.linear w1 {{.*}}kiln.recomputed
module attributes {kiln.activation_checkpoint = "selective", kiln.selective_ac = "1"} {
  func.func @module_policy(%x: tensor<1x4x8xf32>, %w: tensor<8x8xf32>, %t: tensor<1x4xi32>, %one: tensor<f32>) -> tensor<1x4x8xf32> {
    %h = kiln.linear w1 %x, %w param("w1.0") : tensor<1x4x8xf32>, tensor<8x8xf32> -> tensor<1x4x8xf32> loc("model.layers.0.mlp.gate_proj")
    %g = kiln.cross_entropy_grad %one, %h, %t : tensor<1x4x8xf32>, tensor<1x4xi32> loc("loss")
    %d = kiln.silu_grad %g, %h : tensor<1x4x8xf32> loc("model.layers.0.mlp")
    return %d : tensor<1x4x8xf32>
  }
}

// -----

// An unknown selective policy is an error.
// expected-error @+1 {{kiln-activation-checkpoint: the selective policy must be gemm, op or a positive number of blocks, got 'half'}}
module attributes {kiln.activation_checkpoint = "selective", kiln.selective_ac = "half"} {
  func.func @bad_policy(%x: tensor<1x4x8xf32>) -> tensor<1x4x8xf32> {
    return %x : tensor<1x4x8xf32>
  }
}

// -----

// An unknown mode is an error.
// expected-error @+1 {{kiln-activation-checkpoint: mode must be none, selective or full, got 'sometimes'}}
module attributes {kiln.activation_checkpoint = "sometimes"} {
  func.func @bad_mode(%x: tensor<1x4x8xf32>) -> tensor<1x4x8xf32> {
    return %x : tensor<1x4x8xf32>
  }
}
