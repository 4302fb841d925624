// RUN: kiln-opt %s -split-input-file -kiln-fp8-all-gather -verify-diagnostics | FileCheck %s

// A group whose every view is only quantized tensorwise to e4m3 (FP8
// weights, q at offset 0 and k at 512 of a 768-element buffer sharded over
// 2 ranks) is gathered as codes, forward and backward: the shard is cast
// once, per-weight amaxes over the rank's part go through one
// all-reduce(max), and shard_quantize makes the codes and scales. A group
// with a view read in bf16 (the norm's) stays as it is.
// CHECK-LABEL: func.func @gathered(
// CHECK-SAME: %[[S:[^:]+]]: tensor<384xf32> {kiln.shard_of
// CHECK-NEXT: %[[C:.+]] = kiln.cast %[[S]] : tensor<384xf32> -> tensor<384xbf16>
// CHECK-NEXT: %[[A:.+]] = kiln.shard_amax %[[C]] {offsets = array<i64: 0, 512>, ranks = 2 : i64, sizes = array<i64: 512, 256>} : tensor<384xbf16> -> tensor<2xf32>
// CHECK-NEXT: %[[ALL:.+]] = kiln.flatten %[[A]] [0] : tensor<2xf32> -> tensor<2xf32>
// CHECK-NEXT: %[[R:.+]] = kiln.all_reduce_start %[[ALL]] over dp_shard {ranks = 2 : i64, reduction = "max"} : tensor<2xf32>
// CHECK-NEXT: %[[MAX:.+]] = kiln.wait %[[R]] : tensor<2xf32>
// CHECK-NEXT: %[[M:.+]] = kiln.unflatten %[[MAX]][0] : tensor<2xf32> -> tensor<2xf32>
// CHECK-NEXT: %[[CODES:.+]], %[[SCALES:.+]] = kiln.shard_quantize %[[C]], %[[M]] {offsets = array<i64: 0, 512>, ranks = 2 : i64, sizes = array<i64: 512, 256>} : tensor<384xbf16>, tensor<2xf32> -> tensor<384xf8E4M3FN>, tensor<2xf32>
// CHECK-NEXT: %[[G:.+]] = kiln.all_gather_start %[[CODES]] over dp_shard {group = "model.layers.0.fp8", ranks = 2 : i64} : tensor<384xf8E4M3FN> -> tensor<768xf8E4M3FN>
// CHECK-NEXT: %[[F:.+]] = kiln.wait %[[G]] : tensor<768xf8E4M3FN>
// CHECK-NEXT: %[[QC:.+]] = kiln.unflatten %[[F]][0] : tensor<768xf8E4M3FN> -> tensor<32x16xf8E4M3FN>
// CHECK-NEXT: %[[QS:.+]] = kiln.unflatten %[[SCALES]][0] : tensor<2xf32> -> tensor<f32>
// CHECK-NEXT: %[[KC:.+]] = kiln.unflatten %[[F]][512] : tensor<768xf8E4M3FN> -> tensor<16x16xf8E4M3FN>
// CHECK-NEXT: %[[KS:.+]] = kiln.unflatten %[[SCALES]][1] : tensor<2xf32> -> tensor<f32>
// CHECK: kiln.all_gather_start %{{.+}} over dp_shard {group = "model.layers.0", ranks = 2 : i64} : tensor<16xbf16> -> tensor<32xbf16>
// CHECK: %[[G2:.+]] = kiln.all_gather_start %[[CODES]] over dp_shard {group = "model.layers.0.fp8", ranks = 2 : i64} : tensor<384xf8E4M3FN> -> tensor<768xf8E4M3FN>
// CHECK-NEXT: %[[F2:.+]] = kiln.wait %[[G2]]
// CHECK-NEXT: %[[QC2:.+]] = kiln.unflatten %[[F2]][0] : tensor<768xf8E4M3FN> -> tensor<32x16xf8E4M3FN>
// CHECK-NEXT: %[[QS2:.+]] = kiln.unflatten %[[SCALES]][0]
// CHECK-NEXT: return %[[QC]], %[[QS]], %[[KC]], %[[KS]], %{{.+}}, %[[QC2]], %[[QS2]]
// CHECK-NOT: kiln.quantize
module attributes {kiln.float8 = #kiln.float8<recipe = tensorwise, enable_fsdp_float8_all_gather = true>} {
  func.func @gathered(%s: tensor<384xf32> {kiln.shard_of = [{init = #kiln.init<ones>, name = "q", offset = 0 : i64, shape = array<i64: 32, 16>}, {init = #kiln.init<ones>, name = "k", offset = 512 : i64, shape = array<i64: 16, 16>}]},
                      %n: tensor<16xf32> {kiln.shard_of = [{init = #kiln.init<ones>, name = "norm", offset = 0 : i64, shape = array<i64: 32>}]})
      -> (tensor<32x16xf8E4M3FN>, tensor<f32>, tensor<16x16xf8E4M3FN>, tensor<f32>, tensor<32xbf16>, tensor<32x16xf8E4M3FN>, tensor<f32>) {
    %c = kiln.cast %s : tensor<384xf32> -> tensor<384xbf16>
    %g = kiln.all_gather_start %c over dp_shard {group = "model.layers.0.fp8", ranks = 2 : i64} : tensor<384xbf16> -> tensor<768xbf16>
    %full = kiln.wait %g : tensor<768xbf16>
    %wq = kiln.unflatten %full[0] : tensor<768xbf16> -> tensor<32x16xbf16>
    %aq = kiln.amax %wq : tensor<32x16xbf16> -> tensor<f32>
    %qc, %qs = kiln.quantize %wq, %aq : tensor<32x16xbf16>, tensor<f32> -> tensor<32x16xf8E4M3FN>, tensor<f32>
    %wk = kiln.unflatten %full[512] : tensor<768xbf16> -> tensor<16x16xbf16>
    %ak = kiln.amax %wk : tensor<16x16xbf16> -> tensor<f32>
    %kc, %ks = kiln.quantize %wk, %ak : tensor<16x16xbf16>, tensor<f32> -> tensor<16x16xf8E4M3FN>, tensor<f32>
    %cn = kiln.cast %n : tensor<16xf32> -> tensor<16xbf16>
    %gn = kiln.all_gather_start %cn over dp_shard {group = "model.layers.0", ranks = 2 : i64} : tensor<16xbf16> -> tensor<32xbf16>
    %fn = kiln.wait %gn : tensor<32xbf16>
    %norm = kiln.unflatten %fn[0] : tensor<32xbf16> -> tensor<32xbf16>
    // The backward's gather of the same group (reshard_after_forward).
    %c2 = kiln.cast %s : tensor<384xf32> -> tensor<384xbf16>
    %g2 = kiln.all_gather_start %c2 over dp_shard {group = "model.layers.0.fp8", ranks = 2 : i64} : tensor<384xbf16> -> tensor<768xbf16>
    %full2 = kiln.wait %g2 : tensor<768xbf16>
    %wq2 = kiln.unflatten %full2[0] : tensor<768xbf16> -> tensor<32x16xbf16>
    %aq2 = kiln.amax %wq2 : tensor<32x16xbf16> -> tensor<f32>
    %qc2, %qs2 = kiln.quantize %wq2, %aq2 : tensor<32x16xbf16>, tensor<f32> -> tensor<32x16xf8E4M3FN>, tensor<f32>
    return %qc, %qs, %kc, %ks, %norm, %qc2, %qs2 : tensor<32x16xf8E4M3FN>, tensor<f32>, tensor<16x16xf8E4M3FN>, tensor<f32>, tensor<32xbf16>, tensor<32x16xf8E4M3FN>, tensor<f32>
  }
}

// -----

// A view also read in bf16 keeps its whole group in bf16, in every gather.
// CHECK-LABEL: func.func @mixed
// CHECK-NOT: shard_quantize
// CHECK: kiln.all_gather_start %{{.+}} : tensor<384xbf16> -> tensor<768xbf16>
// CHECK: kiln.quantize
module attributes {kiln.float8 = #kiln.float8<recipe = tensorwise, enable_fsdp_float8_all_gather = true>} {
  func.func @mixed(%s: tensor<384xf32> {kiln.shard_of = [{init = #kiln.init<ones>, name = "q", offset = 0 : i64, shape = array<i64: 32, 16>}, {init = #kiln.init<ones>, name = "k", offset = 512 : i64, shape = array<i64: 16, 16>}]})
      -> (tensor<32x16xf8E4M3FN>, tensor<f32>, tensor<16x16xbf16>) {
    %c = kiln.cast %s : tensor<384xf32> -> tensor<384xbf16>
    %g = kiln.all_gather_start %c over dp_shard {group = "model.layers.0", ranks = 2 : i64} : tensor<384xbf16> -> tensor<768xbf16>
    %full = kiln.wait %g : tensor<768xbf16>
    %wq = kiln.unflatten %full[0] : tensor<768xbf16> -> tensor<32x16xbf16>
    %aq = kiln.amax %wq : tensor<32x16xbf16> -> tensor<f32>
    %qc, %qs = kiln.quantize %wq, %aq : tensor<32x16xbf16>, tensor<f32> -> tensor<32x16xf8E4M3FN>, tensor<f32>
    %wk = kiln.unflatten %full[512] : tensor<768xbf16> -> tensor<16x16xbf16>
    return %qc, %qs, %wk : tensor<32x16xf8E4M3FN>, tensor<f32>, tensor<16x16xbf16>
  }
}

// -----

// Without enable_fsdp_float8_all_gather the pass leaves the gathers alone.
// CHECK-LABEL: func.func @off
// CHECK-NOT: shard_quantize
// CHECK: kiln.all_gather_start %{{.+}} : tensor<384xbf16> -> tensor<768xbf16>
module attributes {kiln.float8 = #kiln.float8<recipe = tensorwise>} {
  func.func @off(%s: tensor<384xf32> {kiln.shard_of = [{init = #kiln.init<ones>, name = "q", offset = 0 : i64, shape = array<i64: 32, 16>}, {init = #kiln.init<ones>, name = "k", offset = 512 : i64, shape = array<i64: 16, 16>}]})
      -> (tensor<32x16xf8E4M3FN>, tensor<f32>) {
    %c = kiln.cast %s : tensor<384xf32> -> tensor<384xbf16>
    %g = kiln.all_gather_start %c over dp_shard {group = "model.layers.0.fp8", ranks = 2 : i64} : tensor<384xbf16> -> tensor<768xbf16>
    %full = kiln.wait %g : tensor<768xbf16>
    %wq = kiln.unflatten %full[0] : tensor<768xbf16> -> tensor<32x16xbf16>
    %aq = kiln.amax %wq : tensor<32x16xbf16> -> tensor<f32>
    %qc, %qs = kiln.quantize %wq, %aq : tensor<32x16xbf16>, tensor<f32> -> tensor<32x16xf8E4M3FN>, tensor<f32>
    return %qc, %qs : tensor<32x16xf8E4M3FN>, tensor<f32>
  }
}

// -----

// A view at an offset where no weight of the shard starts is an error.
module attributes {kiln.float8 = #kiln.float8<recipe = tensorwise, enable_fsdp_float8_all_gather = true>} {
  func.func @misplaced(%s: tensor<384xf32> {kiln.shard_of = [{init = #kiln.init<ones>, name = "q", offset = 0 : i64, shape = array<i64: 32, 16>}, {init = #kiln.init<ones>, name = "k", offset = 512 : i64, shape = array<i64: 16, 16>}]})
      -> (tensor<16x16xf8E4M3FN>, tensor<f32>) {
    %c = kiln.cast %s : tensor<384xf32> -> tensor<384xbf16>
    %g = kiln.all_gather_start %c over dp_shard {group = "model.layers.0.fp8", ranks = 2 : i64} : tensor<384xbf16> -> tensor<768xbf16>
    %full = kiln.wait %g : tensor<768xbf16>
    // expected-error @+1 {{'kiln.unflatten' op kiln-fp8-all-gather: no weight of the shard starts at offset 256}}
    %wk = kiln.unflatten %full[256] : tensor<768xbf16> -> tensor<16x16xbf16>
    %ak = kiln.amax %wk : tensor<16x16xbf16> -> tensor<f32>
    %kc, %ks = kiln.quantize %wk, %ak : tensor<16x16xbf16>, tensor<f32> -> tensor<16x16xf8E4M3FN>, tensor<f32>
    return %kc, %ks : tensor<16x16xf8E4M3FN>, tensor<f32>
  }
}
