// RUN: kiln-opt %s -split-input-file -kiln-tp-partition -verify-diagnostics | FileCheck %s

// One transformer block at tp = 2, the rank at position 1 (docs/tp.md,
// "Phase tp"): 4 query heads, 2 kv heads, FFN hidden 48, vocabulary 32,
// batch 2, sequence 8.
//
// The token and target inputs become the rank's sequence shard; the weights of the
// column-parallel linears (q, k, v, w1, w3, output) and the embedding table
// their rows, of the row-parallel ones (o, w2) their columns, each marked
// with its shard; the norms stay whole.
// CHECK-LABEL: func.func @forward_loss(
// CHECK-SAME: %[[TOK:[^:]+]]: tensor<2x4xi32> {kiln.input = "tokens", kiln.tp_shard = #kiln.tp_shard<dim = 1, index = 1>}
// CHECK-SAME: %[[TGT:[^:]+]]: tensor<2x4xi32> {kiln.input = "targets", kiln.tp_shard = #kiln.tp_shard<dim = 1, index = 1>}
// CHECK-SAME: %[[EMB:[^:]+]]: tensor<16x16xf32> {kiln.init = #kiln.init<ones>, kiln.param = "model.embed_tokens.weight", kiln.tp_shard = #kiln.tp_shard<dim = 0, index = 1>}
// CHECK-SAME: %[[N0:[^:]+]]: tensor<16xf32> {kiln.init = #kiln.init<ones>, kiln.param = "model.layers.0.input_layernorm.weight"}
// CHECK-SAME: %[[WQ:[^:]+]]: tensor<8x16xf32> {kiln.init = #kiln.init<ones>, kiln.param = "model.layers.0.self_attn.q_proj.weight", kiln.tp_shard = #kiln.tp_shard<dim = 0, index = 1>}
// CHECK-SAME: %[[WK:[^:]+]]: tensor<4x16xf32> {{{[^}]*}}kiln.tp_shard = #kiln.tp_shard<dim = 0, index = 1>}
// CHECK-SAME: %[[WV:[^:]+]]: tensor<4x16xf32> {{{[^}]*}}kiln.tp_shard = #kiln.tp_shard<dim = 0, index = 1>}
// CHECK-SAME: %[[WO:[^:]+]]: tensor<16x8xf32> {{{[^}]*}}kiln.tp_shard = #kiln.tp_shard<dim = 1, index = 1>}
// CHECK-SAME: %[[N1:[^:]+]]: tensor<16xf32> {kiln.init = #kiln.init<ones>, kiln.param = "model.layers.0.post_attention_layernorm.weight"}
// CHECK-SAME: %[[W1:[^:]+]]: tensor<24x16xf32> {{{[^}]*}}kiln.tp_shard = #kiln.tp_shard<dim = 0, index = 1>}
// CHECK-SAME: %[[W3:[^:]+]]: tensor<24x16xf32> {{{[^}]*}}kiln.tp_shard = #kiln.tp_shard<dim = 0, index = 1>}
// CHECK-SAME: %[[W2:[^:]+]]: tensor<16x24xf32> {{{[^}]*}}kiln.tp_shard = #kiln.tp_shard<dim = 1, index = 1>}
// CHECK-SAME: %[[NF:[^:]+]]: tensor<16xf32> {kiln.init = #kiln.init<ones>, kiln.param = "model.norm.weight"}
// CHECK-SAME: %[[OUT:[^:]+]]: tensor<16x16xf32> {{{[^}]*}}kiln.tp_shard = #kiln.tp_shard<dim = 0, index = 1>}
// CHECK-SAME: -> tensor<f32>
//
// The embedding over the vocabulary (TorchTitan's row-wise embedding):
// every rank's token ids gathered ([tp, B, S/tp] in rank order), each
// looked up in the rank's rows [16, 32) (zeros for the others), and the
// partial rows reduce-scattered (sum) along the same order, so each rank
// gets its own positions [B, S/tp, D] summed over the ranks, with no
// transpose. Then sequence parallel: the norm on [B, S/tp, D].
// CHECK: %[[IDS:.+]] = kiln.reshape %[[TOK]] : tensor<2x4xi32> -> tensor<8xi32>
// CHECK-NEXT: %[[IG:.+]] = kiln.all_gather_start %[[IDS]] over tp {group = "tokens", ranks = 2 : i64} : tensor<8xi32> -> tensor<16xi32>
// CHECK-NEXT: %[[ALL:.+]] = kiln.wait %[[IG]] : tensor<16xi32>
// CHECK-NEXT: %[[P:.+]] = kiln.embedding %[[EMB]][%[[ALL]]] param("model.embed_tokens.weight") {vocab_size = 32 : i64, vocab_start = 16 : i64} : tensor<16x16xf32>, tensor<16xi32> -> tensor<16x16xf32>
// CHECK-NEXT: %[[PF:.+]] = kiln.reshape %[[P]] : tensor<16x16xf32> -> tensor<256xf32>
// CHECK-NEXT: %[[RS:.+]] = kiln.reduce_scatter_start %[[PF]] over tp {group = "model.embed_tokens.weight", ranks = 2 : i64, reduction = "sum"} : tensor<256xf32> -> tensor<128xf32>
// CHECK-NEXT: %[[HW:.+]] = kiln.wait %[[RS]] : tensor<128xf32>
// CHECK-NEXT: %[[H:.+]] = kiln.reshape %[[HW]] : tensor<128xf32> -> tensor<2x4x16xf32>
// CHECK: %[[X:.+]] = kiln.rms_norm %[[H]], %[[N0]] {{.*}} : tensor<2x4x16xf32>, tensor<16xf32>
//
// One all-gather along the sequence before q/k/v, around a flat buffer:
// [B, S/tp, D] -> [S/tp, B, D] -> flat -> gather -> [S, B, D] -> [B, S, D].
// CHECK: %[[XT:.+]] = kiln.transpose %[[X]] [1, 0, 2] : tensor<2x4x16xf32> -> tensor<4x2x16xf32>
// CHECK: %[[XF:.+]] = kiln.reshape %[[XT]] : tensor<4x2x16xf32> -> tensor<128xf32>
// CHECK: %[[AG:.+]] = kiln.all_gather_start %[[XF]] over tp {group = "model.layers.0.self_attn.q_proj.weight", ranks = 2 : i64} : tensor<128xf32> -> tensor<256xf32>
// CHECK: %[[XG:.+]] = kiln.wait %[[AG]] : tensor<256xf32>
// CHECK: %[[XU:.+]] = kiln.reshape %[[XG]] : tensor<256xf32> -> tensor<8x2x16xf32>
// CHECK: %[[XS:.+]] = kiln.transpose %[[XU]] [1, 0, 2] : tensor<8x2x16xf32> -> tensor<2x8x16xf32>
//
// Column-parallel q/k/v from the one gathered input: the rank's 2 query heads
// and 1 kv head, rope and attention on them.
// CHECK: %[[Q:.+]] = kiln.linear wq %[[XS]], %[[WQ]] {{.*}} : tensor<2x8x16xf32>, tensor<8x16xf32> -> tensor<2x8x8xf32>
// CHECK: %[[K:.+]] = kiln.linear wk %[[XS]], %[[WK]] {{.*}} : tensor<2x8x16xf32>, tensor<4x16xf32> -> tensor<2x8x4xf32>
// CHECK: %[[V:.+]] = kiln.linear wv %[[XS]], %[[WV]] {{.*}} : tensor<2x8x16xf32>, tensor<4x16xf32> -> tensor<2x8x4xf32>
// CHECK-NOT: kiln.all_gather_start
// CHECK: kiln.reshape %[[Q]] : tensor<2x8x8xf32> -> tensor<2x8x2x4xf32>
// CHECK: kiln.reshape %[[K]] : tensor<2x8x4xf32> -> tensor<2x8x1x4xf32>
// CHECK: kiln.rope %{{.+}} : tensor<2x8x2x4xf32>
// CHECK: kiln.rope %{{.+}} : tensor<2x8x1x4xf32>
// CHECK: %[[A:.+]], %{{.+}} = kiln.attention {{.*}} : tensor<2x8x2x4xf32>, tensor<2x8x1x4xf32>, tensor<2x8x1x4xf32> -> tensor<2x2x8xf32>
// CHECK: %[[AM:.+]] = kiln.reshape %[[A]] : tensor<2x8x2x4xf32> -> tensor<2x8x8xf32>
//
// Row-parallel o: a partial sum of every position, reduce-scattered (sum)
// back to the rank's sequence shard before the residual add.
// CHECK: %[[O:.+]] = kiln.linear wo %[[AM]], %[[WO]] {{.*}} : tensor<2x8x8xf32>, tensor<16x8xf32> -> tensor<2x8x16xf32>
// CHECK: %[[OT:.+]] = kiln.transpose %[[O]] [1, 0, 2] : tensor<2x8x16xf32> -> tensor<8x2x16xf32>
// CHECK: %[[OF:.+]] = kiln.reshape %[[OT]] : tensor<8x2x16xf32> -> tensor<256xf32>
// CHECK: %[[RS:.+]] = kiln.reduce_scatter_start %[[OF]] over tp {group = "model.layers.0.self_attn.o_proj.weight", ranks = 2 : i64, reduction = "sum"} : tensor<256xf32> -> tensor<128xf32>
// CHECK: %[[OW:.+]] = kiln.wait %[[RS]] : tensor<128xf32>
// CHECK: %[[OU:.+]] = kiln.reshape %[[OW]] : tensor<128xf32> -> tensor<4x2x16xf32>
// CHECK: %[[OS:.+]] = kiln.transpose %[[OU]] [1, 0, 2] : tensor<4x2x16xf32> -> tensor<2x4x16xf32>
// CHECK: %[[R1:.+]] = kiln.add %[[H]], %[[OS]] : tensor<2x4x16xf32>
//
// The FFN: one gather shared by w1 and w3, the rank's 24 of 48 columns,
// w2 row-parallel and reduce-scattered.
// CHECK: %[[Y:.+]] = kiln.rms_norm %[[R1]], %[[N1]] {{.*}} : tensor<2x4x16xf32>, tensor<16xf32>
// CHECK: kiln.all_gather_start %{{.+}} over tp {group = "model.layers.0.mlp.gate_proj.weight", ranks = 2 : i64} : tensor<128xf32> -> tensor<256xf32>
// CHECK: %[[YS:.+]] = kiln.transpose %{{.+}} [1, 0, 2] : tensor<8x2x16xf32> -> tensor<2x8x16xf32>
// CHECK: %[[G:.+]] = kiln.linear w1 %[[YS]], %[[W1]] {{.*}} -> tensor<2x8x24xf32>
// CHECK: %[[U:.+]] = kiln.linear w3 %[[YS]], %[[W3]] {{.*}} -> tensor<2x8x24xf32>
// CHECK: kiln.silu %[[G]] : tensor<2x8x24xf32>
// CHECK: %[[M:.+]] = kiln.mul %{{.+}}, %[[U]] : tensor<2x8x24xf32>
// CHECK: %[[D:.+]] = kiln.linear w2 %[[M]], %[[W2]] {{.*}} : tensor<2x8x24xf32>, tensor<16x24xf32> -> tensor<2x8x16xf32>
// CHECK: kiln.reduce_scatter_start %{{.+}} over tp {group = "model.layers.0.mlp.down_proj.weight", ranks = 2 : i64, reduction = "sum"} : tensor<256xf32> -> tensor<128xf32>
// CHECK: %[[DS:.+]] = kiln.transpose %{{.+}} [1, 0, 2] : tensor<4x2x16xf32> -> tensor<2x4x16xf32>
// CHECK: %[[R2:.+]] = kiln.add %[[R1]], %[[DS]] : tensor<2x4x16xf32>
//
// The end: the final norm on the shard, a gather, the output projection
// over the rank's 16 of 32 vocabulary rows for every position. Without
// loss parallel the rank then takes its own positions with the whole
// vocabulary (an all-to-all as one reduce-scatter (sum): its logits as
// [S, B, V/tp], i.e. tp sequence chunks of 128, placed at slot 1 of a zero
// buffer [vocab slice, sequence chunk, 128], transposed to [sequence
// chunk, vocab slice, 128]); the cross-entropy of its tokens against its
// targets, and the loss is the mean over tp.
// CHECK: %[[F:.+]] = kiln.rms_norm %[[R2]], %[[NF]] {{.*}} : tensor<2x4x16xf32>, tensor<16xf32>
// CHECK: kiln.all_gather_start %{{.+}} over tp {group = "lm_head.weight", ranks = 2 : i64} : tensor<128xf32> -> tensor<256xf32>
// CHECK: %[[FS:.+]] = kiln.transpose %{{.+}} [1, 0, 2] : tensor<8x2x16xf32> -> tensor<2x8x16xf32>
// CHECK: %[[LG:.+]] = kiln.linear output %[[FS]], %[[OUT]] {{.*}} : tensor<2x8x16xf32>, tensor<16x16xf32> -> tensor<2x8x16xf32>
// CHECK: %[[LT:.+]] = kiln.transpose %[[LG]] [1, 0, 2] : tensor<2x8x16xf32> -> tensor<8x2x16xf32>
// CHECK: %[[LF:.+]] = kiln.reshape %[[LT]] : tensor<8x2x16xf32> -> tensor<256xf32>
// CHECK: %[[PAD:.+]] = kiln.flatten %[[LF]] [256] : tensor<256xf32> -> tensor<512xf32>
// CHECK: %[[GRID:.+]] = kiln.reshape %[[PAD]] : tensor<512xf32> -> tensor<2x2x128xf32>
// CHECK: %[[BYSEQ:.+]] = kiln.transpose %[[GRID]] [1, 0, 2] : tensor<2x2x128xf32> -> tensor<2x2x128xf32>
// CHECK: %[[SEND:.+]] = kiln.reshape %[[BYSEQ]] : tensor<2x2x128xf32> -> tensor<512xf32>
// CHECK: %[[LRS:.+]] = kiln.reduce_scatter_start %[[SEND]] over tp {group = "logits", ranks = 2 : i64, reduction = "sum"} : tensor<512xf32> -> tensor<256xf32>
// CHECK: %[[LW:.+]] = kiln.wait %[[LRS]] : tensor<256xf32>
// CHECK: %[[LB:.+]] = kiln.reshape %[[LW]] : tensor<256xf32> -> tensor<2x4x2x16xf32>
// CHECK: %[[LO:.+]] = kiln.transpose %[[LB]] [2, 1, 0, 3] : tensor<2x4x2x16xf32> -> tensor<2x4x2x16xf32>
// CHECK: %[[L:.+]] = kiln.reshape %[[LO]] : tensor<2x4x2x16xf32> -> tensor<2x4x32xf32>
// CHECK: %[[CE:.+]] = kiln.cross_entropy %[[L]], %[[TGT]] : tensor<2x4x32xf32>, tensor<2x4xi32> -> tensor<f32>
// CHECK: %[[MEAN:.+]] = kiln.all_reduce_start %[[CE]] over tp {ranks = 2 : i64, reduction = "mean"} : tensor<f32>
// CHECK: %[[LOSS:.+]] = kiln.wait %[[MEAN]] : tensor<f32>
// CHECK: return %[[LOSS]] : tensor<f32>
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 1, tp = 2>, kiln.tp = {rank = 1 : i64, loss_parallel = false}} {
func.func @forward_loss(%tok: tensor<2x8xi32> {kiln.input = "tokens"},
                          %tgt: tensor<2x8xi32> {kiln.input = "targets"},
                          %emb: tensor<32x16xf32> {kiln.init = #kiln.init<ones>, kiln.param = "model.embed_tokens.weight"},
                          %n0: tensor<16xf32> {kiln.init = #kiln.init<ones>, kiln.param = "model.layers.0.input_layernorm.weight"},
                          %wq: tensor<16x16xf32> {kiln.init = #kiln.init<ones>, kiln.param = "model.layers.0.self_attn.q_proj.weight"},
                          %wk: tensor<8x16xf32> {kiln.init = #kiln.init<ones>, kiln.param = "model.layers.0.self_attn.k_proj.weight"},
                          %wv: tensor<8x16xf32> {kiln.init = #kiln.init<ones>, kiln.param = "model.layers.0.self_attn.v_proj.weight"},
                          %wo: tensor<16x16xf32> {kiln.init = #kiln.init<ones>, kiln.param = "model.layers.0.self_attn.o_proj.weight"},
                          %n1: tensor<16xf32> {kiln.init = #kiln.init<ones>, kiln.param = "model.layers.0.post_attention_layernorm.weight"},
                          %w1: tensor<48x16xf32> {kiln.init = #kiln.init<ones>, kiln.param = "model.layers.0.mlp.gate_proj.weight"},
                          %w3: tensor<48x16xf32> {kiln.init = #kiln.init<ones>, kiln.param = "model.layers.0.mlp.up_proj.weight"},
                          %w2: tensor<16x48xf32> {kiln.init = #kiln.init<ones>, kiln.param = "model.layers.0.mlp.down_proj.weight"},
                          %nf: tensor<16xf32> {kiln.init = #kiln.init<ones>, kiln.param = "model.norm.weight"},
                          %out: tensor<32x16xf32> {kiln.init = #kiln.init<ones>, kiln.param = "lm_head.weight"}) -> tensor<f32> {
  %0 = kiln.embedding %emb[%tok] param("model.embed_tokens.weight") : tensor<32x16xf32>, tensor<2x8xi32> -> tensor<2x8x16xf32>
  %1 = kiln.rms_norm %0, %n0 {eps = 1.000000e-05 : f64} : tensor<2x8x16xf32>, tensor<16xf32>
  %2 = kiln.linear wq %1, %wq param("model.layers.0.self_attn.q_proj.weight") : tensor<2x8x16xf32>, tensor<16x16xf32> -> tensor<2x8x16xf32>
  %3 = kiln.linear wk %1, %wk param("model.layers.0.self_attn.k_proj.weight") : tensor<2x8x16xf32>, tensor<8x16xf32> -> tensor<2x8x8xf32>
  %4 = kiln.linear wv %1, %wv param("model.layers.0.self_attn.v_proj.weight") : tensor<2x8x16xf32>, tensor<8x16xf32> -> tensor<2x8x8xf32>
  %5 = kiln.reshape %2 : tensor<2x8x16xf32> -> tensor<2x8x4x4xf32>
  %6 = kiln.reshape %3 : tensor<2x8x8xf32> -> tensor<2x8x2x4xf32>
  %7 = kiln.reshape %4 : tensor<2x8x8xf32> -> tensor<2x8x2x4xf32>
  %8 = kiln.rope %5 {theta = 1.000000e+04 : f64} : tensor<2x8x4x4xf32>
  %9 = kiln.rope %6 {theta = 1.000000e+04 : f64} : tensor<2x8x2x4xf32>
  %result, %logsumexp = kiln.attention %8, %9, %7 {causal, scale = 5.000000e-01 : f64} : tensor<2x8x4x4xf32>, tensor<2x8x2x4xf32>, tensor<2x8x2x4xf32> -> tensor<2x4x8xf32>
  %10 = kiln.reshape %result : tensor<2x8x4x4xf32> -> tensor<2x8x16xf32>
  %11 = kiln.linear wo %10, %wo param("model.layers.0.self_attn.o_proj.weight") : tensor<2x8x16xf32>, tensor<16x16xf32> -> tensor<2x8x16xf32>
  %12 = kiln.add %0, %11 : tensor<2x8x16xf32>
  %13 = kiln.rms_norm %12, %n1 {eps = 1.000000e-05 : f64} : tensor<2x8x16xf32>, tensor<16xf32>
  %14 = kiln.linear w1 %13, %w1 param("model.layers.0.mlp.gate_proj.weight") : tensor<2x8x16xf32>, tensor<48x16xf32> -> tensor<2x8x48xf32>
  %15 = kiln.linear w3 %13, %w3 param("model.layers.0.mlp.up_proj.weight") : tensor<2x8x16xf32>, tensor<48x16xf32> -> tensor<2x8x48xf32>
  %16 = kiln.silu %14 : tensor<2x8x48xf32>
  %17 = kiln.mul %16, %15 : tensor<2x8x48xf32>
  %18 = kiln.linear w2 %17, %w2 param("model.layers.0.mlp.down_proj.weight") : tensor<2x8x48xf32>, tensor<16x48xf32> -> tensor<2x8x16xf32>
  %19 = kiln.add %12, %18 : tensor<2x8x16xf32>
  %20 = kiln.rms_norm %19, %nf {eps = 1.000000e-05 : f64} : tensor<2x8x16xf32>, tensor<16xf32>
  %21 = kiln.linear output %20, %out param("lm_head.weight") : tensor<2x8x16xf32>, tensor<32x16xf32> -> tensor<2x8x32xf32>
  %22 = kiln.cross_entropy %21, %tgt : tensor<2x8x32xf32>, tensor<2x8xi32> -> tensor<f32>
  return %22 : tensor<f32>
}
}


// -----

// tp = 1: nothing to partition.
// CHECK-LABEL: func.func @forward_loss(
// CHECK-SAME: %{{.+}}: tensor<1x4xi32> {kiln.input = "tokens"}
// CHECK-SAME: %{{.+}}: tensor<32x8xf32> {kiln.param = "w"}
// CHECK-NOT: kiln.tp_shard
// CHECK-NOT: _start
// CHECK: return
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 2, tp = 1>} {
func.func @forward_loss(%tok: tensor<1x4xi32> {kiln.input = "tokens"}, %tgt: tensor<1x4xi32> {kiln.input = "targets"},
                        %e: tensor<32x8xf32> {kiln.param = "e"}, %w: tensor<32x8xf32> {kiln.param = "w"}) -> tensor<f32> {
  %h = kiln.embedding %e[%tok] param("e") : tensor<32x8xf32>, tensor<1x4xi32> -> tensor<1x4x8xf32>
  %y = kiln.linear output %h, %w param("w") : tensor<1x4x8xf32>, tensor<32x8xf32> -> tensor<1x4x32xf32>
  %l = kiln.cross_entropy %y, %tgt : tensor<1x4x32xf32>, tensor<1x4xi32> -> tensor<f32>
  return %l : tensor<f32>
}
}

// -----

// B = 1, tp = 4, rank 0: the output projection's input is gathered along
// the sequence, each rank holds 8 of the 32 vocabulary rows, then its one
// position with the whole vocabulary.
// CHECK-LABEL: func.func @forward_loss(
// CHECK-SAME: tensor<1x1xi32> {kiln.input = "tokens", kiln.tp_shard = #kiln.tp_shard<dim = 1, index = 0>}
// CHECK-SAME: tensor<8x8xf32> {kiln.param = "w", kiln.tp_shard = #kiln.tp_shard<dim = 0, index = 0>}
// CHECK: kiln.embedding {{.*}} -> tensor<4x8xf32>
// CHECK: kiln.reshape %{{.+}} : tensor<8xf32> -> tensor<1x1x8xf32>
// CHECK: kiln.all_gather_start %{{.+}} over tp {group = "w", ranks = 4 : i64} : tensor<8xf32> -> tensor<32xf32>
// CHECK: kiln.linear output {{.*}} : tensor<1x4x8xf32>, tensor<8x8xf32> -> tensor<1x4x8xf32>
// CHECK: kiln.flatten %{{.+}} [0] : tensor<32xf32> -> tensor<128xf32>
// CHECK: kiln.reduce_scatter_start %{{.+}} over tp {group = "logits", ranks = 4 : i64, reduction = "sum"} : tensor<128xf32> -> tensor<32xf32>
// CHECK: kiln.cross_entropy {{.*}} : tensor<1x1x32xf32>, tensor<1x1xi32> -> tensor<f32>
// CHECK: kiln.all_reduce_start %{{.+}} over tp {ranks = 4 : i64, reduction = "mean"} : tensor<f32>
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 1, tp = 4>, kiln.tp = {rank = 0 : i64, loss_parallel = false}} {
func.func @forward_loss(%tok: tensor<1x4xi32> {kiln.input = "tokens"}, %tgt: tensor<1x4xi32> {kiln.input = "targets"},
                        %e: tensor<32x8xf32> {kiln.param = "e"}, %w: tensor<32x8xf32> {kiln.param = "w"}) -> tensor<f32> {
  %h = kiln.embedding %e[%tok] param("e") : tensor<32x8xf32>, tensor<1x4xi32> -> tensor<1x4x8xf32>
  %y = kiln.linear output %h, %w param("w") : tensor<1x4x8xf32>, tensor<32x8xf32> -> tensor<1x4x32xf32>
  %l = kiln.cross_entropy %y, %tgt : tensor<1x4x32xf32>, tensor<1x4xi32> -> tensor<f32>
  return %l : tensor<f32>
}
}

// -----

// A vocabulary of 30 at tp 4 is padded to 32: each rank 8 rows of the
// embedding table and of the output projection, the whole tensor 2 rows
// short (`pad`). With loss parallel, rank 3 holds vocabulary entries
// [24, 32), of which 30 and 31 are padding: vocab_size = 30 masks them in
// the loss (no token id reaches them in the embedding).
// CHECK-LABEL: func.func @forward_loss(
// CHECK-SAME: tensor<8x8xf32> {kiln.param = "e", kiln.tp_shard = #kiln.tp_shard<dim = 0, index = 3, pad = 2>}
// CHECK-SAME: tensor<8x8xf32> {kiln.param = "w", kiln.tp_shard = #kiln.tp_shard<dim = 0, index = 3, pad = 2>}
// CHECK: kiln.embedding {{.*}} {vocab_size = 30 : i64, vocab_start = 24 : i64} : tensor<8x8xf32>, tensor<4xi32> -> tensor<4x8xf32>
// CHECK: kiln.linear output {{.*}} -> tensor<1x4x8xf32>
// CHECK: kiln.vocab_parallel_max %{{.+}} {vocab_size = 30 : i64, vocab_start = 24 : i64}
// CHECK: kiln.vocab_parallel_stats %{{.+}} {vocab_size = 30 : i64, vocab_start = 24 : i64}
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 1, tp = 4>, kiln.tp = {rank = 3 : i64, loss_parallel = true}} {
func.func @forward_loss(%tok: tensor<1x4xi32> {kiln.input = "tokens"}, %tgt: tensor<1x4xi32> {kiln.input = "targets"},
                        %e: tensor<30x8xf32> {kiln.param = "e"}, %w: tensor<30x8xf32> {kiln.param = "w"}) -> tensor<f32> {
  %h = kiln.embedding %e[%tok] param("e") : tensor<30x8xf32>, tensor<1x4xi32> -> tensor<1x4x8xf32>
  %y = kiln.linear output %h, %w param("w") : tensor<1x4x8xf32>, tensor<30x8xf32> -> tensor<1x4x30xf32>
  %l = kiln.cross_entropy %y, %tgt : tensor<1x4x30xf32>, tensor<1x4xi32> -> tensor<f32>
  return %l : tensor<f32>
}
}

// -----

// The same without loss parallel: after the all-to-all the rank's position
// has the padded vocabulary [1, 1, 32]; its first 30 columns are kept
// (vocabulary-major, the flat buffer's first 30 rows) for the cross-entropy.
// CHECK-LABEL: func.func @forward_loss(
// CHECK-SAME: kiln.tp_shard = #kiln.tp_shard<dim = 0, index = 1, pad = 2>
// CHECK: %[[L:.+]] = kiln.reshape %{{.+}} : tensor<1x1x4x8xf32> -> tensor<1x1x32xf32>
// CHECK: %[[V:.+]] = kiln.transpose %[[L]] [2, 0, 1] : tensor<1x1x32xf32> -> tensor<32x1x1xf32>
// CHECK: %[[F:.+]] = kiln.reshape %[[V]] : tensor<32x1x1xf32> -> tensor<32xf32>
// CHECK: %[[K:.+]] = kiln.unflatten %[[F]][0] : tensor<32xf32> -> tensor<30x1x1xf32>
// CHECK: %[[T:.+]] = kiln.transpose %[[K]] [1, 2, 0] : tensor<30x1x1xf32> -> tensor<1x1x30xf32>
// CHECK: kiln.cross_entropy %[[T]], %{{.+}} : tensor<1x1x30xf32>, tensor<1x1xi32> -> tensor<f32>
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 1, tp = 4>, kiln.tp = {rank = 1 : i64, loss_parallel = false}} {
func.func @forward_loss(%tok: tensor<1x4xi32> {kiln.input = "tokens"}, %tgt: tensor<1x4xi32> {kiln.input = "targets"},
                        %e: tensor<30x8xf32> {kiln.param = "e"}, %w: tensor<30x8xf32> {kiln.param = "w"}) -> tensor<f32> {
  %h = kiln.embedding %e[%tok] param("e") : tensor<30x8xf32>, tensor<1x4xi32> -> tensor<1x4x8xf32>
  %y = kiln.linear output %h, %w param("w") : tensor<1x4x8xf32>, tensor<30x8xf32> -> tensor<1x4x30xf32>
  %l = kiln.cross_entropy %y, %tgt : tensor<1x4x30xf32>, tensor<1x4xi32> -> tensor<f32>
  return %l : tensor<f32>
}
}

// -----

// A vocabulary so small that padding would leave a rank only padding (5 at
// tp 4: slices of 2, the last one both padding) is refused.
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 1, tp = 4>, kiln.tp = {rank = 0 : i64, loss_parallel = true}} {
// expected-error @+1 {{a vocabulary of 5 padded for tp 4 would leave a rank only padding}}
func.func @forward_loss(%tok: tensor<1x4xi32> {kiln.input = "tokens"}, %tgt: tensor<1x4xi32> {kiln.input = "targets"},
                        %e: tensor<5x8xf32> {kiln.param = "e"}, %w: tensor<5x8xf32> {kiln.param = "w"}) -> tensor<f32> {
  %h = kiln.embedding %e[%tok] param("e") : tensor<5x8xf32>, tensor<1x4xi32> -> tensor<1x4x8xf32>
  %y = kiln.linear output %h, %w param("w") : tensor<1x4x8xf32>, tensor<5x8xf32> -> tensor<1x4x5xf32>
  %l = kiln.cross_entropy %y, %tgt : tensor<1x4x5xf32>, tensor<1x4xi32> -> tensor<f32>
  return %l : tensor<f32>
}
}

// -----

// expected-error @+1 {{a module with tp > 1 needs 'kiln.tp' = {rank = <position on the tp axis> : i64, loss_parallel = <bool>}}}
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 1, tp = 2>} {
func.func @forward_loss(%x: tensor<f32>) -> tensor<f32> {
  return %x : tensor<f32>
}
}

// -----

// expected-error @+1 {{kiln.tp's rank 2 is not a position on the tp axis [0, 2)}}
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 1, tp = 2>, kiln.tp = {rank = 2 : i64, loss_parallel = false}} {
func.func @forward_loss(%x: tensor<f32>) -> tensor<f32> {
  return %x : tensor<f32>
}
}

// -----

// Loss parallel, tp 4, rank 1, B = 1: the output projection's 8 of 32
// vocabulary rows give the logits of all 4 positions on the rank's slice
// [8, 16); the targets (the rank's position) become f32 and are gathered
// along the sequence like the activations; the row max is all-reduced
// (max), then each row's sum of exponentials and target logit (sum); every
// rank computes the same loss. No logits are gathered or scattered.
// CHECK-LABEL: func.func @forward_loss(
// CHECK-SAME: %[[TGT:[^:]+]]: tensor<1x1xi32> {kiln.input = "targets", kiln.tp_shard = #kiln.tp_shard<dim = 1, index = 1>}
// CHECK-SAME: tensor<8x8xf32> {kiln.param = "w", kiln.tp_shard = #kiln.tp_shard<dim = 0, index = 1>}
// CHECK: %[[LG:.+]] = kiln.linear output {{.*}} : tensor<1x4x8xf32>, tensor<8x8xf32> -> tensor<1x4x8xf32>
// CHECK-NOT: {group = "logits"
// CHECK: %[[IDS:.+]] = kiln.index_to_float %[[TGT]] : tensor<1x1xi32> -> tensor<1x1xf32>
// CHECK: %[[IT:.+]] = kiln.transpose %[[IDS]] [1, 0] : tensor<1x1xf32> -> tensor<1x1xf32>
// CHECK: %[[IF:.+]] = kiln.reshape %[[IT]] : tensor<1x1xf32> -> tensor<1xf32>
// CHECK: %[[IG:.+]] = kiln.all_gather_start %[[IF]] over tp {group = "targets", ranks = 4 : i64} : tensor<1xf32> -> tensor<4xf32>
// CHECK: %[[IW:.+]] = kiln.wait %[[IG]] : tensor<4xf32>
// CHECK: %[[IU:.+]] = kiln.reshape %[[IW]] : tensor<4xf32> -> tensor<4x1xf32>
// CHECK: %[[ALL:.+]] = kiln.transpose %[[IU]] [1, 0] : tensor<4x1xf32> -> tensor<1x4xf32>
// CHECK: %[[LM:.+]] = kiln.vocab_parallel_max %[[LG]] {vocab_size = 32 : i64, vocab_start = 8 : i64} : tensor<1x4x8xf32> -> tensor<1x4xf32>
// CHECK: %[[MS:.+]] = kiln.all_reduce_start %[[LM]] over tp {ranks = 4 : i64, reduction = "max"} : tensor<1x4xf32>
// CHECK: %[[M:.+]] = kiln.wait %[[MS]] : tensor<1x4xf32>
// CHECK: %[[ST:.+]] = kiln.vocab_parallel_stats %[[LG]], %[[M]], %[[ALL]] {vocab_size = 32 : i64, vocab_start = 8 : i64} : tensor<1x4x8xf32>, tensor<1x4xf32>, tensor<1x4xf32> -> tensor<1x4x2xf32>
// CHECK: %[[SS:.+]] = kiln.all_reduce_start %[[ST]] over tp {ranks = 4 : i64, reduction = "sum"} : tensor<1x4x2xf32>
// CHECK: %[[S:.+]] = kiln.wait %[[SS]] : tensor<1x4x2xf32>
// CHECK: %[[LOSS:.+]] = kiln.vocab_parallel_loss %[[S]], %[[M]] : tensor<1x4x2xf32>, tensor<1x4xf32>
// CHECK-NOT: kiln.cross_entropy
// CHECK: return %[[LOSS]] : tensor<f32>
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 1, tp = 4>, kiln.tp = {rank = 1 : i64, loss_parallel = true}} {
func.func @forward_loss(%tok: tensor<1x4xi32> {kiln.input = "tokens"}, %tgt: tensor<1x4xi32> {kiln.input = "targets"},
                        %e: tensor<32x8xf32> {kiln.param = "e"}, %w: tensor<32x8xf32> {kiln.param = "w"}) -> tensor<f32> {
  %h = kiln.embedding %e[%tok] param("e") : tensor<32x8xf32>, tensor<1x4xi32> -> tensor<1x4x8xf32>
  %y = kiln.linear output %h, %w param("w") : tensor<1x4x8xf32>, tensor<32x8xf32> -> tensor<1x4x32xf32>
  %l = kiln.cross_entropy %y, %tgt : tensor<1x4x32xf32>, tensor<1x4xi32> -> tensor<f32>
  return %l : tensor<f32>
}
}

// -----

// Tied embeddings: one table, the embedding's and the output
// projection's. Both are sharded over the vocabulary alike, but one weight
// read by two ops is not partitioned yet.
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 1, tp = 2>, kiln.tp = {rank = 0 : i64, loss_parallel = false}} {
// expected-error @+1 {{parameter 'e' is a linear's weight and also used otherwise (tied embeddings?): kiln-tp-partition cannot shard it}}
func.func @forward_loss(%tok: tensor<1x4xi32> {kiln.input = "tokens"}, %tgt: tensor<1x4xi32> {kiln.input = "targets"},
                        %e: tensor<32x8xf32> {kiln.param = "e"}) -> tensor<f32> {
  %h = kiln.embedding %e[%tok] param("e") : tensor<32x8xf32>, tensor<1x4xi32> -> tensor<1x4x8xf32>
  %y = kiln.linear output %h, %e param("e") : tensor<1x4x8xf32>, tensor<32x8xf32> -> tensor<1x4x32xf32>
  %l = kiln.cross_entropy %y, %tgt : tensor<1x4x32xf32>, tensor<1x4xi32> -> tensor<f32>
  return %l : tensor<f32>
}
}

// -----

// An op the partition does not know (a cast: the precision phase comes
// after this one).
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 1, tp = 2>, kiln.tp = {rank = 0 : i64, loss_parallel = false}} {
func.func @forward_loss(%tok: tensor<1x4xi32> {kiln.input = "tokens"}, %tgt: tensor<1x4xi32> {kiln.input = "targets"},
                        %e: tensor<32x8xf32> {kiln.param = "e"}, %w: tensor<32x8xf32> {kiln.param = "w"}) -> tensor<f32> {
  %h = kiln.embedding %e[%tok] param("e") : tensor<32x8xf32>, tensor<1x4xi32> -> tensor<1x4x8xf32>
  // expected-error @+1 {{kiln-tp-partition does not know how to partition this op (docs/tp.md)}}
  %c = kiln.cast %h : tensor<1x4x8xf32> -> tensor<1x4x8xbf16>
  %y = kiln.linear output %h, %w param("w") : tensor<1x4x8xf32>, tensor<32x8xf32> -> tensor<1x4x32xf32>
  %l = kiln.cross_entropy %y, %tgt : tensor<1x4x32xf32>, tensor<1x4xi32> -> tensor<f32>
  return %l : tensor<f32>
}
}

// -----

// A linear fed by the rank's columns where a sequence shard is expected.
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 1, tp = 2>, kiln.tp = {rank = 0 : i64, loss_parallel = false}} {
func.func @forward_loss(%tok: tensor<1x4xi32> {kiln.input = "tokens"}, %tgt: tensor<1x4xi32> {kiln.input = "targets"},
                        %e: tensor<32x8xf32> {kiln.param = "e"}, %w: tensor<8x8xf32> {kiln.param = "w"},
                        %v: tensor<8x8xf32> {kiln.param = "v"}) -> tensor<f32> {
  %h = kiln.embedding %e[%tok] param("e") : tensor<32x8xf32>, tensor<1x4xi32> -> tensor<1x4x8xf32>
  %a = kiln.linear w1 %h, %w param("w") : tensor<1x4x8xf32>, tensor<8x8xf32> -> tensor<1x4x8xf32>
  // expected-error @+1 {{kiln-tp-partition expects the input of a column-parallel linear on a sequence shard here (docs/tp.md)}}
  %b = kiln.linear w3 %a, %v param("v") : tensor<1x4x8xf32>, tensor<8x8xf32> -> tensor<1x4x8xf32>
  %l = kiln.cross_entropy %b, %tgt : tensor<1x4x8xf32>, tensor<1x4xi32> -> tensor<f32>
  return %l : tensor<f32>
}
}
