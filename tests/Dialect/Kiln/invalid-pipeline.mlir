// RUN: kiln-opt %s -split-input-file -verify-diagnostics

// Pipeline parallel (KilnPipelineOps.td) and the mesh's pp axis: one case
// per rule.

// expected-error @+1 {{#kiln.mesh: pp, dp_shard and tp must be at least 1, got pp = 0, dp_shard = 2, tp = 2}}
module @mesh_c1_pp attributes {kiln.mesh = #kiln.mesh<pp = 0, dp_shard = 2, tp = 2>} {
}

// -----

// expected-error @+1 {{#kiln.mesh: pp x dp_shard x tp (4096 x 1024 x 1024) must be below 2^31 ranks}}
module @mesh_c2_pp attributes {kiln.mesh = #kiln.mesh<pp = 4096, dp_shard = 1024, tp = 1024>} {
}

// -----

func.func @pipe_c1_stage(%h: tensor<4xf32>) {
  // expected-error @+1 {{'kiln.pipe_send' op stage 2 must lie in [0, stages) with stages >= 2, got 2 stages}}
  kiln.pipe_send %h activation {stage = 2 : i64, stages = 2 : i64} : tensor<4xf32>
  return
}

// -----

func.func @pipe_c1_last(%h: tensor<4xf32>) {
  // expected-error @+1 {{'kiln.pipe_send' op stage 1 has no stage to send an activation to}}
  kiln.pipe_send %h activation {stage = 1 : i64, stages = 2 : i64} : tensor<4xf32>
  return
}

// -----

func.func @pipe_c1_first() {
  // expected-error @+1 {{'kiln.pipe_recv' op stage 0 has no stage to receive an activation from}}
  %h = kiln.pipe_recv activation {stage = 0 : i64, stages = 2 : i64} : tensor<4xf32>
  return
}

// -----

func.func @pipe_start_c1(%h: tensor<4xf32>) {
  // expected-error @+1 {{'kiln.pipe_send_start' op peer 2 must lie in [0, ranks) with ranks >= 2, got 2 ranks}}
  %t = kiln.pipe_send_start %h over pp {peer = 2 : i64, ranks = 2 : i64, tag = 0 : i64} : tensor<4xf32> -> tensor<f32>
  %d = kiln.wait %t : tensor<f32>
  return
}

// -----

func.func @pipe_start_c1_tag() {
  // expected-error @+1 {{'kiln.pipe_recv_start' op tag must be at least 0, got -1}}
  %p = kiln.pipe_recv_start over pp {peer = 1 : i64, ranks = 2 : i64, tag = -1 : i64} : tensor<4xf32>
  %r = kiln.wait %p : tensor<4xf32>
  return
}

// -----

func.func @pipe_start_c2(%h: tensor<4xf32>) {
  // expected-error @+1 {{'kiln.pipe_send_start' op result must have one user, a kiln.wait}}
  %t = kiln.pipe_send_start %h over pp {peer = 1 : i64, ranks = 2 : i64, tag = 0 : i64} : tensor<4xf32> -> tensor<f32>
  return
}

// -----

module attributes {kiln.mesh = #kiln.mesh<pp = 4, dp_shard = 1, tp = 1>} {
  func.func @collective_axis_pp(%h: tensor<4xf32>) {
    // expected-error @+1 {{'kiln.pipe_send_start' op runs over 2 ranks, but the mesh's pp axis has 4}}
    %t = kiln.pipe_send_start %h over pp {peer = 1 : i64, ranks = 2 : i64, tag = 0 : i64} : tensor<4xf32> -> tensor<f32>
    %d = kiln.wait %t : tensor<f32>
    return
  }
}
