// RUN: kiln-opt %s -split-input-file -verify-diagnostics
// One function per verifier rule, named after the rule's label in KilnOps.td.

func.func @embedding_c1(%t: tensor<64xf32>, %tok: tensor<2x16xi32>) {
  // expected-error @+1 {{'kiln.embedding' op table must have rank 2 [vocab, dim], got [64]}}
  %0 = kiln.embedding %t[%tok] param("e") : tensor<64xf32>, tensor<2x16xi32> -> tensor<2x16x64xf32>
  return
}

// -----

func.func @embedding_c2(%t: tensor<64x32xf32>, %tok: tensor<2x16xi32>) {
  // expected-error @+1 {{'kiln.embedding' op result shape must be [2, 16, 32] (tokens shape ++ [dim]), got [2, 16, 64]}}
  %0 = kiln.embedding %t[%tok] param("e") : tensor<64x32xf32>, tensor<2x16xi32> -> tensor<2x16x64xf32>
  return
}

// -----

func.func @embedding_c3(%t: tensor<64x32xf32>, %tok: tensor<2x16xi32>) {
  // expected-error @+1 {{'kiln.embedding' op result element type must be the table's ('f32'), got 'bf16'}}
  %0 = kiln.embedding %t[%tok] param("e") : tensor<64x32xf32>, tensor<2x16xi32> -> tensor<2x16x32xbf16>
  return
}

// -----

func.func @embedding_tokens_are_i32(%t: tensor<64x32xf32>, %tok: tensor<2x16xf32>) {
  // expected-error @+1 {{operand #1 must be statically shaped tensor of 32-bit signless integer values}}
  %0 = kiln.embedding %t[%tok] param("e") : tensor<64x32xf32>, tensor<2x16xf32> -> tensor<2x16x32xf32>
  return
}

// -----

func.func @rms_norm_c1(%x: tensor<2x16x32xf32>, %w: tensor<16xf32>) {
  // expected-error @+1 {{'kiln.rms_norm' op weight must have shape [32] (the last dim of the input), got [16]}}
  %0 = kiln.rms_norm %x, %w {eps = 1.0e-5 : f64} : tensor<2x16x32xf32>, tensor<16xf32>
  return
}

// -----

func.func @rms_norm_c2(%x: tensor<2x16x32xf32>, %w: tensor<32xbf16>) {
  // expected-error @+1 {{'kiln.rms_norm' op weight element type 'bf16' differs from the input's 'f32'}}
  %0 = kiln.rms_norm %x, %w {eps = 1.0e-5 : f64} : tensor<2x16x32xf32>, tensor<32xbf16>
  return
}

// -----

func.func @rms_norm_c3(%x: tensor<2x16x32xf32>, %w: tensor<32xf32>) {
  // expected-error @+1 {{'kiln.rms_norm' op eps must be positive, got 0}}
  %0 = kiln.rms_norm %x, %w {eps = 0.0 : f64} : tensor<2x16x32xf32>, tensor<32xf32>
  return
}

// -----

func.func @linear_c1(%x: tensor<32xf32>, %w: tensor<8x32xf32>) {
  // expected-error @+1 {{'kiln.linear' op input must have rank >= 2, got [32]}}
  %0 = kiln.linear wq %x, %w param("w") : tensor<32xf32>, tensor<8x32xf32> -> tensor<8xf32>
  return
}

// -----

func.func @linear_c1_weight(%x: tensor<4x32xf32>, %w: tensor<2x8x32xf32>) {
  // expected-error @+1 {{'kiln.linear' op weight must have rank 2 [out, in], got [2, 8, 32]}}
  %0 = kiln.linear wq %x, %w param("w") : tensor<4x32xf32>, tensor<2x8x32xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @linear_c2(%x: tensor<4x32xf32>, %w: tensor<8x16xf32>) {
  // expected-error @+1 {{'kiln.linear' op contraction dims differ: input [4, 32] has 32, weight [8, 16] has 16}}
  %0 = kiln.linear w1 %x, %w param("w") : tensor<4x32xf32>, tensor<8x16xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @linear_c3(%x: tensor<4x32xf32>, %w: tensor<8x32xf32>) {
  // expected-error @+1 {{'kiln.linear' op result shape must be [4, 8], got [4, 32]}}
  %0 = kiln.linear w1 %x, %w param("w") : tensor<4x32xf32>, tensor<8x32xf32> -> tensor<4x32xf32>
  return
}

// -----

func.func @linear_c4(%x: tensor<4x32xbf16>, %w: tensor<8x32xf32>) {
  // expected-error @+1 {{'kiln.linear' op input, weight and result must share one element type, got 'bf16', 'f32', 'bf16'}}
  %0 = kiln.linear w1 %x, %w param("w") : tensor<4x32xbf16>, tensor<8x32xf32> -> tensor<4x8xbf16>
  return
}

// -----

func.func @linear_unknown_role(%x: tensor<4x32xf32>, %w: tensor<8x32xf32>) {
  // expected-error @+2 {{expected ::kiln::LinearRole to be one of: wq, wk, wv, wo, w1, w2, w3, output}}
  // expected-error @+1 {{failed to parse Kiln_LinearRoleAttr parameter 'value'}}
  %0 = kiln.linear w4 %x, %w param("w") : tensor<4x32xf32>, tensor<8x32xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @rope_c1(%x: tensor<2x16x32xf32>) {
  // expected-error @+1 {{'kiln.rope' op input must have rank 4 [batch, seq, heads, head_dim], got [2, 16, 32]}}
  %0 = kiln.rope %x {theta = 10000.0 : f64} : tensor<2x16x32xf32>
  return
}

// -----

func.func @rope_c2(%x: tensor<2x16x4x7xf32>) {
  // expected-error @+1 {{'kiln.rope' op head dim must be even, got 7}}
  %0 = kiln.rope %x {theta = 10000.0 : f64} : tensor<2x16x4x7xf32>
  return
}

// -----

func.func @rope_c3(%x: tensor<2x16x4x8xf32>) {
  // expected-error @+1 {{'kiln.rope' op theta must be greater than 1, got 1}}
  %0 = kiln.rope %x {theta = 1.0 : f64} : tensor<2x16x4x8xf32>
  return
}

// -----

func.func @attention_c1(%q: tensor<2x16x32xf32>, %k: tensor<2x16x2x8xf32>) {
  // expected-error @+1 {{'kiln.attention' op query, key and value must have rank 4 [batch, seq, heads, head_dim]}}
  %o, %l = kiln.attention %q, %k, %k {causal, scale = 0.35 : f64} : tensor<2x16x32xf32>, tensor<2x16x2x8xf32>, tensor<2x16x2x8xf32> -> tensor<2x4x16xf32>
  return
}

// -----

func.func @attention_scale_c1(%q: tensor<2x16x4x8xf32>, %k: tensor<2x16x2x8xf32>) {
  // expected-error @+1 {{'kiln.attention' op scale must be in (0, 1e4], got nan}}
  %o, %l = kiln.attention %q, %k, %k {causal, scale = 0x7FF8000000000000 : f64} : tensor<2x16x4x8xf32>, tensor<2x16x2x8xf32>, tensor<2x16x2x8xf32> -> tensor<2x4x16xf32>
  return
}

// -----

func.func @attention_scale_c1_huge(%q: tensor<2x16x4x8xf32>, %k: tensor<2x16x2x8xf32>) {
  // expected-error @+1 {{'kiln.attention' op scale must be in (0, 1e4], got 1.000000e+308}}
  %o, %l = kiln.attention %q, %k, %k {causal, scale = 1.0e308 : f64} : tensor<2x16x4x8xf32>, tensor<2x16x2x8xf32>, tensor<2x16x2x8xf32> -> tensor<2x4x16xf32>
  return
}

// -----

func.func @attention_c2(%q: tensor<2x16x4x8xf32>, %k: tensor<2x16x2x8xf32>, %v: tensor<2x16x1x8xf32>) {
  // expected-error @+1 {{'kiln.attention' op key [2, 16, 2, 8] and value [2, 16, 1, 8] must have one type}}
  %o, %l = kiln.attention %q, %k, %v {causal, scale = 0.35 : f64} : tensor<2x16x4x8xf32>, tensor<2x16x2x8xf32>, tensor<2x16x1x8xf32> -> tensor<2x4x16xf32>
  return
}

// -----

func.func @attention_c3(%q: tensor<2x16x4x8xf32>, %k: tensor<2x16x2x16xf32>) {
  // expected-error @+1 {{'kiln.attention' op query [2, 16, 4, 8] and key [2, 16, 2, 16] must agree in batch and head dim}}
  %o, %l = kiln.attention %q, %k, %k {causal, scale = 0.35 : f64} : tensor<2x16x4x8xf32>, tensor<2x16x2x16xf32>, tensor<2x16x2x16xf32> -> tensor<2x4x16xf32>
  return
}

// -----

func.func @attention_c4(%q: tensor<2x16x4x8xf32>, %k: tensor<2x16x3x8xf32>) {
  // expected-error @+1 {{'kiln.attention' op key/value heads (3) must divide query heads (4)}}
  %o, %l = kiln.attention %q, %k, %k {causal, scale = 0.35 : f64} : tensor<2x16x4x8xf32>, tensor<2x16x3x8xf32>, tensor<2x16x3x8xf32> -> tensor<2x4x16xf32>
  return
}

// -----

func.func @attention_c5(%q: tensor<2x16x4x8xf32>, %k: tensor<2x8x2x8xf32>) {
  // expected-error @+1 {{'kiln.attention' op causal attention needs equal query and key sequence lengths, got 16 and 8}}
  %o, %l = kiln.attention %q, %k, %k {causal, scale = 0.35 : f64} : tensor<2x16x4x8xf32>, tensor<2x8x2x8xf32>, tensor<2x8x2x8xf32> -> tensor<2x4x16xf32>
  return
}

// -----

func.func @attention_c6(%q: tensor<2x16x4x8xf32>, %k: tensor<2x16x2x8xf32>) {
  // expected-error @+1 {{'kiln.attention' op logsumexp must be tensor of shape [2, 4, 16] [batch, heads, seq] and f32, got 'tensor<2x16x4xf32>'}}
  %o, %l = kiln.attention %q, %k, %k {causal, scale = 0.35 : f64} : tensor<2x16x4x8xf32>, tensor<2x16x2x8xf32>, tensor<2x16x2x8xf32> -> tensor<2x16x4xf32>
  return
}

// -----

func.func @attention_c7(%q: tensor<2x16x4x8xbf16>, %k: tensor<2x16x2x8xf32>) {
  // expected-error @+1 {{'kiln.attention' op query and key element types differ: 'bf16' vs 'f32'}}
  %o, %l = kiln.attention %q, %k, %k {causal, scale = 0.35 : f64} : tensor<2x16x4x8xbf16>, tensor<2x16x2x8xf32>, tensor<2x16x2x8xf32> -> tensor<2x4x16xf32>
  return
}

// -----

// expected-note @+1 {{prior use here}}
func.func @elementwise_same_type(%a: tensor<4x8xf32>, %b: tensor<4x8xbf16>) {
  // expected-error @+1 {{use of value '%b' expects different type than prior uses: 'tensor<4x8xf32>' vs 'tensor<4x8xbf16>'}}
  %0 = kiln.add %a, %b : tensor<4x8xf32>
  return
}

// -----

func.func @elementwise_static_shapes(%a: tensor<?x8xf32>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of 64-bit float or 32-bit float or bfloat16 type or 16-bit float values}}
  %0 = kiln.silu %a : tensor<?x8xf32>
  return
}

// -----

func.func @reshape_c1(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'kiln.reshape' op element type changes from 'f32' to 'bf16'}}
  %0 = kiln.reshape %a : tensor<4x8xf32> -> tensor<32xbf16>
  return
}

// -----

func.func @reshape_c2(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'kiln.reshape' op element count changes: [4, 8] has 32, [4, 4] has 16}}
  %0 = kiln.reshape %a : tensor<4x8xf32> -> tensor<4x4xf32>
  return
}

// -----

func.func @transpose_c1(%a: tensor<4x8x2xf32>) {
  // expected-error @+1 {{'kiln.transpose' op permutation must be a permutation of [0, 3)}}
  %0 = kiln.transpose %a [0, 0, 1] : tensor<4x8x2xf32> -> tensor<4x4x8xf32>
  return
}

// -----

func.func @transpose_c2(%a: tensor<4x8x2xf32>) {
  // expected-error @+1 {{'kiln.transpose' op result must be 'tensor<8x4x2xf32>', got 'tensor<4x8x2xf32>'}}
  %0 = kiln.transpose %a [1, 0, 2] : tensor<4x8x2xf32> -> tensor<4x8x2xf32>
  return
}

// -----

func.func @cross_entropy_c1(%l: tensor<2x16x64xf32>, %t: tensor<2x8xi32>) {
  // expected-error @+1 {{'kiln.cross_entropy' op logits [2, 16, 64] must be targets' shape [2, 8] plus a vocab dim}}
  %0 = kiln.cross_entropy %l, %t : tensor<2x16x64xf32>, tensor<2x8xi32> -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_c2(%l: tensor<2x16x64xf32>, %t: tensor<2x16xi32>) {
  // expected-error @+1 {{'kiln.cross_entropy' op result must be tensor<f32>, got 'tensor<1xf32>'}}
  %0 = kiln.cross_entropy %l, %t : tensor<2x16x64xf32>, tensor<2x16xi32> -> tensor<1xf32>
  return
}

// -----

// expected-error @+1 {{'func.func' op argument 0: 'kiln.param' must be a non-empty string}}
func.func @param_attr_is_string(%a: tensor<4xf32> {kiln.param = 3 : i64}) {
  return
}

// -----

// expected-error @+1 {{'func.func' op argument 0: 'kiln.shard' is not an attribute of the kiln dialect}}
func.func @unknown_arg_attr(%a: tensor<4xf32> {kiln.shard = "x"}) {
  return
}

// -----

// expected-error @+1 {{init std must be positive and finite, got -1}}
func.func @init_std_positive(%a: tensor<4xf32> {kiln.init = #kiln.init<normal, std = -1.0>}) {
  return
}

// -----

// expected-error @+1 {{trunc_normal bounds must satisfy a < b, got a = 2.000000e+00, b = -2.000000e+00}}
func.func @init_bounds_ordered(%a: tensor<4xf32> {kiln.init = #kiln.init<trunc_normal, std = 1.0, a = 2.0, b = -2.0>}) {
  return
}

// -----

// expected-error @+1 {{unknown initialiser 'uniform'; expected zeros, ones, normal or trunc_normal}}
func.func @init_unknown_kind(%a: tensor<4xf32> {kiln.init = #kiln.init<uniform>}) {
  return
}

// -----

func.func @embedding_grad_c1(%g: tensor<2x8x32xf32>, %tok: tensor<2x16xi32>) {
  // expected-error @+1 {{'kiln.embedding_grad' op grad shape must be tokens' shape plus [dim], got [2, 8, 32] for tokens [2, 16]}}
  %0 = kiln.embedding_grad %g, %tok param("e") : tensor<2x8x32xf32>, tensor<2x16xi32> -> tensor<64x32xf32>
  return
}

// -----

func.func @embedding_grad_c2(%g: tensor<2x16x32xf32>, %tok: tensor<2x16xi32>) {
  // expected-error @+1 {{'kiln.embedding_grad' op result must be [vocab, 32] of 'f32', got 'tensor<64x16xf32>'}}
  %0 = kiln.embedding_grad %g, %tok param("e") : tensor<2x16x32xf32>, tensor<2x16xi32> -> tensor<64x16xf32>
  return
}

// -----

// The sums may be kept in f32, never rounded below the grad's dtype.
func.func @embedding_grad_c2_narrower(%g: tensor<2x16x32xf32>, %tok: tensor<2x16xi32>) {
  // expected-error @+1 {{'kiln.embedding_grad' op result must be [vocab, 32] of 'f32', got 'tensor<64x32xbf16>'}}
  %0 = kiln.embedding_grad %g, %tok param("e") : tensor<2x16x32xf32>, tensor<2x16xi32> -> tensor<64x32xbf16>
  return
}

// -----

func.func @embedding_grad_c2_other_type(%g: tensor<2x16x32xbf16>, %tok: tensor<2x16xi32>) {
  // expected-error @+1 {{'kiln.embedding_grad' op result must be [vocab, 32] of 'bf16' or f32, got 'tensor<64x32xf16>'}}
  %0 = kiln.embedding_grad %g, %tok param("e") : tensor<2x16x32xbf16>, tensor<2x16xi32> -> tensor<64x32xf16>
  return
}

// -----

func.func @linear_grad_input_c1(%g: tensor<4x8xf32>, %w: tensor<16x32xf32>) {
  // expected-error @+1 {{'kiln.linear_grad_input' op grad [4, 8] must end in dim 0 of weight [16, 32]}}
  %0 = kiln.linear_grad_input wq %g, %w param("w") : tensor<4x8xf32>, tensor<16x32xf32> -> tensor<4x32xf32>
  return
}

// -----

func.func @linear_grad_input_c2(%g: tensor<4x16xf32>, %w: tensor<16x32xf32>) {
  // expected-error @+1 {{'kiln.linear_grad_input' op result must be [4, 32] with grad, weight and result of one element type}}
  %0 = kiln.linear_grad_input wq %g, %w param("w") : tensor<4x16xf32>, tensor<16x32xf32> -> tensor<4x16xf32>
  return
}

// -----

func.func @linear_grad_weight_c1(%g: tensor<4x16xf32>, %x: tensor<8x32xf32>) {
  // expected-error @+1 {{'kiln.linear_grad_weight' op grad [4, 16] and input [8, 32] must agree in their leading dims}}
  %0 = kiln.linear_grad_weight wq %g, %x param("w") : tensor<4x16xf32>, tensor<8x32xf32> -> tensor<16x32xf32>
  return
}

// -----

func.func @linear_grad_weight_c2(%g: tensor<4x16xf32>, %x: tensor<4x32xf32>) {
  // expected-error @+1 {{'kiln.linear_grad_weight' op result must be [16, 32] with grad, input and result of one element type}}
  %0 = kiln.linear_grad_weight wq %g, %x param("w") : tensor<4x16xf32>, tensor<4x32xf32> -> tensor<32x16xf32>
  return
}

// -----

func.func @attention_grad_rules(%q: tensor<2x16x4x8xf32>, %k: tensor<2x16x3x8xf32>, %lse: tensor<2x4x16xf32>) {
  // expected-error @+1 {{'kiln.attention_grad' op key/value heads (3) must divide query heads (4)}}
  %dq, %dk, %dv = kiln.attention_grad %q, %q, %k, %k, %q, %lse {causal, scale = 0.35 : f64} : tensor<2x16x4x8xf32>, tensor<2x16x4x8xf32>, tensor<2x16x3x8xf32>, tensor<2x16x3x8xf32>, tensor<2x4x16xf32>
  return
}

// -----

func.func @lr_schedule_c1(%s: tensor<i64>) {
  // expected-error @+1 {{'kiln.lr_schedule' op decay must be cosine or constant, got 'linear'}}
  %0 = kiln.lr_schedule %s {decay = "linear", min_lr = 0.0 : f64, peak = 1.0e-3 : f64, total_steps = 10 : i64, warmup_steps = 1 : i64}
  return
}

// -----

func.func @adamw_c1(%p: tensor<8xf32>, %n: tensor<f32>, %s: tensor<i64>) {
  // expected-error @+1 {{'kiln.adamw' op betas must be in [0, 1), got 9.000000e-01, 1.000000e+00}}
  %0, %1, %2 = kiln.adamw %p, %p, %p, %p, %n, %n, %s {beta1 = 0.9 : f64, beta2 = 1.0 : f64, eps = 1.0e-8 : f64, max_norm = 1.0 : f64, weight_decay = 0.1 : f64} : tensor<8xf32>
  return
}

// -----

func.func @grad_norm_needs_operands() {
  // expected-error @+1 {{'kiln.grad_norm' op needs at least one gradient}}
  %0 = "kiln.grad_norm"() : () -> tensor<f32>
  return
}

// -----

// expected-error @+1 {{'func.func' op result 0: 'kiln.gradient' is not an attribute of the kiln dialect}}
func.func @unknown_result_attr(%a: tensor<4xf32>) -> (tensor<4xf32> {kiln.gradient = "a"}) {
  return %a : tensor<4xf32>
}

// -----

func.func @fused_group_c1(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'kiln.fused_group' op block arguments must have the types of the inputs}}
  %0 = kiln.fused_group(%a) : (tensor<4x8xf32>) -> (tensor<4x8xf32>) {
  ^bb0(%x: tensor<4x8xbf16>):
    %1 = kiln.cast %x : tensor<4x8xbf16> -> tensor<4x8xf32>
    kiln.yield %1 : tensor<4x8xf32>
  }
  return
}

// -----

func.func @fused_group_c2(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'kiln.fused_group' op kiln.yield must have the types of the results}}
  %0 = kiln.fused_group(%a) : (tensor<4x8xf32>) -> (tensor<4x8xbf16>) {
  ^bb0(%x: tensor<4x8xf32>):
    %1 = kiln.silu %x : tensor<4x8xf32>
    kiln.yield %1 : tensor<4x8xf32>
  }
  return
}

// -----

func.func @fused_group_c3(%a: tensor<4x8xf32>, %w: tensor<8x8xf32>) {
  // expected-error @+1 {{'kiln.fused_group' op cannot fuse 'kiln.linear'}}
  %0 = kiln.fused_group(%a, %w) : (tensor<4x8xf32>, tensor<8x8xf32>) -> (tensor<4x8xf32>) {
  ^bb0(%x: tensor<4x8xf32>, %y: tensor<8x8xf32>):
    %1 = kiln.linear wq %x, %y param("q") : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
    kiln.yield %1 : tensor<4x8xf32>
  }
  return
}

// -----

func.func @fused_group_c3_space(%a: tensor<4x8xf32>, %b: tensor<2x16xf32>) {
  %0 = kiln.fused_group(%a, %b) : (tensor<4x8xf32>, tensor<2x16xf32>) -> (tensor<2x16xf32>) {
  ^bb0(%x: tensor<4x8xf32>, %y: tensor<2x16xf32>):
    %1 = kiln.silu %x : tensor<4x8xf32>
    // expected-error @+1 {{'kiln.silu' op iterates over 2x16 points, the group over 4x8}}
    %2 = kiln.silu %y : tensor<2x16xf32>
    kiln.yield %2 : tensor<2x16xf32>
  }
  return
}

// -----

func.func @fused_group_c3_terminal(%a: tensor<8x8xf32>) {
  %0 = kiln.fused_group(%a) : (tensor<8x8xf32>) -> (tensor<8x8xf32>) {
  ^bb0(%x: tensor<8x8xf32>):
    %1 = kiln.transpose %x [1, 0] : tensor<8x8xf32> -> tensor<8x8xf32>
    // expected-error @+1 {{'kiln.silu' op reads a value of its own group that exists only after the group has run}}
    %2 = kiln.silu %1 : tensor<8x8xf32>
    kiln.yield %2 : tensor<8x8xf32>
  }
  return
}

// -----

func.func @all_gather_start_c1(%s: tensor<8xbf16>) {
  // expected-error @+1 {{'kiln.all_gather_start' op shard and buffer must be rank-1 tensors of one element type, the buffer 2 times as long; got 'tensor<8xbf16>' and 'tensor<8xbf16>'}}
  %0 = kiln.all_gather_start %s over dp_shard {group = "g", ranks = 2 : i64} : tensor<8xbf16> -> tensor<8xbf16>
  %1 = kiln.wait %0 : tensor<8xbf16>
  return
}

// -----

func.func @all_gather_start_c2(%s: tensor<8xbf16>) {
  // expected-error @+1 {{'kiln.all_gather_start' op result must have one user, a kiln.wait}}
  %0 = kiln.all_gather_start %s over dp_shard {group = "g", ranks = 2 : i64} : tensor<8xbf16> -> tensor<16xbf16>
  return
}

// -----

func.func @reduce_scatter_start_c2(%s: tensor<16xf32>) {
  // expected-error @+1 {{'kiln.reduce_scatter_start' op reduction must be 'sum' or 'mean', got 'max'}}
  %0 = kiln.reduce_scatter_start %s over dp_shard {group = "g", ranks = 2 : i64, reduction = "max"} : tensor<16xf32> -> tensor<8xf32>
  %1 = kiln.wait %0 : tensor<8xf32>
  return
}

// -----

func.func @unflatten_c1(%f: tensor<16xbf16>) {
  // expected-error @+1 {{'kiln.unflatten' op slice [12, 20) lies outside the buffer of 16}}
  %0 = kiln.unflatten %f[12] : tensor<16xbf16> -> tensor<2x4xbf16>
  return
}

// -----

func.func @flatten_c1(%a: tensor<4xf32>, %b: tensor<2x2xf32>) {
  // expected-error @+1 {{'kiln.flatten' op parts overlap}}
  %0 = kiln.flatten %a, %b [0, 2] : tensor<4xf32>, tensor<2x2xf32> -> tensor<8xf32>
  return
}

// -----

// #kiln.float8 and #kiln.fp8_choice: one case per rule of KilnAttrs.td.

// expected-error @+1 {{float8.filter_fqns: the pattern '(' does not compile}}
module @float8_c1 attributes {kiln.float8 = #kiln.float8<recipe = tensorwise, filter_fqns = ["("]>} {
}

// -----

// expected-error @+1 {{float8.filter_fqns must hold strings, not 3 : i64}}
module @float8_c1_strings attributes {kiln.float8 = #kiln.float8<recipe = tensorwise, filter_fqns = [3]>} {
}

// -----

// expected-error @+1 {{float8.enable_fsdp_float8_all_gather needs recipe = "tensorwise" (the rowwise recipe's scales are not one per tensor, so a shard cannot be cast before the gather)}}
module @float8_c2 attributes {kiln.float8 = #kiln.float8<recipe = rowwise, enable_fsdp_float8_all_gather = true>} {
}

// -----

// expected-error @+1 {{float8.enable_fsdp_float8_all_gather needs recipe = "tensorwise" (the delayed recipe's}}
module @float8_c2_delayed attributes {kiln.float8 = #kiln.float8<recipe = delayed, enable_fsdp_float8_all_gather = true>} {
}

// -----

// expected-error @+1 {{float8.amax_history_len must lie in [1, 1024], got 0}}
module @float8_c3 attributes {kiln.float8 = #kiln.float8<recipe = delayed, amax_history_len = 0>} {
}

// -----

// expected-error @+1 {{float8.amax_history_len must lie in [1, 1024], got 1025}}
module @float8_c3_high attributes {kiln.float8 = #kiln.float8<recipe = delayed, amax_history_len = 1025>} {
}

// -----

// expected-error @+1 {{unknown FP8 recipe 'blockwise'; expected tensorwise, rowwise or delayed}}
module @float8_recipe attributes {kiln.float8 = #kiln.float8<recipe = blockwise>} {
}

// -----

// expected-error @+1 {{#kiln.float8 needs a recipe}}
module @float8_no_recipe attributes {kiln.float8 = #kiln.float8<amax_history_len = 4>} {
}

// -----

// expected-error @+1 {{'recipe' given twice}}
module @float8_twice attributes {kiln.float8 = #kiln.float8<recipe = rowwise, recipe = tensorwise>} {
}

// -----

// expected-error @+1 {{unknown #kiln.float8 field 'all_gather'}}
module @float8_field attributes {kiln.float8 = #kiln.float8<recipe = tensorwise, all_gather = true>} {
}

// -----

func.func @fp8_choice_c1(%x: tensor<16x16xbf16>, %w: tensor<16x16xbf16>) {
  // expected-error @+1 {{#kiln.fp8_choice: a pattern goes with the reason 'filtered' and no other}}
  %0 = kiln.linear wq %x, %w param("q") {fp8 = #kiln.fp8_choice<bf16, filtered>} : tensor<16x16xbf16>, tensor<16x16xbf16> -> tensor<16x16xbf16>
  return
}

// -----

func.func @fp8_choice_c1_extra(%x: tensor<16x16xbf16>, %w: tensor<16x16xbf16>) {
  // expected-error @+1 {{#kiln.fp8_choice: a pattern goes with the reason 'filtered' and no other}}
  %0 = kiln.linear wq %x, %w param("q") {fp8 = #kiln.fp8_choice<bf16, small_gemm = "q">} : tensor<16x16xbf16>, tensor<16x16xbf16> -> tensor<16x16xbf16>
  return
}

// -----

func.func @fp8_choice_c2(%x: tensor<16x16xbf16>, %w: tensor<16x16xbf16>) {
  // expected-error @+1 {{'small_gemm' is a reason for bf16, not fp8}}
  %0 = kiln.linear wq %x, %w param("q") {fp8 = #kiln.fp8_choice<fp8, small_gemm>} : tensor<16x16xbf16>, tensor<16x16xbf16> -> tensor<16x16xbf16>
  return
}

// -----

func.func @fp8_choice_c2_bf16(%x: tensor<16x16xbf16>, %w: tensor<16x16xbf16>) {
  // expected-error @+1 {{bf16 needs its reason: output_projection, not_divisible_by_16, filtered or small_gemm}}
  %0 = kiln.linear wq %x, %w param("q") {fp8 = #kiln.fp8_choice<bf16>} : tensor<16x16xbf16>, tensor<16x16xbf16> -> tensor<16x16xbf16>
  return
}

// -----

func.func @scaled_matmul_fast_accumulation(%a: tensor<16x16xf8E4M3FN>, %s: tensor<f32>) {
  // expected-error @+1 {{'kiln.scaled_matmul' op requires attribute 'fast_accumulation'}}
  %0 = kiln.scaled_matmul "output" wq %a, %s, %a, %s param("q") : tensor<16x16xf8E4M3FN>, tensor<f32>, tensor<16x16xf8E4M3FN>, tensor<f32> -> tensor<16x16xbf16>
  return
}

// -----

// #kiln.mesh: one case per rule of KilnAttrs.td, then where it may be.

// expected-error @+1 {{#kiln.mesh: pp, dp_shard and tp must be at least 1, got pp = 1, dp_shard = 0, tp = 2}}
module @mesh_c1 attributes {kiln.mesh = #kiln.mesh<dp_shard = 0, tp = 2>} {
}

// -----

// expected-error @+1 {{#kiln.mesh: pp, dp_shard and tp must be at least 1, got pp = 1, dp_shard = 2, tp = -1}}
module @mesh_c1_tp attributes {kiln.mesh = #kiln.mesh<dp_shard = 2, tp = -1>} {
}

// -----

// expected-error @+1 {{#kiln.mesh: pp x dp_shard x tp (1 x 65536 x 65536) must be below 2^31 ranks}}
module @mesh_c2 attributes {kiln.mesh = #kiln.mesh<dp_shard = 65536, tp = 65536>} {
}

// -----

// dp_shard and tp are required (pp may be left out: 1).
// expected-error @+1 {{struct is missing required parameter: tp}}
module @mesh_missing_axis attributes {kiln.mesh = #kiln.mesh<dp_shard = 2>} {
}

// -----

// expected-error @+1 {{'kiln.mesh' must be a #kiln.mesh attribute}}
module @mesh_not_a_mesh attributes {kiln.mesh = {dp_shard = 2 : i64, tp = 1 : i64}} {
}

// -----

// expected-error @+1 {{'func.func' op 'kiln.mesh' belongs on a module}}
func.func @mesh_on_a_function() attributes {kiln.mesh = #kiln.mesh<dp_shard = 2, tp = 1>} {
  return
}

// -----

// collective_axis: a collective's ranks are its axis's size in the mesh.
module @collective_axis attributes {kiln.mesh = #kiln.mesh<dp_shard = 2, tp = 4>} {
  func.func @gather_over_tp(%s: tensor<8xbf16>) {
    // expected-error @+1 {{'kiln.all_gather_start' op runs over 2 ranks, but the mesh's tp axis has 4 (#kiln.mesh<dp_shard = 2, tp = 4>)}}
    %0 = kiln.all_gather_start %s over tp {group = "g", ranks = 2 : i64} : tensor<8xbf16> -> tensor<16xbf16>
    %1 = kiln.wait %0 : tensor<16xbf16>
    return
  }
}

// -----

module @collective_axis_rs attributes {kiln.mesh = #kiln.mesh<dp_shard = 2, tp = 4>} {
  func.func @scatter_over_dp(%s: tensor<32xf32>) {
    // expected-error @+1 {{'kiln.reduce_scatter_start' op runs over 4 ranks, but the mesh's dp_shard axis has 2}}
    %0 = kiln.reduce_scatter_start %s over dp_shard {group = "g", ranks = 4 : i64, reduction = "sum"} : tensor<32xf32> -> tensor<8xf32>
    %1 = kiln.wait %0 : tensor<8xf32>
    return
  }
}

// -----

module @collective_axis_ar attributes {kiln.mesh = #kiln.mesh<dp_shard = 2, tp = 4>} {
  func.func @reduce_over_tp(%s: tensor<4xf32>) {
    // expected-error @+1 {{'kiln.all_reduce_start' op runs over 2 ranks, but the mesh's tp axis has 4}}
    %0 = kiln.all_reduce_start %s over tp {ranks = 2 : i64, reduction = "max"} : tensor<4xf32>
    %1 = kiln.wait %0 : tensor<4xf32>
    return
  }
}

// -----

func.func @collective_axis_unknown(%s: tensor<4xf32>) {
  // expected-error @+2 {{expected ::kiln::MeshAxis to be one of: dp_shard, tp, pp}}
  // expected-error @+1 {{failed to parse Kiln_MeshAxisAttr parameter 'value'}}
  %0 = kiln.all_reduce_start %s over ep {ranks = 2 : i64, reduction = "max"} : tensor<4xf32>
  return
}

// -----

module @send_recv attributes {kiln.mesh = #kiln.mesh<dp_shard = 1, tp = 4>} {
  func.func @shift_out_of_range(%s: tensor<4xf32>) {
    // expected-error @+1 {{'kiln.send_recv_start' op shift must be in [1, ranks) with ranks >= 2, got shift 4 of 4}}
    %0 = kiln.send_recv_start %s over tp {ranks = 4 : i64, shift = 4 : i64} : tensor<4xf32>
    %1 = kiln.wait %0 : tensor<4xf32>
    return
  }
}

// -----

module @send_recv_axis attributes {kiln.mesh = #kiln.mesh<dp_shard = 2, tp = 4>} {
  func.func @wrong_ranks(%s: tensor<4xf32>) {
    // expected-error @+1 {{'kiln.send_recv_start' op runs over 2 ranks, but the mesh's tp axis has 4}}
    %0 = kiln.send_recv_start %s over tp {ranks = 2 : i64, shift = 1 : i64} : tensor<4xf32>
    %1 = kiln.wait %0 : tensor<4xf32>
    return
  }
}

// -----

func.func @send_recv_rank2(%s: tensor<2x2xf32>) {
  // expected-error @+1 {{'kiln.send_recv_start' op buffer must be rank 1, got 'tensor<2x2xf32>'}}
  %0 = kiln.send_recv_start %s over tp {ranks = 2 : i64, shift = 1 : i64} : tensor<2x2xf32>
  %1 = kiln.wait %0 : tensor<2x2xf32>
  return
}

// -----

func.func @index_to_float_c1(%t: tensor<2x8xi32>) {
  // expected-error @+1 {{'kiln.index_to_float' op shape changes from [2, 8] to [16]}}
  %0 = kiln.index_to_float %t : tensor<2x8xi32> -> tensor<16xf32>
  return
}

// -----

func.func @vocab_parallel_c1(%l: tensor<2x8x16xf32>) {
  // expected-error @+1 {{'kiln.vocab_parallel_max' op vocab_start 32 must lie in [0, vocab_size = 30)}}
  %0 = kiln.vocab_parallel_max %l {vocab_start = 32 : i64, vocab_size = 30 : i64} : tensor<2x8x16xf32> -> tensor<2x8xf32>
  return
}

// -----

func.func @vocab_parallel_c2(%l: tensor<2x8x16xf32>, %m: tensor<2x8xf32>, %t: tensor<2x4xf32>) {
  // expected-error @+1 {{'kiln.vocab_parallel_stats' op operand [2, 4] must be the logits' shape [2, 8, 16] without the vocabulary dim}}
  %0 = kiln.vocab_parallel_stats %l, %m, %t {vocab_start = 16 : i64, vocab_size = 32 : i64} : tensor<2x8x16xf32>, tensor<2x8xf32>, tensor<2x4xf32> -> tensor<2x8x2xf32>
  return
}

// -----

func.func @vocab_parallel_loss_c1(%s: tensor<2x8x3xf32>, %m: tensor<2x8xf32>) {
  // expected-error @+1 {{'kiln.vocab_parallel_loss' op statistics [2, 8, 3] must be [2, 8] plus [2]}}
  %0 = kiln.vocab_parallel_loss %s, %m : tensor<2x8x3xf32>, tensor<2x8xf32>
  return
}

// -----

func.func @divide_c1(%g: tensor<4x8xf32>) {
  // expected-error @+1 {{'kiln.divide' op divides by a whole number of at least 1, got 0}}
  %0 = kiln.divide %g by 0 : tensor<4x8xf32>
  return
}


// -----

func.func @embedding_c4(%e: tensor<8x4xf32>, %t: tensor<6xi32>) {
  // expected-error @+1 {{'kiln.embedding' op vocab_start and vocab_size go together}}
  %0 = kiln.embedding %e[%t] param("e") {vocab_start = 8 : i64} : tensor<8x4xf32>, tensor<6xi32> -> tensor<6x4xf32>
  return
}

// -----

func.func @embedding_grad_c3(%g: tensor<6x4xf32>, %t: tensor<6xi32>) {
  // expected-error @+1 {{'kiln.embedding_grad' op vocab_start 16 must lie in [0, vocab_size = 16)}}
  %0 = kiln.embedding_grad %g, %t param("e") {vocab_start = 16 : i64, vocab_size = 16 : i64} : tensor<6x4xf32>, tensor<6xi32> -> tensor<8x4xf32>
  return
}
