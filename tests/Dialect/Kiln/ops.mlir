// RUN: kiln-opt %s | FileCheck %s
// Round trip: the printed form parses back to the same IR.
// RUN: kiln-opt %s | kiln-opt | FileCheck %s
// RUN: kiln-opt %s -mlir-print-op-generic | kiln-opt | FileCheck %s

// CHECK-LABEL: func.func @block
// CHECK-SAME: kiln.init = #kiln.init<normal, std = 1.000000e+00>
// CHECK-SAME: kiln.param = "model.embed_tokens.weight"
// CHECK-SAME: kiln.init = #kiln.init<trunc_normal, std = 2.000000e-02, a = -2.000000e+00, b = 2.000000e+00>
// CHECK-SAME: kiln.init = #kiln.init<ones>
func.func @block(%tokens: tensor<2x16xi32> {kiln.input = "tokens"},
                 %targets: tensor<2x16xi32> {kiln.input = "targets"},
                 %table: tensor<64x32xf32> {kiln.param = "model.embed_tokens.weight", kiln.init = #kiln.init<normal, std = 1.0>},
                 %wq: tensor<32x32xf32> {kiln.param = "wq", kiln.init = #kiln.init<trunc_normal, std = 0.02, a = -2.0, b = 2.0>},
                 %wk: tensor<16x32xf32>, %wv: tensor<16x32xf32>,
                 %norm: tensor<32xf32> {kiln.param = "norm", kiln.init = #kiln.init<ones>},
                 %w1: tensor<48x32xf32>, %w2: tensor<32x48xf32>) -> tensor<f32> {
  // CHECK: %[[H:.+]] = kiln.embedding %{{.+}}[%{{.+}}] param("model.embed_tokens.weight") : tensor<64x32xf32>, tensor<2x16xi32> -> tensor<2x16x32xf32>
  %h = kiln.embedding %table[%tokens] param("model.embed_tokens.weight") : tensor<64x32xf32>, tensor<2x16xi32> -> tensor<2x16x32xf32>
  // CHECK: %[[N:.+]] = kiln.rms_norm %[[H]], %{{.+}} {eps = 1.000000e-05 : f64} : tensor<2x16x32xf32>, tensor<32xf32>
  %n = kiln.rms_norm %h, %norm {eps = 1.0e-5 : f64} : tensor<2x16x32xf32>, tensor<32xf32>
  // CHECK: kiln.linear wq %[[N]], %{{.+}} param("wq") : tensor<2x16x32xf32>, tensor<32x32xf32> -> tensor<2x16x32xf32>
  %q = kiln.linear wq %n, %wq param("wq") : tensor<2x16x32xf32>, tensor<32x32xf32> -> tensor<2x16x32xf32>
  // CHECK: kiln.linear wk
  %k = kiln.linear wk %n, %wk param("wk") : tensor<2x16x32xf32>, tensor<16x32xf32> -> tensor<2x16x16xf32>
  // CHECK: kiln.linear wv
  %v = kiln.linear wv %n, %wv param("wv") : tensor<2x16x32xf32>, tensor<16x32xf32> -> tensor<2x16x16xf32>
  // CHECK: kiln.reshape %{{.+}} : tensor<2x16x32xf32> -> tensor<2x16x4x8xf32>
  %q4 = kiln.reshape %q : tensor<2x16x32xf32> -> tensor<2x16x4x8xf32>
  %k4 = kiln.reshape %k : tensor<2x16x16xf32> -> tensor<2x16x2x8xf32>
  %v4 = kiln.reshape %v : tensor<2x16x16xf32> -> tensor<2x16x2x8xf32>
  // CHECK: kiln.rope %{{.+}} {theta = 5.000000e+05 : f64} : tensor<2x16x4x8xf32>
  %qr = kiln.rope %q4 {theta = 500000.0 : f64} : tensor<2x16x4x8xf32>
  %kr = kiln.rope %k4 {theta = 500000.0 : f64} : tensor<2x16x2x8xf32>
  // CHECK: %[[O:.+]], %[[LSE:.+]] = kiln.attention %{{.+}}, %{{.+}}, %{{.+}} {causal, scale = 3.535500e-01 : f64} : tensor<2x16x4x8xf32>, tensor<2x16x2x8xf32>, tensor<2x16x2x8xf32> -> tensor<2x4x16xf32>
  %o, %lse = kiln.attention %qr, %kr, %v4 {causal, scale = 0.35355 : f64} : tensor<2x16x4x8xf32>, tensor<2x16x2x8xf32>, tensor<2x16x2x8xf32> -> tensor<2x4x16xf32>
  // CHECK: kiln.transpose %[[O]] [0, 2, 1, 3] : tensor<2x16x4x8xf32> -> tensor<2x4x16x8xf32>
  %t = kiln.transpose %o [0, 2, 1, 3] : tensor<2x16x4x8xf32> -> tensor<2x4x16x8xf32>
  %t2 = kiln.transpose %t [0, 2, 1, 3] : tensor<2x4x16x8xf32> -> tensor<2x16x4x8xf32>
  %o3 = kiln.reshape %t2 : tensor<2x16x4x8xf32> -> tensor<2x16x32xf32>
  // CHECK: kiln.add %[[H]], %{{.+}} : tensor<2x16x32xf32>
  %r = kiln.add %h, %o3 : tensor<2x16x32xf32>
  // CHECK: kiln.linear w1
  %g = kiln.linear w1 %r, %w1 param("w1") : tensor<2x16x32xf32>, tensor<48x32xf32> -> tensor<2x16x48xf32>
  // CHECK: kiln.silu %{{.+}} : tensor<2x16x48xf32>
  %s = kiln.silu %g : tensor<2x16x48xf32>
  // CHECK: kiln.mul %{{.+}}, %{{.+}} : tensor<2x16x48xf32>
  %m = kiln.mul %s, %g : tensor<2x16x48xf32>
  // CHECK: kiln.linear w2
  %d = kiln.linear w2 %m, %w2 param("w2") : tensor<2x16x48xf32>, tensor<32x48xf32> -> tensor<2x16x32xf32>
  // CHECK: kiln.linear output %{{.+}}, %{{.+}} param("model.embed_tokens.weight")
  %logits = kiln.linear output %d, %table param("model.embed_tokens.weight") : tensor<2x16x32xf32>, tensor<64x32xf32> -> tensor<2x16x64xf32>
  // CHECK: kiln.cross_entropy %{{.+}}, %{{.+}} : tensor<2x16x64xf32>, tensor<2x16xi32> -> tensor<f32>
  %loss = kiln.cross_entropy %logits, %targets : tensor<2x16x64xf32>, tensor<2x16xi32> -> tensor<f32>
  return %loss : tensor<f32>
}

// Every role prints and parses.
// CHECK-LABEL: func.func @roles
func.func @roles(%x: tensor<4x8xbf16>, %w: tensor<8x8xbf16>) {
  // CHECK: kiln.linear wo
  // CHECK: kiln.linear w3
  // CHECK: kiln.linear output
  %0 = kiln.linear wo %x, %w param("a") : tensor<4x8xbf16>, tensor<8x8xbf16> -> tensor<4x8xbf16>
  %1 = kiln.linear w3 %x, %w param("b") : tensor<4x8xbf16>, tensor<8x8xbf16> -> tensor<4x8xbf16>
  %2 = kiln.linear output %x, %w param("c") : tensor<4x8xbf16>, tensor<8x8xbf16> -> tensor<4x8xbf16>
  return
}

// The FP8 policy prints back with only the fields that differ from
// [float8]'s defaults (auto_filter_small_kn = true, amax_history_len = 16,
// amax_compute_algo = max, the rest false or empty), keys in one order.
// CHECK-LABEL: module @fp8_policy
// CHECK-SAME: kiln.float8 = #kiln.float8<recipe = tensorwise, filter_fqns = ["k_proj", "w[13]"], auto_filter_small_kn = false, force_output_projection = true, enable_fsdp_float8_all_gather = true, amax_history_len = 4>
module @fp8_policy attributes {kiln.float8 = #kiln.float8<enable_fsdp_float8_all_gather = true, recipe = tensorwise, amax_history_len = 4, filter_fqns = ["k_proj", "w[13]"], force_output_projection = true, auto_filter_small_kn = false, amax_compute_algo = max>} {
}
// CHECK-LABEL: module @fp8_delayed
// CHECK-SAME: kiln.float8 = #kiln.float8<recipe = delayed, amax_compute_algo = most_recent>
module @fp8_delayed attributes {kiln.float8 = #kiln.float8<recipe = delayed, amax_history_len = 16, amax_compute_algo = most_recent, auto_filter_small_kn = true>} {
}

// The device mesh: its two axes print in their order (dp_shard, then tp),
// whatever order they were written in.
// Each collective names its axis, whose size in the mesh is its ranks.
// CHECK-LABEL: module @mesh
// CHECK-SAME: kiln.mesh = #kiln.mesh<dp_shard = 2, tp = 4>
module @mesh attributes {kiln.mesh = #kiln.mesh<tp = 4, dp_shard = 2>} {
  // CHECK: kiln.all_gather_start %{{.+}} over tp {group = "g", ranks = 4 : i64} : tensor<8xbf16> -> tensor<32xbf16>
  // CHECK: kiln.reduce_scatter_start %{{.+}} over tp {group = "g", ranks = 4 : i64, reduction = "sum"} : tensor<32xbf16> -> tensor<8xbf16>
  // CHECK: kiln.all_reduce_start %{{.+}} over dp_shard {ranks = 2 : i64, reduction = "max"} : tensor<8xbf16>
  // CHECK: kiln.send_recv_start %{{.+}} over tp {ranks = 4 : i64, shift = 3 : i64} : tensor<8xbf16>
  func.func @collectives(%s: tensor<8xbf16>) -> tensor<8xbf16> {
    %0 = kiln.all_gather_start %s over tp {group = "g", ranks = 4 : i64} : tensor<8xbf16> -> tensor<32xbf16>
    %1 = kiln.wait %0 : tensor<32xbf16>
    %2 = kiln.reduce_scatter_start %1 over tp {group = "g", ranks = 4 : i64, reduction = "sum"} : tensor<32xbf16> -> tensor<8xbf16>
    %3 = kiln.wait %2 : tensor<8xbf16>
    %4 = kiln.all_reduce_start %3 over dp_shard {ranks = 2 : i64, reduction = "max"} : tensor<8xbf16>
    %5 = kiln.wait %4 : tensor<8xbf16>
    %6 = kiln.send_recv_start %5 over tp {ranks = 4 : i64, shift = 3 : i64} : tensor<8xbf16>
    %7 = kiln.wait %6 : tensor<8xbf16>
    return %7 : tensor<8xbf16>
  }
}

// kiln-fp8-select's mark, one per reason, and the forward GEMM's fast
// accumulation.
// CHECK-LABEL: func.func @fp8_marks
func.func @fp8_marks(%x: tensor<128x64xbf16>, %w: tensor<64x64xbf16>,
                     %xq: tensor<128x64xf8E4M3FN>, %wq: tensor<64x64xf8E4M3FN>,
                     %s: tensor<f32>) {
  // CHECK: kiln.linear wq %{{.+}}, %{{.+}} param("a") {fp8 = #kiln.fp8_choice<fp8>} : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xbf16>
  // CHECK: kiln.linear output %{{.+}}, %{{.+}} param("b") {fp8 = #kiln.fp8_choice<fp8, forced_output_projection>}
  // CHECK: kiln.linear output %{{.+}}, %{{.+}} param("c") {fp8 = #kiln.fp8_choice<bf16, output_projection>}
  // CHECK: kiln.linear w1 %{{.+}}, %{{.+}} param("d") {fp8 = #kiln.fp8_choice<bf16, not_divisible_by_16>}
  // CHECK: kiln.linear wk %{{.+}}, %{{.+}} param("k_proj") {fp8 = #kiln.fp8_choice<bf16, filtered = "k_pro">}
  // CHECK: kiln.linear w2 %{{.+}}, %{{.+}} param("e") {fp8 = #kiln.fp8_choice<bf16, small_gemm>}
  %0 = kiln.linear wq %x, %w param("a") {fp8 = #kiln.fp8_choice<fp8>} : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xbf16>
  %1 = kiln.linear output %x, %w param("b") {fp8 = #kiln.fp8_choice<fp8, forced_output_projection>} : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xbf16>
  %2 = kiln.linear output %x, %w param("c") {fp8 = #kiln.fp8_choice<bf16, output_projection>} : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xbf16>
  %3 = kiln.linear w1 %x, %w param("d") {fp8 = #kiln.fp8_choice<bf16, not_divisible_by_16>} : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xbf16>
  %4 = kiln.linear wk %x, %w param("k_proj") {fp8 = #kiln.fp8_choice<bf16, filtered = "k_pro">} : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xbf16>
  %5 = kiln.linear w2 %x, %w param("e") {fp8 = #kiln.fp8_choice<bf16, small_gemm>} : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xbf16>
  // CHECK: kiln.scaled_matmul "output" wq %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} param("a") {fast_accumulation = true} : tensor<128x64xf8E4M3FN>, tensor<f32>, tensor<64x64xf8E4M3FN>, tensor<f32> -> tensor<128x64xbf16>
  // CHECK: kiln.scaled_matmul "grad_input" wq %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} param("a") {fast_accumulation = false}
  %6 = kiln.scaled_matmul "output" wq %xq, %s, %wq, %s param("a") {fast_accumulation = true} : tensor<128x64xf8E4M3FN>, tensor<f32>, tensor<64x64xf8E4M3FN>, tensor<f32> -> tensor<128x64xbf16>
  %7 = kiln.scaled_matmul "grad_input" wq %xq, %s, %wq, %s param("a") {fast_accumulation = false} : tensor<128x64xf8E4M3FN>, tensor<f32>, tensor<64x64xf8E4M3FN>, tensor<f32> -> tensor<128x64xbf16>
  return
}

// Gradient accumulation (kiln-grad-accum): a mean over microbatches, and
// the token ids' rows moved by reshape and unflatten.
// CHECK-LABEL: func.func @grad_accum
func.func @grad_accum(%g: tensor<4x8xbf16>, %t: tensor<2x4xi32>) {
  // CHECK: kiln.divide %{{.+}} by 4 : tensor<4x8xbf16>
  %0 = kiln.divide %g by 4 : tensor<4x8xbf16>
  // CHECK: kiln.maximum %{{.+}}, %{{.+}} : tensor<4x8xbf16>
  %m = kiln.maximum %g, %0 : tensor<4x8xbf16>
  // CHECK: kiln.reshape %{{.+}} : tensor<2x4xi32> -> tensor<8xi32>
  %1 = kiln.reshape %t : tensor<2x4xi32> -> tensor<8xi32>
  // CHECK: kiln.unflatten %{{.+}}[4] : tensor<8xi32> -> tensor<4xi32>
  %2 = kiln.unflatten %1[4] : tensor<8xi32> -> tensor<4xi32>
  return
}

// Pipeline parallel (KilnPipelineOps.td): a stage's transfers as the
// frontend writes them, and as kiln-pipeline-schedule lowers them.
// CHECK-LABEL: func.func @pipeline
func.func @pipeline(%h: tensor<2x4x8xf32>) {
  // CHECK: kiln.pipe_send %{{.+}} activation {stage = 0 : i64, stages = 2 : i64} : tensor<2x4x8xf32>
  kiln.pipe_send %h activation {stage = 0 : i64, stages = 2 : i64} : tensor<2x4x8xf32>
  // CHECK: kiln.pipe_recv gradient {stage = 0 : i64, stages = 2 : i64} : tensor<2x4x8xf32>
  %g = kiln.pipe_recv gradient {stage = 0 : i64, stages = 2 : i64} : tensor<2x4x8xf32>
  // CHECK: kiln.pipe_send_start %{{.+}} over pp {peer = 1 : i64, ranks = 2 : i64, tag = 2 : i64} : tensor<2x4x8xf32> -> tensor<f32>
  %t = kiln.pipe_send_start %h over pp {peer = 1 : i64, ranks = 2 : i64, tag = 2 : i64} : tensor<2x4x8xf32> -> tensor<f32>
  %d = kiln.wait %t : tensor<f32>
  // CHECK: kiln.pipe_recv_start over pp {peer = 1 : i64, ranks = 2 : i64, tag = 1 : i64} : tensor<2x4x8xf32>
  %p = kiln.pipe_recv_start over pp {peer = 1 : i64, ranks = 2 : i64, tag = 1 : i64} : tensor<2x4x8xf32>
  %r = kiln.wait %p : tensor<2x4x8xf32>
  return
}

// The mesh's pp axis (omitted when 1).
// CHECK-LABEL: module @mesh_pp attributes {kiln.mesh = #kiln.mesh<pp = 2, dp_shard = 2, tp = 2>}
module @mesh_pp attributes {kiln.mesh = #kiln.mesh<pp = 2, dp_shard = 2, tp = 2>} {
  // CHECK: kiln.all_reduce_start %{{.+}} over pp {ranks = 2 : i64, reduction = "sum"}
  func.func @loss(%l: tensor<f32>) -> tensor<f32> {
    %s = kiln.all_reduce_start %l over pp {ranks = 2 : i64, reduction = "sum"} : tensor<f32>
    %w = kiln.wait %s : tensor<f32>
    return %w : tensor<f32>
  }
}
