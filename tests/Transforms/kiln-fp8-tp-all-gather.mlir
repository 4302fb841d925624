// RUN: kiln-opt %s -split-input-file -kiln-fp8-tp-all-gather | FileCheck %s

// The sequence-parallel gather before q (column parallel) as
// kiln-fp8-linear leaves it at tp 2 (B = 2, S = 16, the rank's 8
// positions): the gathered activation is only quantized, so the rank's
// shard is quantized with its amax all-reduced over tp and the codes are
// gathered, then laid out as the bf16 gather was.
// CHECK-LABEL: func.func @codes(
// CHECK-SAME: %[[XS:[^:]+]]: tensor<2x8x64xbf16>
// CHECK: %[[F:.+]] = kiln.reshape %{{.+}} : tensor<8x2x64xbf16> -> tensor<1024xbf16>
// CHECK-NEXT: %[[A:.+]] = kiln.amax %[[F]] : tensor<1024xbf16> -> tensor<f32>
// CHECK-NEXT: %[[R:.+]] = kiln.all_reduce_start %[[A]] over tp {ranks = 2 : i64, reduction = "max"} : tensor<f32>
// CHECK-NEXT: %[[M:.+]] = kiln.wait %[[R]] : tensor<f32>
// CHECK-NEXT: %[[Q:.+]], %[[S:.+]] = kiln.quantize %[[F]], %[[M]] : tensor<1024xbf16>, tensor<f32> -> tensor<1024xf8E4M3FN>, tensor<f32>
// CHECK-NEXT: %[[G:.+]] = kiln.all_gather_start %[[Q]] over tp {group = "q", ranks = 2 : i64} : tensor<1024xf8E4M3FN> -> tensor<2048xf8E4M3FN>
// CHECK-NEXT: %[[W:.+]] = kiln.wait %[[G]] : tensor<2048xf8E4M3FN>
// CHECK-NEXT: %[[R3:.+]] = kiln.reshape %[[W]] : tensor<2048xf8E4M3FN> -> tensor<16x2x64xf8E4M3FN>
// CHECK-NEXT: %[[T:.+]] = kiln.transpose %[[R3]] [1, 0, 2] : tensor<16x2x64xf8E4M3FN> -> tensor<2x16x64xf8E4M3FN>
// CHECK-NEXT: %[[X2:.+]] = kiln.reshape %[[T]] : tensor<2x16x64xf8E4M3FN> -> tensor<32x64xf8E4M3FN>
// CHECK-NEXT: %[[XT:.+]] = kiln.transpose %[[X2]] [1, 0] : tensor<32x64xf8E4M3FN> -> tensor<64x32xf8E4M3FN>
// CHECK-NEXT: kiln.scaled_matmul "output" wq %[[X2]], %[[S]], %{{.+}}, %{{.+}} param("q")
// CHECK-NOT: xbf16> -> tensor<2048xbf16>
// CHECK: return
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 1, tp = 2>, kiln.float8 = #kiln.float8<recipe = tensorwise>} {
  func.func @codes(%xs: tensor<2x8x64xbf16>, %wq: tensor<32x64xf8E4M3FN>, %ws: tensor<f32>) -> (tensor<32x32xbf16>, tensor<64x32xf8E4M3FN>) {
    %t = kiln.transpose %xs [1, 0, 2] : tensor<2x8x64xbf16> -> tensor<8x2x64xbf16>
    %f = kiln.reshape %t : tensor<8x2x64xbf16> -> tensor<1024xbf16>
    %g = kiln.all_gather_start %f over tp {group = "q", ranks = 2 : i64} : tensor<1024xbf16> -> tensor<2048xbf16>
    %gw = kiln.wait %g : tensor<2048xbf16>
    %r = kiln.reshape %gw : tensor<2048xbf16> -> tensor<16x2x64xbf16>
    %x = kiln.transpose %r [1, 0, 2] : tensor<16x2x64xbf16> -> tensor<2x16x64xbf16>
    %x2 = kiln.reshape %x : tensor<2x16x64xbf16> -> tensor<32x64xbf16>
    %a = kiln.amax %x2 : tensor<32x64xbf16> -> tensor<f32>
    %xq, %xs2 = kiln.quantize %x2, %a : tensor<32x64xbf16>, tensor<f32> -> tensor<32x64xf8E4M3FN>, tensor<f32>
    %xt = kiln.transpose %xq [1, 0] : tensor<32x64xf8E4M3FN> -> tensor<64x32xf8E4M3FN>
    %y = kiln.scaled_matmul "output" wq %xq, %xs2, %wq, %ws param("q") {fast_accumulation = true} : tensor<32x64xf8E4M3FN>, tensor<f32>, tensor<32x64xf8E4M3FN>, tensor<f32> -> tensor<32x32xbf16>
    return %y, %xt : tensor<32x32xbf16>, tensor<64x32xf8E4M3FN>
  }
}

// -----

// A gathered activation that something else reads in bf16 (here a BF16
// linear, as k and v are when not FP8) keeps its bf16 gather.
// CHECK-LABEL: func.func @shared(
// CHECK: kiln.all_gather_start %{{.+}} over tp {group = "q", ranks = 2 : i64} : tensor<1024xbf16> -> tensor<2048xbf16>
// CHECK-NOT: all_reduce_start
// CHECK: return
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 1, tp = 2>, kiln.float8 = #kiln.float8<recipe = tensorwise>} {
  func.func @shared(%xs: tensor<2x8x64xbf16>, %wk: tensor<8x64xbf16>) -> (tensor<32x64xf8E4M3FN>, tensor<f32>, tensor<2x16x8xbf16>) {
    %t = kiln.transpose %xs [1, 0, 2] : tensor<2x8x64xbf16> -> tensor<8x2x64xbf16>
    %f = kiln.reshape %t : tensor<8x2x64xbf16> -> tensor<1024xbf16>
    %g = kiln.all_gather_start %f over tp {group = "q", ranks = 2 : i64} : tensor<1024xbf16> -> tensor<2048xbf16>
    %gw = kiln.wait %g : tensor<2048xbf16>
    %r = kiln.reshape %gw : tensor<2048xbf16> -> tensor<16x2x64xbf16>
    %x = kiln.transpose %r [1, 0, 2] : tensor<16x2x64xbf16> -> tensor<2x16x64xbf16>
    %x2 = kiln.reshape %x : tensor<2x16x64xbf16> -> tensor<32x64xbf16>
    %a = kiln.amax %x2 : tensor<32x64xbf16> -> tensor<f32>
    %xq, %xs2 = kiln.quantize %x2, %a : tensor<32x64xbf16>, tensor<f32> -> tensor<32x64xf8E4M3FN>, tensor<f32>
    %k = kiln.linear wk %x, %wk param("k") {fp8 = #kiln.fp8_choice<bf16, not_divisible_by_16>} : tensor<2x16x64xbf16>, tensor<8x64xbf16> -> tensor<2x16x8xbf16>
    return %xq, %xs2, %k : tensor<32x64xf8E4M3FN>, tensor<f32>, tensor<2x16x8xbf16>
  }
}
