// RUN: kiln-opt %s -split-input-file -kiln-schedule-collectives | FileCheck %s

// Prefetch: the second group's gather (with the cast of its shard) moves up
// to just after the first group's wait, so it runs while the first group's
// linear computes; its own wait stays before its first reader.
// CHECK-LABEL: func.func @prefetch(
// CHECK-SAME: %[[S0:[^:]+]]: tensor<8xf32>, %[[S1:[^:]+]]: tensor<8xf32>, %[[X:[^:]+]]: tensor<4x4xbf16>
// CHECK-NEXT: %[[C0:.+]] = kiln.cast %[[S0]]
// CHECK-NEXT: %[[G0:.+]] = kiln.all_gather_start %[[C0]] over dp_shard {group = "a"
// CHECK-NEXT: %[[F0:.+]] = kiln.wait %[[G0]]
// CHECK-NEXT: %[[C1:.+]] = kiln.cast %[[S1]]
// CHECK-NEXT: %[[G1:.+]] = kiln.all_gather_start %[[C1]] over dp_shard {group = "b"
// CHECK-NEXT: %[[W0:.+]] = kiln.unflatten %[[F0]][0]
// CHECK-NEXT: %[[Y0:.+]] = kiln.linear wq %[[X]], %[[W0]]
// CHECK-NEXT: %[[F1:.+]] = kiln.wait %[[G1]]
// CHECK-NEXT: %[[W1:.+]] = kiln.unflatten %[[F1]][0]
// CHECK-NEXT: %[[Y1:.+]] = kiln.linear wk %[[Y0]], %[[W1]]
// CHECK-NEXT: return %[[Y1]]
func.func @prefetch(%s0: tensor<8xf32>, %s1: tensor<8xf32>, %x: tensor<4x4xbf16>) -> tensor<4x4xbf16> {
  %c0 = kiln.cast %s0 : tensor<8xf32> -> tensor<8xbf16>
  %g0 = kiln.all_gather_start %c0 over dp_shard {group = "a", ranks = 2 : i64} : tensor<8xbf16> -> tensor<16xbf16>
  %f0 = kiln.wait %g0 : tensor<16xbf16>
  %w0 = kiln.unflatten %f0[0] : tensor<16xbf16> -> tensor<4x4xbf16>
  %y0 = kiln.linear wq %x, %w0 param("a.q") : tensor<4x4xbf16>, tensor<4x4xbf16> -> tensor<4x4xbf16>
  %c1 = kiln.cast %s1 : tensor<8xf32> -> tensor<8xbf16>
  %g1 = kiln.all_gather_start %c1 over dp_shard {group = "b", ranks = 2 : i64} : tensor<8xbf16> -> tensor<16xbf16>
  %f1 = kiln.wait %g1 : tensor<16xbf16>
  %w1 = kiln.unflatten %f1[0] : tensor<16xbf16> -> tensor<4x4xbf16>
  %y1 = kiln.linear wk %y0, %w1 param("b.k") : tensor<4x4xbf16>, tensor<4x4xbf16> -> tensor<4x4xbf16>
  return %y1 : tensor<4x4xbf16>
}

// -----

// Only a gather of a cast of a block argument moves: here the second shard
// is computed (by the silu after the first linear), so nothing moves.
// CHECK-LABEL: func.func @no_prefetch_of_computed_shard(
// CHECK: %[[G0:.+]] = kiln.all_gather_start {{.*}}group = "a"
// CHECK-NEXT: %[[F0:.+]] = kiln.wait %[[G0]]
// CHECK-NEXT: kiln.unflatten %[[F0]][0]
// CHECK-NEXT: kiln.linear wq
// CHECK-NEXT: %[[C1:.+]] = kiln.silu
// CHECK-NEXT: kiln.all_gather_start %[[C1]] over dp_shard {group = "b"
func.func @no_prefetch_of_computed_shard(%s0: tensor<8xbf16>, %s1: tensor<8xbf16>, %x: tensor<4x4xbf16>) -> tensor<4x4xbf16> {
  %g0 = kiln.all_gather_start %s0 over dp_shard {group = "a", ranks = 2 : i64} : tensor<8xbf16> -> tensor<16xbf16>
  %f0 = kiln.wait %g0 : tensor<16xbf16>
  %w0 = kiln.unflatten %f0[0] : tensor<16xbf16> -> tensor<4x4xbf16>
  %y0 = kiln.linear wq %x, %w0 param("a.q") : tensor<4x4xbf16>, tensor<4x4xbf16> -> tensor<4x4xbf16>
  %c1 = kiln.silu %s1 : tensor<8xbf16>
  %g1 = kiln.all_gather_start %c1 over dp_shard {group = "b", ranks = 2 : i64} : tensor<8xbf16> -> tensor<16xbf16>
  %f1 = kiln.wait %g1 : tensor<16xbf16>
  %w1 = kiln.unflatten %f1[0] : tensor<16xbf16> -> tensor<4x4xbf16>
  %y1 = kiln.linear wk %y0, %w1 param("b.k") : tensor<4x4xbf16>, tensor<4x4xbf16> -> tensor<4x4xbf16>
  return %y1 : tensor<4x4xbf16>
}

// -----

// A shard computed before the previous gather's wait (the FP8 all-gather
// quantizes every layer's shard at the step's start) does not hold its
// gather back: the gather moves alone, right after that wait.
// CHECK-LABEL: func.func @prefetch_of_early_shard(
// CHECK: %[[Q1:.+]] = kiln.silu
// CHECK-NEXT: %[[G0:.+]] = kiln.all_gather_start {{.*}}group = "a"
// CHECK-NEXT: %[[F0:.+]] = kiln.wait %[[G0]]
// CHECK-NEXT: kiln.all_gather_start %[[Q1]] over dp_shard {group = "b"
// CHECK-NEXT: kiln.unflatten %[[F0]][0]
// CHECK-NEXT: kiln.linear wq
// CHECK-NEXT: kiln.wait
func.func @prefetch_of_early_shard(%s0: tensor<8xbf16>, %s1: tensor<8xbf16>, %x: tensor<4x4xbf16>) -> tensor<4x4xbf16> {
  %q1 = kiln.silu %s1 : tensor<8xbf16>
  %g0 = kiln.all_gather_start %s0 over dp_shard {group = "a", ranks = 2 : i64} : tensor<8xbf16> -> tensor<16xbf16>
  %f0 = kiln.wait %g0 : tensor<16xbf16>
  %w0 = kiln.unflatten %f0[0] : tensor<16xbf16> -> tensor<4x4xbf16>
  %y0 = kiln.linear wq %x, %w0 param("a.q") : tensor<4x4xbf16>, tensor<4x4xbf16> -> tensor<4x4xbf16>
  %g1 = kiln.all_gather_start %q1 over dp_shard {group = "b", ranks = 2 : i64} : tensor<8xbf16> -> tensor<16xbf16>
  %f1 = kiln.wait %g1 : tensor<16xbf16>
  %w1 = kiln.unflatten %f1[0] : tensor<16xbf16> -> tensor<4x4xbf16>
  %y1 = kiln.linear wk %y0, %w1 param("b.k") : tensor<4x4xbf16>, tensor<4x4xbf16> -> tensor<4x4xbf16>
  return %y1 : tensor<4x4xbf16>
}

// -----

// Each gather is to overlap compute. Layer 1's norm weight ("n1", read with
// layer 0's last output) is waited for at the end of layer 0; starting
// layer 1's weights ("b") after that wait would leave no GEMM to hide them,
// so "b" starts where "n1" starts instead, after "a"'s wait: both are in
// flight during layer 0's linear.
// CHECK-LABEL: func.func @prefetch_overlaps_compute(
// CHECK: %[[G0:.+]] = kiln.all_gather_start {{.*}}group = "a"
// CHECK-NEXT: %[[F0:.+]] = kiln.wait %[[G0]]
// CHECK-NEXT: %[[N1:.+]] = kiln.all_gather_start {{.*}}group = "n1"
// CHECK-NEXT: %[[G1:.+]] = kiln.all_gather_start {{.*}}group = "b"
// CHECK-NEXT: kiln.unflatten %[[F0]][0]
// CHECK-NEXT: kiln.linear wq
// CHECK-NEXT: kiln.wait %[[N1]]
// CHECK-NEXT: kiln.unflatten
// CHECK-NEXT: kiln.mul
// CHECK-NEXT: kiln.wait %[[G1]]
func.func @prefetch_overlaps_compute(%s0: tensor<8xbf16>, %n1: tensor<8xbf16>, %s1: tensor<8xbf16>, %x: tensor<4x4xbf16>) -> tensor<4x4xbf16> {
  %g0 = kiln.all_gather_start %s0 over dp_shard {group = "a", ranks = 2 : i64} : tensor<8xbf16> -> tensor<16xbf16>
  %f0 = kiln.wait %g0 : tensor<16xbf16>
  %w0 = kiln.unflatten %f0[0] : tensor<16xbf16> -> tensor<4x4xbf16>
  %y0 = kiln.linear wq %x, %w0 param("a.q") : tensor<4x4xbf16>, tensor<4x4xbf16> -> tensor<4x4xbf16>
  %gn = kiln.all_gather_start %n1 over dp_shard {group = "n1", ranks = 2 : i64} : tensor<8xbf16> -> tensor<16xbf16>
  %fn = kiln.wait %gn : tensor<16xbf16>
  %wn = kiln.unflatten %fn[0] : tensor<16xbf16> -> tensor<4x4xbf16>
  %z0 = kiln.mul %y0, %wn : tensor<4x4xbf16>
  %g1 = kiln.all_gather_start %s1 over dp_shard {group = "b", ranks = 2 : i64} : tensor<8xbf16> -> tensor<16xbf16>
  %f1 = kiln.wait %g1 : tensor<16xbf16>
  %w1 = kiln.unflatten %f1[0] : tensor<16xbf16> -> tensor<4x4xbf16>
  %y1 = kiln.linear wk %z0, %w1 param("b.k") : tensor<4x4xbf16>, tensor<4x4xbf16> -> tensor<4x4xbf16>
  return %y1 : tensor<4x4xbf16>
}

// -----

// A wait written right after its start goes down to just before the first
// op that reads it: the compute in between overlaps the all-reduce.
// CHECK-LABEL: func.func @wait_late(
// CHECK-SAME: %[[V:[^:]+]]: tensor<4xf32>, %[[X:[^:]+]]: tensor<4x4xf32>
// CHECK-NEXT: %[[R:.+]] = kiln.all_reduce_start %[[V]]
// CHECK-NEXT: %[[Y:.+]] = kiln.silu %[[X]]
// CHECK-NEXT: %[[Z:.+]] = kiln.mul %[[Y]], %[[X]]
// CHECK-NEXT: %[[M:.+]] = kiln.wait %[[R]]
// CHECK-NEXT: %[[N:.+]] = kiln.silu %[[M]]
// CHECK-NEXT: return %[[N]], %[[Z]]
func.func @wait_late(%v: tensor<4xf32>, %x: tensor<4x4xf32>) -> (tensor<4xf32>, tensor<4x4xf32>) {
  %r = kiln.all_reduce_start %v over dp_shard {ranks = 2 : i64, reduction = "sum"} : tensor<4xf32>
  %m = kiln.wait %r : tensor<4xf32>
  %y = kiln.silu %x : tensor<4x4xf32>
  %z = kiln.mul %y, %x : tensor<4x4xf32>
  %n = kiln.silu %m : tensor<4xf32>
  return %n, %z : tensor<4xf32>, tensor<4x4xf32>
}

// -----

// A gradient buffer is packed and reduce-scattered as soon as its last
// part exists (a single-use cast of a part moves with it), before the
// unrelated compute that follows.
// CHECK-LABEL: func.func @reduce_scatter_early(
// CHECK-SAME: %[[A:[^:]+]]: tensor<4x4xbf16>, %[[B:[^:]+]]: tensor<4x4xf32>, %[[X:[^:]+]]: tensor<4x4xf32>
// CHECK-NEXT: %[[GA:.+]] = kiln.silu %[[A]]
// CHECK-NEXT: %[[CA:.+]] = kiln.cast %[[GA]]
// CHECK-NEXT: %[[GB:.+]] = kiln.mul %[[B]], %[[B]]
// CHECK-NEXT: %[[FLAT:.+]] = kiln.flatten %[[CA]], %[[GB]] [0, 16]
// CHECK-NEXT: %[[R:.+]] = kiln.reduce_scatter_start %[[FLAT]]
// CHECK-NEXT: %[[Y:.+]] = kiln.silu %[[X]]
// CHECK-NEXT: %[[Z:.+]] = kiln.silu %[[Y]]
// CHECK-NEXT: %[[S:.+]] = kiln.wait %[[R]]
// CHECK-NEXT: return %[[S]], %[[Z]]
func.func @reduce_scatter_early(%a: tensor<4x4xbf16>, %b: tensor<4x4xf32>, %x: tensor<4x4xf32>) -> (tensor<16xf32>, tensor<4x4xf32>) {
  %ga = kiln.silu %a : tensor<4x4xbf16>
  %gb = kiln.mul %b, %b : tensor<4x4xf32>
  %y = kiln.silu %x : tensor<4x4xf32>
  %z = kiln.silu %y : tensor<4x4xf32>
  %ca = kiln.cast %ga : tensor<4x4xbf16> -> tensor<4x4xf32>
  %flat = kiln.flatten %ca, %gb [0, 16] : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<32xf32>
  %r = kiln.reduce_scatter_start %flat over dp_shard {group = "g", ranks = 2 : i64, reduction = "mean"} : tensor<32xf32> -> tensor<16xf32>
  %s = kiln.wait %r : tensor<16xf32>
  return %s, %z : tensor<16xf32>, tensor<4x4xf32>
}

// -----

// Two layers' gradient buffers: the first one's reduce-scatter is waited
// for before the second buffer is packed, so no more than two unsharded
// gradient buffers are ever live; the second wait goes last.
// CHECK-LABEL: func.func @two_gradient_buffers(
// CHECK: %[[G1:.+]] = kiln.add
// CHECK-NEXT: %[[F1:.+]] = kiln.flatten %[[G1]] [0]
// CHECK-NEXT: %[[R1:.+]] = kiln.reduce_scatter_start %[[F1]] over dp_shard {group = "g1"
// CHECK-NEXT: %[[G2:.+]] = kiln.linear
// CHECK-NEXT: %[[S1:.+]] = kiln.wait %[[R1]]
// CHECK-NEXT: %[[F2:.+]] = kiln.flatten %[[G2]] [0]
// CHECK-NEXT: %[[R2:.+]] = kiln.reduce_scatter_start %[[F2]] over dp_shard {group = "g2"
// CHECK-NEXT: %[[S2:.+]] = kiln.wait %[[R2]]
// CHECK-NEXT: return %[[S1]], %[[S2]]
func.func @two_gradient_buffers(%a: tensor<4x4xf32>, %b: tensor<4x4xf32>, %c: tensor<4x4xf32>, %d: tensor<4x4xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %g1 = kiln.add %a, %b : tensor<4x4xf32>
  %f1 = kiln.flatten %g1 [0] : tensor<4x4xf32> -> tensor<16xf32>
  %r1 = kiln.reduce_scatter_start %f1 over dp_shard {group = "g1", ranks = 2 : i64, reduction = "mean"} : tensor<16xf32> -> tensor<8xf32>
  %g2 = kiln.linear wq %c, %d param("b") : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  %f2 = kiln.flatten %g2 [0] : tensor<4x4xf32> -> tensor<16xf32>
  %r2 = kiln.reduce_scatter_start %f2 over dp_shard {group = "g2", ranks = 2 : i64, reduction = "mean"} : tensor<16xf32> -> tensor<8xf32>
  %s1 = kiln.wait %r1 : tensor<8xf32>
  %s2 = kiln.wait %r2 : tensor<8xf32>
  return %s1, %s2 : tensor<8xf32>, tensor<8xf32>
}

// -----

// One layer's gradients in two buffers (the FP8 all-gather's weights and
// the norms), packed with no compute between: both reduce-scatters stay in
// flight together (waiting for the first before packing the second would
// expose it whole), and both are waited for before the next layer's
// buffer is packed.
// CHECK-LABEL: func.func @one_layer_two_buffers(
// CHECK: %[[RA:.+]] = kiln.reduce_scatter_start {{.*}}group = "g1.fp8"
// CHECK-NEXT: kiln.silu
// CHECK-NEXT: %[[FB:.+]] = kiln.flatten
// CHECK-NEXT: %[[RB:.+]] = kiln.reduce_scatter_start %[[FB]] over dp_shard {group = "g1"
// CHECK-NEXT: %[[G2:.+]] = kiln.linear
// CHECK-NEXT: %[[SA:.+]] = kiln.wait %[[RA]]
// CHECK-NEXT: %[[SB:.+]] = kiln.wait %[[RB]]
// CHECK-NEXT: %[[F2:.+]] = kiln.flatten %[[G2]] [0]
// CHECK-NEXT: %[[R2:.+]] = kiln.reduce_scatter_start %[[F2]] over dp_shard {group = "g2"
func.func @one_layer_two_buffers(%a: tensor<4x4xf32>, %b: tensor<4x4xf32>, %c: tensor<4x4xf32>, %d: tensor<4x4xf32>) -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) {
  %pa = kiln.silu %a : tensor<4x4xf32>
  %fa = kiln.flatten %pa [0] : tensor<4x4xf32> -> tensor<16xf32>
  %ra = kiln.reduce_scatter_start %fa over dp_shard {group = "g1.fp8", ranks = 2 : i64, reduction = "mean"} : tensor<16xf32> -> tensor<8xf32>
  %pb = kiln.silu %b : tensor<4x4xf32>
  %fb = kiln.flatten %pb [0] : tensor<4x4xf32> -> tensor<16xf32>
  %rb = kiln.reduce_scatter_start %fb over dp_shard {group = "g1", ranks = 2 : i64, reduction = "mean"} : tensor<16xf32> -> tensor<8xf32>
  %g2 = kiln.linear wq %c, %d param("b") : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  %f2 = kiln.flatten %g2 [0] : tensor<4x4xf32> -> tensor<16xf32>
  %r2 = kiln.reduce_scatter_start %f2 over dp_shard {group = "g2", ranks = 2 : i64, reduction = "mean"} : tensor<16xf32> -> tensor<8xf32>
  %sa = kiln.wait %ra : tensor<8xf32>
  %sb = kiln.wait %rb : tensor<8xf32>
  %s2 = kiln.wait %r2 : tensor<8xf32>
  return %sa, %sb, %s2 : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
}

// -----

// An axis's collectives run in issue order, so a gather started after a
// reduce-scatter with no GEMM between them would wait for the whole
// reduce-scatter, although the next GEMMs read the gather and only the
// layer after reads the scatter. The gather goes first, with the cast of
// its shard: here "n1" (a layer's norm weight in the FP8 all-gather's
// backward, read a few GEMMs later) ahead of the layer before's gradient
// buffer "g2", across the elementwise silu. The tp reduce-scatter runs on
// its own stream and keeps its place; "b", with a GEMM between it and the
// reduce-scatters, is not moved across them.
// CHECK-LABEL: func.func @gather_before_scatter(
// CHECK: kiln.linear wk
// CHECK-NEXT: %[[C1:.+]] = kiln.cast
// CHECK-NEXT: %[[N1:.+]] = kiln.all_gather_start %[[C1]] over dp_shard {group = "n1"
// CHECK-NEXT: kiln.reduce_scatter_start {{.*}} over dp_shard {group = "g2"
// CHECK-NEXT: kiln.silu
// CHECK-NEXT: kiln.reduce_scatter_start {{.*}} over tp {group = "t"
// CHECK-NEXT: kiln.wait
// CHECK-NEXT: kiln.unflatten
// CHECK-NEXT: kiln.linear wq
// CHECK-NEXT: kiln.wait %[[N1]]
// CHECK-NEXT: kiln.all_gather_start {{.*}}group = "b"
// CHECK-NEXT: kiln.unflatten
// CHECK-NEXT: kiln.mul
// CHECK-NEXT: kiln.linear wo
func.func @gather_before_scatter(%s0: tensor<8xbf16>, %n1: tensor<8xf32>, %s1: tensor<8xbf16>, %g: tensor<16xf32>, %t: tensor<16xf32>, %x: tensor<4x4xbf16>) -> (tensor<4x4xbf16>, tensor<8xf32>, tensor<8xf32>, tensor<4x4xbf16>) {
  %g0 = kiln.all_gather_start %s0 over dp_shard {group = "a", ranks = 2 : i64} : tensor<8xbf16> -> tensor<16xbf16>
  %x1 = kiln.linear wk %x, %x param("p.k") : tensor<4x4xbf16>, tensor<4x4xbf16> -> tensor<4x4xbf16>
  %r2 = kiln.reduce_scatter_start %g over dp_shard {group = "g2", ranks = 2 : i64, reduction = "mean"} : tensor<16xf32> -> tensor<8xf32>
  %x2 = kiln.silu %x1 : tensor<4x4xbf16>
  %rt = kiln.reduce_scatter_start %t over tp {group = "t", ranks = 2 : i64, reduction = "sum"} : tensor<16xf32> -> tensor<8xf32>
  %f0 = kiln.wait %g0 : tensor<16xbf16>
  %w0 = kiln.unflatten %f0[0] : tensor<16xbf16> -> tensor<4x4xbf16>
  %c1 = kiln.cast %n1 : tensor<8xf32> -> tensor<8xbf16>
  %gn = kiln.all_gather_start %c1 over dp_shard {group = "n1", ranks = 2 : i64} : tensor<8xbf16> -> tensor<16xbf16>
  %y0 = kiln.linear wq %x1, %w0 param("a.q") : tensor<4x4xbf16>, tensor<4x4xbf16> -> tensor<4x4xbf16>
  %fn = kiln.wait %gn : tensor<16xbf16>
  %wn = kiln.unflatten %fn[0] : tensor<16xbf16> -> tensor<4x4xbf16>
  %z0 = kiln.mul %y0, %wn : tensor<4x4xbf16>
  %s2 = kiln.wait %r2 : tensor<8xf32>
  %g1 = kiln.all_gather_start %s1 over dp_shard {group = "b", ranks = 2 : i64} : tensor<8xbf16> -> tensor<16xbf16>
  %z1 = kiln.linear wo %z0, %z0 param("b.o") : tensor<4x4xbf16>, tensor<4x4xbf16> -> tensor<4x4xbf16>
  %f1 = kiln.wait %g1 : tensor<16xbf16>
  %w1 = kiln.unflatten %f1[0] : tensor<16xbf16> -> tensor<4x4xbf16>
  %z2 = kiln.mul %z1, %w1 : tensor<4x4xbf16>
  %st = kiln.wait %rt : tensor<8xf32>
  return %z2, %s2, %st, %x2 : tensor<4x4xbf16>, tensor<8xf32>, tensor<8xf32>, tensor<4x4xbf16>
}

// -----

// Sequence parallel's reduce-scatter of an input gradient (the dual of the
// gather before a column-parallel pair, w1 and w3 here) starts as soon as
// the pair's input gradients are summed. The weight gradients computed
// beside them, which it does not read, go after it and overlap it (as
// Megatron overlaps them). Only what follows the last value they share
// with it (the silu) moves, so no value read by both lives longer than
// the scatter's own inputs; the window starts at the previous collective
// over tp.
// CHECK-LABEL: func.func @scatter_before_weight_grads(
// CHECK-SAME: %[[DY:[^:]+]]: tensor<16xbf16>, %[[X:[^:]+]]: tensor<4x8xbf16>, %[[W1:[^:]+]]: tensor<8x8xbf16>, %[[W3:[^:]+]]: tensor<8x8xbf16>
// CHECK: %[[H:.+]] = kiln.silu
// CHECK-NEXT: %[[D3:.+]] = kiln.linear_grad_input w3 %[[H]], %[[W3]]
// CHECK-NEXT: %[[D1:.+]] = kiln.linear_grad_input w1 %[[H]], %[[W1]]
// CHECK-NEXT: %[[S:.+]] = kiln.add %[[D3]], %[[D1]]
// CHECK-NEXT: %[[F:.+]] = kiln.reshape %[[S]]
// CHECK-NEXT: %[[R:.+]] = kiln.reduce_scatter_start %[[F]] over tp
// CHECK-NEXT: %[[G3:.+]] = kiln.linear_grad_weight w3 %[[H]], %[[X]]
// CHECK-NEXT: %[[C3:.+]] = kiln.cast %[[G3]]
// CHECK-NEXT: %[[G1:.+]] = kiln.linear_grad_weight w1 %[[H]], %[[X]]
// CHECK-NEXT: %[[C1:.+]] = kiln.cast %[[G1]]
// CHECK-NEXT: %[[O:.+]] = kiln.wait %[[R]]
// CHECK-NEXT: return %[[O]], %[[C3]], %[[C1]]
func.func @scatter_before_weight_grads(%dy: tensor<16xbf16>, %x: tensor<4x8xbf16>, %w1: tensor<8x8xbf16>, %w3: tensor<8x8xbf16>) -> (tensor<16xbf16>, tensor<8x8xf32>, tensor<8x8xf32>) {
  %g = kiln.all_gather_start %dy over tp {group = "dy", ranks = 2 : i64} : tensor<16xbf16> -> tensor<32xbf16>
  %gw = kiln.wait %g : tensor<32xbf16>
  %dyf = kiln.reshape %gw : tensor<32xbf16> -> tensor<4x8xbf16>
  %h = kiln.silu %dyf : tensor<4x8xbf16>
  %d3 = kiln.linear_grad_input w3 %h, %w3 param("w3") : tensor<4x8xbf16>, tensor<8x8xbf16> -> tensor<4x8xbf16>
  %g3 = kiln.linear_grad_weight w3 %h, %x param("w3") : tensor<4x8xbf16>, tensor<4x8xbf16> -> tensor<8x8xbf16>
  %c3 = kiln.cast %g3 : tensor<8x8xbf16> -> tensor<8x8xf32>
  %d1 = kiln.linear_grad_input w1 %h, %w1 param("w1") : tensor<4x8xbf16>, tensor<8x8xbf16> -> tensor<4x8xbf16>
  %g1 = kiln.linear_grad_weight w1 %h, %x param("w1") : tensor<4x8xbf16>, tensor<4x8xbf16> -> tensor<8x8xbf16>
  %c1 = kiln.cast %g1 : tensor<8x8xbf16> -> tensor<8x8xf32>
  %s = kiln.add %d3, %d1 : tensor<4x8xbf16>
  %f = kiln.reshape %s : tensor<4x8xbf16> -> tensor<32xbf16>
  %r = kiln.reduce_scatter_start %f over tp {group = "x", ranks = 2 : i64, reduction = "sum"} : tensor<32xbf16> -> tensor<16xbf16>
  %o = kiln.wait %r : tensor<16xbf16>
  return %o, %c3, %c1 : tensor<16xbf16>, tensor<8x8xf32>, tensor<8x8xf32>
}

// -----

// In the forward, what a row-parallel linear's reduce-scatter does not
// read is no compute (a gather of the next layer's shard): nothing moves.
// CHECK-LABEL: func.func @scatter_without_compute_beside(
// CHECK: kiln.linear wo
// CHECK-NEXT: kiln.all_gather_start {{.*}}over dp_shard
// CHECK-NEXT: kiln.reshape
// CHECK-NEXT: kiln.reduce_scatter_start {{.*}}over tp
func.func @scatter_without_compute_beside(%x: tensor<4x8xbf16>, %w: tensor<8x8xbf16>, %s1: tensor<8xbf16>) -> (tensor<16xbf16>, tensor<16xbf16>) {
  %y = kiln.linear wo %x, %w param("wo") : tensor<4x8xbf16>, tensor<8x8xbf16> -> tensor<4x8xbf16>
  %g = kiln.all_gather_start %s1 over dp_shard {group = "b", ranks = 2 : i64} : tensor<8xbf16> -> tensor<16xbf16>
  %f = kiln.reshape %y : tensor<4x8xbf16> -> tensor<32xbf16>
  %r = kiln.reduce_scatter_start %f over tp {group = "x", ranks = 2 : i64, reduction = "sum"} : tensor<32xbf16> -> tensor<16xbf16>
  %o = kiln.wait %r : tensor<16xbf16>
  %n = kiln.wait %g : tensor<16xbf16>
  return %o, %n : tensor<16xbf16>, tensor<16xbf16>
}

// -----

// What precedes the last value the weight gradients share with the
// scatter's slice stays: w2's weight gradient reads the gathered gradient
// before the silu (the shared value), so it keeps its place, and only w3's
// goes after the reduce-scatter.
// CHECK-LABEL: func.func @scatter_keeps_what_precedes_shared(
// CHECK: %[[DYF:.+]] = kiln.reshape
// CHECK-NEXT: kiln.linear_grad_weight w2 %[[DYF]]
// CHECK-NEXT: %[[H:.+]] = kiln.silu %[[DYF]]
// CHECK-NEXT: kiln.linear_grad_input w3 %[[H]]
// CHECK-NEXT: kiln.reshape
// CHECK-NEXT: kiln.reduce_scatter_start {{.*}} over tp
// CHECK-NEXT: kiln.linear_grad_weight w3 %[[H]]
func.func @scatter_keeps_what_precedes_shared(%dy: tensor<16xbf16>, %x: tensor<4x8xbf16>, %w3: tensor<8x8xbf16>) -> (tensor<16xbf16>, tensor<8x8xbf16>, tensor<8x8xbf16>) {
  %g = kiln.all_gather_start %dy over tp {group = "dy", ranks = 2 : i64} : tensor<16xbf16> -> tensor<32xbf16>
  %gw = kiln.wait %g : tensor<32xbf16>
  %dyf = kiln.reshape %gw : tensor<32xbf16> -> tensor<4x8xbf16>
  %g2 = kiln.linear_grad_weight w2 %dyf, %x param("w2") : tensor<4x8xbf16>, tensor<4x8xbf16> -> tensor<8x8xbf16>
  %h = kiln.silu %dyf : tensor<4x8xbf16>
  %g3 = kiln.linear_grad_weight w3 %h, %x param("w3") : tensor<4x8xbf16>, tensor<4x8xbf16> -> tensor<8x8xbf16>
  %d3 = kiln.linear_grad_input w3 %h, %w3 param("w3") : tensor<4x8xbf16>, tensor<8x8xbf16> -> tensor<4x8xbf16>
  %f = kiln.reshape %d3 : tensor<4x8xbf16> -> tensor<32xbf16>
  %r = kiln.reduce_scatter_start %f over tp {group = "x", ranks = 2 : i64, reduction = "sum"} : tensor<32xbf16> -> tensor<16xbf16>
  %o = kiln.wait %r : tensor<16xbf16>
  return %o, %g2, %g3 : tensor<16xbf16>, tensor<8x8xbf16>, tensor<8x8xbf16>
}

// -----

// A pipeline transfer among the ops that would move (its order is matched
// by the neighbour stage) keeps everything where it is.
// CHECK-LABEL: func.func @scatter_with_pipe_send_beside(
// CHECK: kiln.linear_grad_input w3
// CHECK-NEXT: kiln.linear_grad_weight w3
// CHECK-NEXT: kiln.pipe_send_start
// CHECK-NEXT: kiln.reshape
// CHECK-NEXT: kiln.reduce_scatter_start {{.*}} over tp
func.func @scatter_with_pipe_send_beside(%h: tensor<4x8xbf16>, %x: tensor<4x8xbf16>, %w3: tensor<8x8xbf16>, %p: tensor<4xf32>) -> (tensor<16xbf16>, tensor<8x8xbf16>, tensor<f32>) {
  %d3 = kiln.linear_grad_input w3 %h, %w3 param("w3") : tensor<4x8xbf16>, tensor<8x8xbf16> -> tensor<4x8xbf16>
  %g3 = kiln.linear_grad_weight w3 %h, %x param("w3") : tensor<4x8xbf16>, tensor<4x8xbf16> -> tensor<8x8xbf16>
  %t = kiln.pipe_send_start %p over pp {peer = 1 : i64, ranks = 2 : i64, tag = 0 : i64} : tensor<4xf32> -> tensor<f32>
  %f = kiln.reshape %d3 : tensor<4x8xbf16> -> tensor<32xbf16>
  %r = kiln.reduce_scatter_start %f over tp {group = "x", ranks = 2 : i64, reduction = "sum"} : tensor<32xbf16> -> tensor<16xbf16>
  %o = kiln.wait %r : tensor<16xbf16>
  %tw = kiln.wait %t : tensor<f32>
  return %o, %g3, %tw : tensor<16xbf16>, tensor<8x8xbf16>, tensor<f32>
}
