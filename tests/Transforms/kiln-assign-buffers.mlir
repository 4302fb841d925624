// RUN: kiln-opt %s -split-input-file -kiln-assign-buffers | FileCheck %s
// With place=false (kiln plan's probes) the bytes live are counted as
// placed, but no buffer gets an offset and there is no arena; offsets an
// earlier placement left are taken away.
// RUN: kiln-opt %s -split-input-file -kiln-assign-buffers='place=false' | FileCheck %s --check-prefix=COUNT
// RUN: kiln-opt %s -split-input-file -kiln-assign-buffers -kiln-assign-buffers='place=false' | FileCheck %s --check-prefix=COUNT

// A chain: %a is dead once %b is computed, so %c takes %a's bytes; %b,
// live at the same step as either, has bytes of its own. Sizes are exact
// (64 f32 = 256 bytes); the arena is two buffers.
// CHECK-LABEL: func.func @chain(
// CHECK-SAME: attributes {kiln.arena_bytes = 512 : i64, kiln.live_at_peak = {activations = 512 : i64, gradients = 0 : i64, parameter_copies = 0 : i64, peak_step = 1 : i64}}
// CHECK-NEXT: %[[A:.+]] = kiln.silu %{{.+}} {kiln.arena_offsets = array<i64: 0>, kiln.arena_sizes = array<i64: 256>}
// CHECK-NEXT: %[[B:.+]] = kiln.silu %[[A]] {kiln.arena_offsets = array<i64: 256>, kiln.arena_sizes = array<i64: 256>}
// CHECK-NEXT: %[[C:.+]] = kiln.silu %[[B]] {kiln.arena_offsets = array<i64: 0>, kiln.arena_sizes = array<i64: 256>}
// CHECK-NEXT: return %[[C]]
// COUNT-LABEL: func.func @chain(
// COUNT-SAME: attributes {kiln.live_at_peak = {activations = 512 : i64, gradients = 0 : i64, parameter_copies = 0 : i64, peak_step = 1 : i64}} {
// COUNT-NEXT: %[[A:.+]] = kiln.silu %{{[^ ]+}} : tensor<64xf32>
// COUNT-NEXT: %[[B:.+]] = kiln.silu %[[A]] : tensor<64xf32>
// COUNT-NEXT: %[[C:.+]] = kiln.silu %[[B]] : tensor<64xf32>
// COUNT-NEXT: return %[[C]]
func.func @chain(%x: tensor<64xf32>) -> tensor<64xf32> {
  %a = kiln.silu %x : tensor<64xf32>
  %b = kiln.silu %a : tensor<64xf32>
  %c = kiln.silu %b : tensor<64xf32>
  return %c : tensor<64xf32>
}

// -----

// Three buffers live at the same step (the add reads both operands while
// writing its result): no two share a byte. Each starts at a multiple of
// 64 bytes, whatever its size (12 bytes here).
// CHECK-LABEL: func.func @overlapping(
// CHECK-SAME: attributes {kiln.arena_bytes = 192 : i64
// CHECK-NEXT: %[[A:.+]] = kiln.silu %{{.+}} {kiln.arena_offsets = array<i64: 0>, kiln.arena_sizes = array<i64: 12>}
// CHECK-NEXT: %[[B:.+]] = kiln.silu %{{.+}} {kiln.arena_offsets = array<i64: 64>, kiln.arena_sizes = array<i64: 12>}
// CHECK-NEXT: %[[C:.+]] = kiln.add %[[A]], %[[B]] {kiln.arena_offsets = array<i64: 128>, kiln.arena_sizes = array<i64: 12>}
func.func @overlapping(%x: tensor<3xf32>) -> tensor<3xf32> {
  %a = kiln.silu %x : tensor<3xf32>
  %b = kiln.silu %x : tensor<3xf32>
  %c = kiln.add %a, %b : tensor<3xf32>
  return %c : tensor<3xf32>
}

// -----

// A collective keeps its operand live until its wait (the runtime may
// still be sending it), though no op reads it after the start: %y, %z and
// %w, computed while the gather runs, take none of %c's bytes. The wait's
// result is the start's buffer (no offset of its own), live until its last
// reader, the return.
// CHECK-LABEL: func.func @async(
// CHECK-SAME: attributes {kiln.arena_bytes = 1280 : i64
// CHECK-NEXT: %[[C:.+]] = kiln.silu %{{.+}} {kiln.arena_offsets = array<i64: 512>, kiln.arena_sizes = array<i64: 256>}
// CHECK-NEXT: %[[G:.+]] = kiln.all_gather_start %[[C]] over dp_shard {group = "g", kiln.arena_offsets = array<i64: 0>, kiln.arena_sizes = array<i64: 512>, ranks = 2 : i64}
// CHECK-NEXT: %[[Y:.+]] = kiln.silu %{{.+}} {kiln.arena_offsets = array<i64: 768>, kiln.arena_sizes = array<i64: 256>}
// CHECK-NEXT: %[[Z:.+]] = kiln.silu %[[Y]] {kiln.arena_offsets = array<i64: 1024>, kiln.arena_sizes = array<i64: 256>}
// CHECK-NEXT: %[[W:.+]] = kiln.silu %[[Z]] {kiln.arena_offsets = array<i64: 768>, kiln.arena_sizes = array<i64: 256>}
// CHECK-NEXT: %[[F:.+]] = kiln.wait %[[G]] : tensor<128xf32>
// CHECK-NEXT: return %[[F]], %[[W]]
func.func @async(%s: tensor<64xf32>, %x: tensor<64xf32>) -> (tensor<128xf32>, tensor<64xf32>) {
  %c = kiln.silu %s : tensor<64xf32>
  %g = kiln.all_gather_start %c over dp_shard {group = "g", ranks = 2 : i64} : tensor<64xf32> -> tensor<128xf32>
  %y = kiln.silu %x : tensor<64xf32>
  %z = kiln.silu %y : tensor<64xf32>
  %w = kiln.silu %z : tensor<64xf32>
  %f = kiln.wait %g : tensor<128xf32>
  return %f, %w : tensor<128xf32>, tensor<64xf32>
}

// -----

// The same step with a synchronous op in the collective's place: %c dies
// at its last reader, and %y takes its bytes.
// CHECK-LABEL: func.func @sync(
// CHECK-NEXT: %[[C:.+]] = kiln.silu %{{.+}} {kiln.arena_offsets = array<i64: 0>, kiln.arena_sizes = array<i64: 256>}
// CHECK-NEXT: %[[G:.+]] = kiln.mul %[[C]], %[[C]] {kiln.arena_offsets = array<i64: 256>, kiln.arena_sizes = array<i64: 256>}
// CHECK-NEXT: %[[Y:.+]] = kiln.silu %{{.+}} {kiln.arena_offsets = array<i64: 0>, kiln.arena_sizes = array<i64: 256>}
func.func @sync(%s: tensor<64xf32>, %x: tensor<64xf32>) -> (tensor<64xf32>, tensor<64xf32>) {
  %c = kiln.silu %s : tensor<64xf32>
  %g = kiln.mul %c, %c : tensor<64xf32>
  %y = kiln.silu %x : tensor<64xf32>
  %z = kiln.silu %y : tensor<64xf32>
  %w = kiln.silu %z : tensor<64xf32>
  return %g, %w : tensor<64xf32>, tensor<64xf32>
}

// -----

// AdamW writes the states it reads: its results get no offset. At the peak
// (step 1), the bf16 copy of the parameter (a cast of an argument) and the
// product, which becomes AdamW's gradient through a cast, are live: 64
// bytes each after alignment.
// CHECK-LABEL: func.func @categories(
// CHECK-SAME: attributes {kiln.arena_bytes = 128 : i64, kiln.live_at_peak = {activations = 0 : i64, gradients = 64 : i64, parameter_copies = 64 : i64, peak_step = 1 : i64}}
// CHECK-NEXT: %[[C:.+]] = kiln.cast %{{.+}} {kiln.arena_offsets = array<i64: 0>, kiln.arena_sizes = array<i64: 32>} : tensor<16xf32> -> tensor<16xbf16>
// CHECK-NEXT: %[[Y:.+]] = kiln.mul %[[C]], %[[C]] {kiln.arena_offsets = array<i64: 64>, kiln.arena_sizes = array<i64: 32>}
// CHECK-NEXT: %[[G:.+]] = kiln.cast %[[Y]] {kiln.arena_offsets = array<i64: 0>, kiln.arena_sizes = array<i64: 64>}
// CHECK-NEXT: kiln.adamw %{{.+}}, %[[G]], {{.*}} {beta1 = 9.000000e-01 : f64, beta2 = 0.94999999999999996 : f64, eps = 1.000000e-08 : f64, max_norm = 1.000000e+00 : f64, weight_decay = 1.000000e-01 : f64} : tensor<16xf32>
func.func @categories(%p: tensor<16xf32>, %m: tensor<16xf32>, %v: tensor<16xf32>, %n: tensor<f32>, %lr: tensor<f32>, %step: tensor<i64>) -> (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>) {
  %c = kiln.cast %p : tensor<16xf32> -> tensor<16xbf16>
  %y = kiln.mul %c, %c : tensor<16xbf16>
  %g = kiln.cast %y : tensor<16xbf16> -> tensor<16xf32>
  %p2, %m2, %v2 = kiln.adamw %p, %g, %m, %v, %n, %lr, %step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, max_norm = 1.0 : f64, weight_decay = 0.1 : f64} : tensor<16xf32>
  return %p2, %m2, %v2 : tensor<16xf32>, tensor<16xf32>, tensor<16xf32>
}

// -----

// A reshape of an arena value is a view: no buffer of its own (no offset),
// and its operand's buffer lives until the view's last reader. %a is read
// through %v after its own last direct reader, so nothing takes %a's bytes
// before %d. A reshape of an argument is a copy with a buffer of its own,
// and a view of a wait's result (%u, returned) keeps the collective's
// buffer live to the end. The gather's buffer, the largest, is placed
// first, at 0; %b, live before it, shares its bytes.
// CHECK-LABEL: func.func @views(
// CHECK-SAME: attributes {kiln.arena_bytes = 1280 : i64
// CHECK-NEXT: %[[A:.+]] = kiln.silu %{{.+}} {kiln.arena_offsets = array<i64: 512>, kiln.arena_sizes = array<i64: 256>}
// CHECK-NEXT: %[[V:.+]] = kiln.reshape %[[A]] : tensor<64xf32> -> tensor<8x8xf32>
// CHECK-NEXT: %[[B:.+]] = kiln.silu %[[A]] {kiln.arena_offsets = array<i64: 0>, kiln.arena_sizes = array<i64: 256>}
// CHECK-NEXT: %[[C:.+]] = kiln.silu %[[B]] {kiln.arena_offsets = array<i64: 768>, kiln.arena_sizes = array<i64: 256>}
// CHECK-NEXT: %[[R:.+]] = kiln.reshape %{{.+}} {kiln.arena_offsets = array<i64: 1024>, kiln.arena_sizes = array<i64: 256>} : tensor<64xf32> -> tensor<8x8xf32>
// CHECK-NEXT: %[[G:.+]] = kiln.all_gather_start %[[C]] over dp_shard {group = "g", kiln.arena_offsets = array<i64: 0>, kiln.arena_sizes = array<i64: 512>, ranks = 2 : i64}
// CHECK-NEXT: %[[F:.+]] = kiln.wait %[[G]] : tensor<128xf32>
// CHECK-NEXT: %[[U:.+]] = kiln.reshape %[[F]] : tensor<128xf32> -> tensor<16x8xf32>
// CHECK-NEXT: %[[D:.+]] = kiln.silu %[[V]] {kiln.arena_offsets = array<i64: 768>, kiln.arena_sizes = array<i64: 256>}
// CHECK-NEXT: return %[[D]], %[[R]], %[[U]]
func.func @views(%x: tensor<64xf32>) -> (tensor<8x8xf32>, tensor<8x8xf32>, tensor<16x8xf32>) {
  %a = kiln.silu %x : tensor<64xf32>
  %v = kiln.reshape %a : tensor<64xf32> -> tensor<8x8xf32>
  %b = kiln.silu %a : tensor<64xf32>
  %c = kiln.silu %b : tensor<64xf32>
  %r = kiln.reshape %x : tensor<64xf32> -> tensor<8x8xf32>
  %g = kiln.all_gather_start %c over dp_shard {group = "g", ranks = 2 : i64} : tensor<64xf32> -> tensor<128xf32>
  %f = kiln.wait %g : tensor<128xf32>
  %u = kiln.reshape %f : tensor<128xf32> -> tensor<16x8xf32>
  %d = kiln.silu %v : tensor<8x8xf32>
  return %d, %r, %u : tensor<8x8xf32>, tensor<8x8xf32>, tensor<16x8xf32>
}

// -----

// The loss's gradient starts the backward and the embedding's gradient
// ends its layers (each buffer here is 128 bytes, %h 256 and the
// embedding's gradient 512).
// - kiln.live_at_loss: the bytes live at the loss's gradient: the logits,
//   their gradient and %saved, 384.
// - kiln.live_in_backward: the most bytes live from there to the step
//   before the embedding's gradient: %g, %h and %saved at the first cast,
//   512.
// - kiln.live_at_peak: the fullest step is the embedding's gradient's
//   (%k and its result, 640), which does not grow with the layers: a
//   small compile's fullest step can be there while a deep one's is in
//   the layers' backward.
// CHECK-LABEL: func.func @backward(
// CHECK-SAME: kiln.arena_bytes = 640 : i64
// CHECK-SAME: kiln.live_at_loss = 384 : i64
// CHECK-SAME: kiln.live_at_peak = {activations = 640 : i64, gradients = 0 : i64, parameter_copies = 0 : i64, peak_step = 7 : i64}
// CHECK-SAME: kiln.live_in_backward = 512 : i64
// COUNT-LABEL: func.func @backward(
// COUNT-SAME: attributes {kiln.live_at_loss = 384 : i64, kiln.live_at_peak = {activations = 640 : i64, gradients = 0 : i64, parameter_copies = 0 : i64, peak_step = 7 : i64}, kiln.live_in_backward = 512 : i64} {
// COUNT-NOT: kiln.arena
// COUNT: return
func.func @backward(%x: tensor<2x4x8xbf16>, %saved0: tensor<2x4x8xbf16>, %t: tensor<2x4xi32>) -> tensor<16x8xf32> {
  %one = arith.constant dense<1.000000e+00> : tensor<f32>
  %logits = kiln.silu %x : tensor<2x4x8xbf16>
  %saved = kiln.silu %saved0 : tensor<2x4x8xbf16>
  %g = kiln.cross_entropy_grad %one, %logits, %t : tensor<2x4x8xbf16>, tensor<2x4xi32>
  %h = kiln.cast %g : tensor<2x4x8xbf16> -> tensor<2x4x8xf32>
  %h2 = kiln.cast %h : tensor<2x4x8xf32> -> tensor<2x4x8xbf16>
  %k = kiln.add %h2, %saved : tensor<2x4x8xbf16>
  %e = kiln.embedding_grad %k, %t param("w") : tensor<2x4x8xbf16>, tensor<2x4xi32> -> tensor<16x8xf32>
  return %e : tensor<16x8xf32>
}
