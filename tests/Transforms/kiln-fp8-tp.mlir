// RUN: kiln-opt %s -split-input-file -kiln-fp8-linear -kiln-fp8-all-gather -verify-diagnostics | FileCheck %s

// FP8 under tensor parallel (docs/tp.md, "FP8 under TP"). A tensorwise
// scale is one per tensor, so the amax of an operand that each tp rank
// holds a part of is all-reduced `max` over tp before its scale is taken:
// every code is the unsharded model's (Fp8Tp.h is the one place that says
// which). Shaped after block 0 of the tiny model at tp 2, rank 0 (`kiln
// compile tests/Train/Inputs/tiny.toml --world-size 2 --set
// parallelism.tensor_parallel_degree=2 --set
// parallelism.disable_loss_parallel=true --set float8.enable=true --set
// float8.auto_filter_small_kn=false --emit=shard`), cut to q (column
// parallel) and o (row parallel) with B = 2, S = 16.
//
// All-reduced: q's weight slice, q's output gradient (its columns), o's
// input (the rank's heads), o's weight slice. Not: q's input (the
// sequence-parallel all-gather's result, the same on every tp rank) and
// o's output gradient (gathered over tp, the dual of o's reduce-scatter).
// CHECK-LABEL: func.func @tensorwise(
// CHECK-SAME: %[[XS:[^:]+]]: tensor<2x8x64xbf16>, %[[WQ:[^:]+]]: tensor<32x64xf32>, %[[H:[^:]+]]: tensor<2x16x32xbf16>, %[[WO:[^:]+]]: tensor<64x32xf32>, %[[DQ:[^:]+]]: tensor<2x16x32xbf16>, %[[DOS:[^:]+]]: tensor<2x8x64xbf16>
// CHECK: %[[DQ2:.+]] = kiln.reshape %[[DQ]] : tensor<2x16x32xbf16> -> tensor<32x32xbf16>
// CHECK-NEXT: %[[ADQ:.+]] = kiln.amax %[[DQ2]]
// CHECK-NEXT: %[[RDQ:.+]] = kiln.all_reduce_start %[[ADQ]] over tp {ranks = 2 : i64, reduction = "max"} : tensor<f32>
// CHECK-NEXT: %[[MDQ:.+]] = kiln.wait %[[RDQ]] : tensor<f32>
// CHECK-NEXT: %{{.+}}, %{{.+}} = kiln.quantize %[[DQ2]], %[[MDQ]] : tensor<32x32xbf16>, tensor<f32> -> tensor<32x32xf8E5M2>, tensor<f32>
// CHECK: %[[H2:.+]] = kiln.reshape %[[H]] : tensor<2x16x32xbf16> -> tensor<32x32xbf16>
// CHECK-NEXT: %[[AH:.+]] = kiln.amax %[[H2]]
// CHECK-NEXT: %[[RH:.+]] = kiln.all_reduce_start %[[AH]] over tp {ranks = 2 : i64, reduction = "max"}
// CHECK-NEXT: %[[MH:.+]] = kiln.wait %[[RH]]
// CHECK-NEXT: %{{.+}}, %{{.+}} = kiln.quantize %[[H2]], %[[MH]] : tensor<32x32xbf16>, tensor<f32> -> tensor<32x32xf8E4M3FN>, tensor<f32>
// CHECK: %[[G:.+]] = kiln.all_gather_start %{{.+}} over tp {group = "q", ranks = 2 : i64}
// CHECK: %[[X:.+]] = kiln.transpose %{{.+}} [1, 0, 2] : tensor<16x2x64xbf16> -> tensor<2x16x64xbf16>
// CHECK-NEXT: %[[X2:.+]] = kiln.reshape %[[X]] : tensor<2x16x64xbf16> -> tensor<32x64xbf16>
// CHECK-NEXT: %[[AX:.+]] = kiln.amax %[[X2]]
// CHECK-NEXT: %{{.+}}, %{{.+}} = kiln.quantize %[[X2]], %[[AX]] : tensor<32x64xbf16>, tensor<f32> -> tensor<32x64xf8E4M3FN>, tensor<f32>
// CHECK: %[[WQC:.+]] = kiln.cast %[[WQ]]
// CHECK-NEXT: %[[AWQ:.+]] = kiln.amax %[[WQC]]
// CHECK-NEXT: %[[RWQ:.+]] = kiln.all_reduce_start %[[AWQ]] over tp {ranks = 2 : i64, reduction = "max"}
// CHECK-NEXT: %[[MWQ:.+]] = kiln.wait %[[RWQ]]
// CHECK-NEXT: %{{.+}}, %{{.+}} = kiln.quantize %[[WQC]], %[[MWQ]] : tensor<32x64xbf16>, tensor<f32> -> tensor<32x64xf8E4M3FN>, tensor<f32>
// CHECK: kiln.scaled_matmul "output" wq
// CHECK: %[[WOC:.+]] = kiln.cast %[[WO]]
// CHECK-NEXT: %[[AWO:.+]] = kiln.amax %[[WOC]]
// CHECK-NEXT: %[[RWO:.+]] = kiln.all_reduce_start %[[AWO]] over tp {ranks = 2 : i64, reduction = "max"}
// CHECK-NEXT: %[[MWO:.+]] = kiln.wait %[[RWO]]
// CHECK-NEXT: %{{.+}}, %{{.+}} = kiln.quantize %[[WOC]], %[[MWO]] : tensor<64x32xbf16>, tensor<f32> -> tensor<64x32xf8E4M3FN>, tensor<f32>
// CHECK: kiln.scaled_matmul "output" wo
// CHECK: kiln.all_gather_start %{{.+}} over tp {group = "o", ranks = 2 : i64}
// CHECK: %[[DO2:.+]] = kiln.reshape %{{.+}} : tensor<2x16x64xbf16> -> tensor<32x64xbf16>
// CHECK-NEXT: %[[ADO:.+]] = kiln.amax %[[DO2]]
// CHECK-NEXT: %{{.+}}, %{{.+}} = kiln.quantize %[[DO2]], %[[ADO]] : tensor<32x64xbf16>, tensor<f32> -> tensor<32x64xf8E5M2>, tensor<f32>
// CHECK-COUNT-4: kiln.scaled_matmul "grad_
// CHECK-NOT: all_reduce_start
// CHECK: return
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 1, tp = 2>, kiln.float8 = #kiln.float8<recipe = tensorwise>} {
  func.func @tensorwise(%xs: tensor<2x8x64xbf16>, %wq: tensor<32x64xf32>, %h: tensor<2x16x32xbf16>, %wo: tensor<64x32xf32>, %dq: tensor<2x16x32xbf16>, %dos: tensor<2x8x64xbf16>)
      -> (tensor<2x16x32xbf16>, tensor<2x16x64xbf16>, tensor<2x16x32xbf16>, tensor<64x32xbf16>, tensor<2x16x64xbf16>, tensor<32x64xbf16>) {
    %t = kiln.transpose %xs [1, 0, 2] : tensor<2x8x64xbf16> -> tensor<8x2x64xbf16>
    %f = kiln.reshape %t : tensor<8x2x64xbf16> -> tensor<1024xbf16>
    %g = kiln.all_gather_start %f over tp {group = "q", ranks = 2 : i64} : tensor<1024xbf16> -> tensor<2048xbf16>
    %gw = kiln.wait %g : tensor<2048xbf16>
    %r = kiln.reshape %gw : tensor<2048xbf16> -> tensor<16x2x64xbf16>
    %x = kiln.transpose %r [1, 0, 2] : tensor<16x2x64xbf16> -> tensor<2x16x64xbf16>
    %wqc = kiln.cast %wq : tensor<32x64xf32> -> tensor<32x64xbf16>
    %q = kiln.linear wq %x, %wqc param("q") {fp8 = #kiln.fp8_choice<fp8>} : tensor<2x16x64xbf16>, tensor<32x64xbf16> -> tensor<2x16x32xbf16>
    %woc = kiln.cast %wo : tensor<64x32xf32> -> tensor<64x32xbf16>
    %o = kiln.linear wo %h, %woc param("o") {fp8 = #kiln.fp8_choice<fp8>} : tensor<2x16x32xbf16>, tensor<64x32xbf16> -> tensor<2x16x64xbf16>
    %dt = kiln.transpose %dos [1, 0, 2] : tensor<2x8x64xbf16> -> tensor<8x2x64xbf16>
    %df = kiln.reshape %dt : tensor<8x2x64xbf16> -> tensor<1024xbf16>
    %dg = kiln.all_gather_start %df over tp {group = "o", ranks = 2 : i64} : tensor<1024xbf16> -> tensor<2048xbf16>
    %dgw = kiln.wait %dg : tensor<2048xbf16>
    %dr = kiln.reshape %dgw : tensor<2048xbf16> -> tensor<16x2x64xbf16>
    %do = kiln.transpose %dr [1, 0, 2] : tensor<16x2x64xbf16> -> tensor<2x16x64xbf16>
    %dh = kiln.linear_grad_input wo %do, %woc param("o") : tensor<2x16x64xbf16>, tensor<64x32xbf16> -> tensor<2x16x32xbf16>
    %dwo = kiln.linear_grad_weight wo %do, %h param("o") : tensor<2x16x64xbf16>, tensor<2x16x32xbf16> -> tensor<64x32xbf16>
    %dx = kiln.linear_grad_input wq %dq, %wqc param("q") : tensor<2x16x32xbf16>, tensor<32x64xbf16> -> tensor<2x16x64xbf16>
    %dwq = kiln.linear_grad_weight wq %dq, %x param("q") : tensor<2x16x32xbf16>, tensor<2x16x64xbf16> -> tensor<32x64xbf16>
    return %q, %o, %dh, %dwo, %dx, %dwq : tensor<2x16x32xbf16>, tensor<2x16x64xbf16>, tensor<2x16x32xbf16>, tensor<64x32xbf16>, tensor<2x16x64xbf16>, tensor<32x64xbf16>
  }
}

// -----

// The delayed recipe at dp_shard 2 x tp 2: the histories take this step's
// amaxes all-reduced over dp_shard, then over tp, so every rank keeps the
// unsharded model's histories. The calibration step, which scales with the
// current amax, takes a split tensor's over tp (o's weight and input here).
// CHECK-LABEL: func.func @train_step(
// CHECK-NOT: all_reduce_start
// CHECK: %[[ALL:.+]] = kiln.flatten
// CHECK-NEXT: %[[R1:.+]] = kiln.all_reduce_start %[[ALL]] over dp_shard {ranks = 2 : i64, reduction = "max"} : tensor<2xf32>
// CHECK-NEXT: %[[M1:.+]] = kiln.wait %[[R1]]
// CHECK-NEXT: %[[R2:.+]] = kiln.all_reduce_start %[[M1]] over tp {ranks = 2 : i64, reduction = "max"} : tensor<2xf32>
// CHECK-NEXT: %[[M2:.+]] = kiln.wait %[[R2]]
// CHECK-NEXT: kiln.unflatten %[[M2]][0]
// CHECK-LABEL: func.func @fp8_calibration(
// CHECK: %[[AW:.+]] = kiln.amax %{{.+}} : tensor<64x32xbf16> -> tensor<f32>
// CHECK-NEXT: kiln.all_reduce_start %[[AW]] over tp {ranks = 2 : i64, reduction = "max"}
// CHECK: %[[AI:.+]] = kiln.amax %{{.+}} : tensor<32x32xbf16> -> tensor<f32>
// CHECK-NEXT: kiln.all_reduce_start %[[AI]] over tp {ranks = 2 : i64, reduction = "max"}
// CHECK: over dp_shard
// CHECK-NEXT: kiln.wait
// CHECK-NEXT: over tp
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 2, tp = 2>, kiln.float8 = #kiln.float8<recipe = delayed, amax_history_len = 4>} {
  func.func @train_step(%h: tensor<2x16x32xbf16>, %wo: tensor<64x32xbf16>) -> tensor<2x16x64xbf16> {
    %o = kiln.linear wo %h, %wo param("o") {fp8 = #kiln.fp8_choice<fp8>} : tensor<2x16x32xbf16>, tensor<64x32xbf16> -> tensor<2x16x64xbf16>
    return %o : tensor<2x16x64xbf16>
  }
}

// -----

// The FP8 all-gather at dp_shard 2 x tp 2: a gathered view is the rank's tp
// slice of o's weight, so the vector of the weights' amaxes is all-reduced
// over dp_shard and then over tp, and the view's own tp all-reduce goes
// with its quantize. o's input keeps its tp all-reduce.
// CHECK-LABEL: func.func @gathered(
// CHECK: %[[A:.+]] = kiln.shard_amax
// CHECK-NEXT: %[[ALL:.+]] = kiln.flatten %[[A]] [0]
// CHECK-NEXT: %[[R1:.+]] = kiln.all_reduce_start %[[ALL]] over dp_shard {ranks = 2 : i64, reduction = "max"} : tensor<1xf32>
// CHECK-NEXT: %[[M1:.+]] = kiln.wait %[[R1]]
// CHECK-NEXT: %[[R2:.+]] = kiln.all_reduce_start %[[M1]] over tp {ranks = 2 : i64, reduction = "max"} : tensor<1xf32>
// CHECK-NEXT: %[[M2:.+]] = kiln.wait %[[R2]]
// CHECK-NEXT: %[[M:.+]] = kiln.unflatten %[[M2]][0]
// CHECK-NEXT: kiln.shard_quantize %{{.+}}, %[[M]]
// CHECK: %[[AH:.+]] = kiln.amax %{{.+}} : tensor<32x32xbf16> -> tensor<f32>
// CHECK-NEXT: kiln.all_reduce_start %[[AH]] over tp
// CHECK-NOT: all_reduce_start
// CHECK: kiln.all_gather_start %{{.+}} over dp_shard {group = "model.layers.0.fp8", ranks = 2 : i64} : tensor<1024xf8E4M3FN> -> tensor<2048xf8E4M3FN>
// CHECK-NOT: kiln.quantize
// CHECK: return
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 2, tp = 2>, kiln.float8 = #kiln.float8<recipe = tensorwise, enable_fsdp_float8_all_gather = true>} {
  func.func @gathered(%s: tensor<1024xf32> {kiln.shard_of = [{init = #kiln.init<ones>, name = "o", offset = 0 : i64, shape = array<i64: 64, 32>, tp_shard = #kiln.tp_shard<dim = 1, index = 0>}]}, %h: tensor<2x16x32xbf16>) -> tensor<2x16x64xbf16> {
    %c = kiln.cast %s : tensor<1024xf32> -> tensor<1024xbf16>
    %g = kiln.all_gather_start %c over dp_shard {group = "model.layers.0.fp8", ranks = 2 : i64} : tensor<1024xbf16> -> tensor<2048xbf16>
    %full = kiln.wait %g : tensor<2048xbf16>
    %wo = kiln.unflatten %full[0] : tensor<2048xbf16> -> tensor<64x32xbf16>
    %o = kiln.linear wo %h, %wo param("o") {fp8 = #kiln.fp8_choice<fp8>} : tensor<2x16x32xbf16>, tensor<64x32xbf16> -> tensor<2x16x64xbf16>
    return %o : tensor<2x16x64xbf16>
  }
}

// -----

// Rowwise under tp is refused: a row's scale would span the columns tp
// splits (o's and w2's K), which needs each row's amax over tp.
// expected-error @below {{kiln-fp8-linear: the rowwise recipe under tensor parallel (tp = 2) is not built}}
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 1, tp = 2>, kiln.float8 = #kiln.float8<recipe = rowwise>} {
  func.func @rowwise(%h: tensor<2x16x32xbf16>, %wo: tensor<64x32xbf16>) -> tensor<2x16x64xbf16> {
    %o = kiln.linear wo %h, %wo param("o") {fp8 = #kiln.fp8_choice<fp8>} : tensor<2x16x32xbf16>, tensor<64x32xbf16> -> tensor<2x16x64xbf16>
    return %o : tensor<2x16x64xbf16>
  }
}
