// RUN: kiln-opt %s -split-input-file -kiln-pipeline-schedule -verify-diagnostics | FileCheck %s

// Pipeline parallel (docs/pp.md, "The schedule pass"): rank 0 of pp 2,
// 1F1B, three microbatches. Rank 0 runs one forward ahead (pp - 1 - 0),
// then a forward and a backward in turn: F0 F1 B0 F2 B1 B2. What runs once
// (the weight's product) stays first; the sum of the gradients follows its
// operands. Each send starts where its activation is ready and is waited
// for before the first unit that the simulated timeline (a forward 1, a
// backward 2) starts after the receiving unit began: rank 1 starts F0s1 at
// 1 and F1s1 at 4 (after B0s1), so the waits go before B0 (at 4) and F2
// (at 6). Tags: (microbatch x stages + receiving stage) x 2, + 1 for a
// gradient.
// CHECK-LABEL: func.func @train_step(
// CHECK: %[[C:.+]] = kiln.mul %arg1, %arg1 : tensor<4xf32>
// CHECK-NEXT: %[[A0:.+]] = kiln.mul %arg0, %[[C]] {kiln.unit = "F0s0"}
// CHECK-NEXT: %[[S0:.+]] = kiln.pipe_send_start %[[A0]] over pp {peer = 1 : i64, ranks = 2 : i64, tag = 2 : i64}
// CHECK-NEXT: %[[A1:.+]] = kiln.mul %arg0, %[[C]] {kiln.unit = "F1s0"}
// CHECK-NEXT: %[[S1:.+]] = kiln.pipe_send_start %[[A1]] over pp {peer = 1 : i64, ranks = 2 : i64, tag = 6 : i64}
// CHECK-NEXT: kiln.wait %[[S0]] : tensor<f32>
// CHECK-NEXT: %[[R0:.+]] = kiln.pipe_recv_start over pp {peer = 1 : i64, ranks = 2 : i64, tag = 1 : i64}
// CHECK-NEXT: %[[G0:.+]] = kiln.wait %[[R0]] : tensor<4xf32>
// CHECK-NEXT: %[[D0:.+]] = kiln.mul %[[G0]], %arg0 {kiln.unit = "B0s0"}
// CHECK-NEXT: kiln.wait %[[S1]] : tensor<f32>
// CHECK-NEXT: %[[A2:.+]] = kiln.mul %arg0, %[[C]] {kiln.unit = "F2s0"}
// CHECK-NEXT: %[[S2:.+]] = kiln.pipe_send_start %[[A2]] over pp {peer = 1 : i64, ranks = 2 : i64, tag = 10 : i64}
// CHECK-NEXT: kiln.pipe_recv_start over pp {peer = 1 : i64, ranks = 2 : i64, tag = 5 : i64}
// CHECK-NEXT: kiln.wait
// CHECK-NEXT: %[[D1:.+]] = kiln.mul %{{.+}}, %arg0 {kiln.unit = "B1s0"}
// CHECK-NEXT: %[[SUM:.+]] = kiln.add %[[D0]], %[[D1]] : tensor<4xf32>
// CHECK-NEXT: kiln.wait %[[S2]] : tensor<f32>
// CHECK-NEXT: kiln.pipe_recv_start over pp {peer = 1 : i64, ranks = 2 : i64, tag = 9 : i64}
// CHECK-NEXT: kiln.wait
// CHECK-NEXT: %[[D2:.+]] = kiln.mul %{{.+}}, %arg0 {kiln.unit = "B2s0"}
// CHECK-NEXT: %[[ALL:.+]] = kiln.add %[[SUM]], %[[D2]]
// CHECK-NEXT: return %[[ALL]]
module attributes {kiln.mesh = #kiln.mesh<pp = 2, dp_shard = 1, tp = 1>, kiln.pp = {rank = 0 : i64, stages = 2 : i64, schedule = "1F1B"}, kiln.microbatches = 3 : i64} {
  func.func @train_step(%x: tensor<4xf32>, %w: tensor<4xf32>) -> tensor<4xf32> {
    %c = kiln.mul %w, %w : tensor<4xf32>
    %a0 = kiln.mul %x, %c {kiln.microbatch = 0 : i64} : tensor<4xf32>
    kiln.pipe_send %a0 activation {kiln.microbatch = 0 : i64, stage = 0 : i64, stages = 2 : i64} : tensor<4xf32>
    %g0 = kiln.pipe_recv gradient {kiln.microbatch = 0 : i64, stage = 0 : i64, stages = 2 : i64} : tensor<4xf32>
    %d0 = kiln.mul %g0, %x {kiln.microbatch = 0 : i64} : tensor<4xf32>
    %a1 = kiln.mul %x, %c {kiln.microbatch = 1 : i64} : tensor<4xf32>
    kiln.pipe_send %a1 activation {kiln.microbatch = 1 : i64, stage = 0 : i64, stages = 2 : i64} : tensor<4xf32>
    %g1 = kiln.pipe_recv gradient {kiln.microbatch = 1 : i64, stage = 0 : i64, stages = 2 : i64} : tensor<4xf32>
    %d1 = kiln.mul %g1, %x {kiln.microbatch = 1 : i64} : tensor<4xf32>
    %s1 = kiln.add %d0, %d1 : tensor<4xf32>
    %a2 = kiln.mul %x, %c {kiln.microbatch = 2 : i64} : tensor<4xf32>
    kiln.pipe_send %a2 activation {kiln.microbatch = 2 : i64, stage = 0 : i64, stages = 2 : i64} : tensor<4xf32>
    %g2 = kiln.pipe_recv gradient {kiln.microbatch = 2 : i64, stage = 0 : i64, stages = 2 : i64} : tensor<4xf32>
    %d2 = kiln.mul %g2, %x {kiln.microbatch = 2 : i64} : tensor<4xf32>
    %s2 = kiln.add %s1, %d2 : tensor<4xf32>
    return %s2 : tensor<4xf32>
  }
}

// -----

// A middle stage (rank 1 of pp 3), GPipe, two microbatches: both forwards,
// then both backwards. Each forward receives its activation from rank 0
// and sends its output to rank 2; each backward receives the gradient from
// rank 2 and sends its input's gradient to rank 0. Rank 2 starts its
// backwards only after both forwards, so both activation sends are waited
// for before B0; the gradient sends at the end.
// CHECK-LABEL: func.func @train_step(
// CHECK-NEXT: %[[R:.+]] = kiln.pipe_recv_start over pp {peer = 0 : i64, ranks = 3 : i64, tag = 2 : i64}
// CHECK-NEXT: %[[H0:.+]] = kiln.wait %[[R]]
// CHECK-NEXT: kiln.mul %[[H0]], %arg0 {kiln.unit = "F0s1"}
// CHECK-NEXT: %[[S0:.+]] = kiln.pipe_send_start %{{.+}} over pp {peer = 2 : i64, ranks = 3 : i64, tag = 4 : i64}
// CHECK-NEXT: kiln.pipe_recv_start over pp {peer = 0 : i64, ranks = 3 : i64, tag = 8 : i64}
// CHECK-NEXT: kiln.wait
// CHECK-NEXT: kiln.mul %{{.+}}, %arg0 {kiln.unit = "F1s1"}
// CHECK-NEXT: %[[S1:.+]] = kiln.pipe_send_start %{{.+}} over pp {peer = 2 : i64, ranks = 3 : i64, tag = 10 : i64}
// CHECK-NEXT: kiln.wait %[[S0]]
// CHECK-NEXT: kiln.wait %[[S1]]
// CHECK-NEXT: kiln.pipe_recv_start over pp {peer = 2 : i64, ranks = 3 : i64, tag = 3 : i64}
// CHECK-NEXT: %[[G0:.+]] = kiln.wait
// CHECK-NEXT: kiln.mul %[[G0]], %[[H0]] {kiln.unit = "B0s1"}
// CHECK-NEXT: %[[E0:.+]] = kiln.mul %[[G0]], %arg0 {kiln.unit = "B0s1"}
// CHECK-NEXT: %[[B0:.+]] = kiln.pipe_send_start %[[E0]] over pp {peer = 0 : i64, ranks = 3 : i64, tag = 1 : i64}
// CHECK: kiln.pipe_send_start %{{.+}} over pp {peer = 0 : i64, ranks = 3 : i64, tag = 7 : i64}
// CHECK: kiln.wait %[[B0]]
// CHECK: return
module attributes {kiln.mesh = #kiln.mesh<pp = 3, dp_shard = 1, tp = 1>, kiln.pp = {rank = 1 : i64, stages = 3 : i64, schedule = "GPipe"}, kiln.microbatches = 2 : i64} {
  func.func @train_step(%w: tensor<4xf32>) -> tensor<4xf32> {
    %h0 = kiln.pipe_recv activation {kiln.microbatch = 0 : i64, stage = 1 : i64, stages = 3 : i64} : tensor<4xf32>
    %a0 = kiln.mul %h0, %w {kiln.microbatch = 0 : i64} : tensor<4xf32>
    kiln.pipe_send %a0 activation {kiln.microbatch = 0 : i64, stage = 1 : i64, stages = 3 : i64} : tensor<4xf32>
    %g0 = kiln.pipe_recv gradient {kiln.microbatch = 0 : i64, stage = 1 : i64, stages = 3 : i64} : tensor<4xf32>
    %d0 = kiln.mul %g0, %h0 {kiln.microbatch = 0 : i64} : tensor<4xf32>
    %e0 = kiln.mul %g0, %w {kiln.microbatch = 0 : i64} : tensor<4xf32>
    kiln.pipe_send %e0 gradient {kiln.microbatch = 0 : i64, stage = 1 : i64, stages = 3 : i64} : tensor<4xf32>
    %h1 = kiln.pipe_recv activation {kiln.microbatch = 1 : i64, stage = 1 : i64, stages = 3 : i64} : tensor<4xf32>
    %a1 = kiln.mul %h1, %w {kiln.microbatch = 1 : i64} : tensor<4xf32>
    kiln.pipe_send %a1 activation {kiln.microbatch = 1 : i64, stage = 1 : i64, stages = 3 : i64} : tensor<4xf32>
    %g1 = kiln.pipe_recv gradient {kiln.microbatch = 1 : i64, stage = 1 : i64, stages = 3 : i64} : tensor<4xf32>
    %d1 = kiln.mul %g1, %h1 {kiln.microbatch = 1 : i64} : tensor<4xf32>
    %e1 = kiln.mul %g1, %w {kiln.microbatch = 1 : i64} : tensor<4xf32>
    kiln.pipe_send %e1 gradient {kiln.microbatch = 1 : i64, stage = 1 : i64, stages = 3 : i64} : tensor<4xf32>
    %s = kiln.add %d0, %d1 : tensor<4xf32>
    return %s : tensor<4xf32>
  }
}

// -----

// pipe_c: one microbatch's ops that read one another are one stage.
module attributes {kiln.mesh = #kiln.mesh<pp = 3, dp_shard = 1, tp = 1>, kiln.pp = {rank = 1 : i64, stages = 3 : i64, schedule = "GPipe"}} {
  func.func @train_step(%w: tensor<4xf32>) -> tensor<4xf32> {
    %h0 = kiln.pipe_recv activation {kiln.microbatch = 0 : i64, stage = 1 : i64, stages = 3 : i64} : tensor<4xf32>
    // expected-error @+1 {{connects pipeline stages 1 and 2 within one microbatch; stages meet only through transfers}}
    kiln.pipe_send %h0 gradient {kiln.microbatch = 0 : i64, stage = 2 : i64, stages = 3 : i64} : tensor<4xf32>
    return %w : tensor<4xf32>
  }
}

// -----

// expected-error @+1 {{a module with pp > 1 needs 'kiln.pp' = {rank = <position on the pp axis>, stages = <a multiple of pp>, schedule = "GPipe" | "1F1B" | "Interleaved1F1B"}}}
module attributes {kiln.mesh = #kiln.mesh<pp = 2, dp_shard = 1, tp = 1>, kiln.pp = {rank = 0 : i64, stages = 2 : i64, schedule = "ZeroBubble"}} {
}

// -----

// expected-error @+1 {{pipeline parallel: 8193 microbatches x 2 stages need transfer tags up to 32771, above MPI's least bound 32767}}
module attributes {kiln.mesh = #kiln.mesh<pp = 2, dp_shard = 1, tp = 1>, kiln.pp = {rank = 0 : i64, stages = 2 : i64, schedule = "1F1B"}, kiln.microbatches = 8193 : i64} {
}
