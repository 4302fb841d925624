// RUN: kiln-opt %s -split-input-file -kiln-fp8-select -verify-diagnostics | FileCheck %s

// Each rule in its order, tensorwise without the small-GEMM filter: the
// output projection, then M (the tokens: every dim of the input but the
// last), N and K by 16, then the patterns. A recomputed clone gets its
// linear's mark.
// CHECK-LABEL: func.func @rules
// CHECK: kiln.linear wq {{.*}} param("q") {fp8 = #kiln.fp8_choice<fp8>}
// CHECK: kiln.linear wk {{.*}} param("k") {fp8 = #kiln.fp8_choice<fp8>} : tensor<2x8x64xbf16>
// CHECK: kiln.linear wv {{.*}} param("model.layers.0.self_attn.v_proj.weight") {fp8 = #kiln.fp8_choice<bf16, filtered = "v_proj">}
// CHECK: kiln.linear wo {{.*}} param("o") {fp8 = #kiln.fp8_choice<bf16, not_divisible_by_16>} : tensor<3x8x64xbf16>
// CHECK: kiln.linear w1 {{.*}} param("w1") {fp8 = #kiln.fp8_choice<bf16, not_divisible_by_16>} : tensor<128x64xbf16>, tensor<200x64xbf16>
// CHECK: kiln.linear w2 {{.*}} param("w2") {fp8 = #kiln.fp8_choice<bf16, not_divisible_by_16>} : tensor<128x200xbf16>
// CHECK: kiln.linear output {{.*}} param("lm_head.weight") {fp8 = #kiln.fp8_choice<bf16, output_projection>}
// CHECK: kiln.linear wq {{.*}} param("q") {fp8 = #kiln.fp8_choice<fp8>, kiln.recomputed}
module attributes {kiln.float8 = #kiln.float8<recipe = tensorwise, filter_fqns = ["v_proj"], auto_filter_small_kn = false>} {
  func.func @rules(%x: tensor<128x64xbf16>, %x3: tensor<2x8x64xbf16>, %xm: tensor<3x8x64xbf16>,
                   %w: tensor<64x64xbf16>, %w1: tensor<200x64xbf16>, %w2: tensor<64x200xbf16>,
                   %h: tensor<128x200xbf16>, %e: tensor<256x64xbf16>) {
    %q = kiln.linear wq %x, %w param("q") : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xbf16>
    %k = kiln.linear wk %x3, %w param("k") : tensor<2x8x64xbf16>, tensor<64x64xbf16> -> tensor<2x8x64xbf16>
    %v = kiln.linear wv %x, %w param("model.layers.0.self_attn.v_proj.weight") : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xbf16>
    %o = kiln.linear wo %xm, %w param("o") : tensor<3x8x64xbf16>, tensor<64x64xbf16> -> tensor<3x8x64xbf16>
    %g = kiln.linear w1 %x, %w1 param("w1") : tensor<128x64xbf16>, tensor<200x64xbf16> -> tensor<128x200xbf16>
    %d = kiln.linear w2 %h, %w2 param("w2") : tensor<128x200xbf16>, tensor<64x200xbf16> -> tensor<128x64xbf16>
    %l = kiln.linear output %x, %e param("lm_head.weight") : tensor<128x64xbf16>, tensor<256x64xbf16> -> tensor<128x256xbf16>
    %r = kiln.linear wq %x, %w param("q") {kiln.recomputed} : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xbf16>
    return
  }
}

// -----

// The small-GEMM filter, tensorwise (and delayed): small when N <= 4096 and
// K <= 1024.
// CHECK-LABEL: func.func @small_tensorwise
// CHECK: param("a") {fp8 = #kiln.fp8_choice<bf16, small_gemm>}
// CHECK: param("b") {fp8 = #kiln.fp8_choice<fp8>}
// CHECK: param("c") {fp8 = #kiln.fp8_choice<fp8>}
module attributes {kiln.float8 = #kiln.float8<recipe = tensorwise>} {
  func.func @small_tensorwise(%x: tensor<16x1024xbf16>, %x2: tensor<16x1040xbf16>,
                              %w: tensor<4096x1024xbf16>, %wn: tensor<4112x1024xbf16>, %wk: tensor<4096x1040xbf16>) {
    %a = kiln.linear w1 %x, %w param("a") : tensor<16x1024xbf16>, tensor<4096x1024xbf16> -> tensor<16x4096xbf16>
    %b = kiln.linear w1 %x, %wn param("b") : tensor<16x1024xbf16>, tensor<4112x1024xbf16> -> tensor<16x4112xbf16>
    %c = kiln.linear w1 %x2, %wk param("c") : tensor<16x1040xbf16>, tensor<4096x1040xbf16> -> tensor<16x4096xbf16>
    return
  }
}

// -----

// Rowwise: small when K <= 2048, N <= 1024, or both K <= 4096 and N <= 2048.
// CHECK-LABEL: func.func @small_rowwise
// CHECK: param("k2048") {fp8 = #kiln.fp8_choice<bf16, small_gemm>}
// CHECK: param("n1024") {fp8 = #kiln.fp8_choice<bf16, small_gemm>}
// CHECK: param("k4096n2048") {fp8 = #kiln.fp8_choice<bf16, small_gemm>}
// CHECK: param("k4096n2064") {fp8 = #kiln.fp8_choice<fp8>}
module attributes {kiln.float8 = #kiln.float8<recipe = rowwise>} {
  func.func @small_rowwise(%x2: tensor<16x2048xbf16>, %x4: tensor<16x4096xbf16>, %x8: tensor<16x8192xbf16>,
                           %a: tensor<8192x2048xbf16>, %b: tensor<1024x8192xbf16>,
                           %c: tensor<2048x4096xbf16>, %d: tensor<2064x4096xbf16>) {
    %0 = kiln.linear w1 %x2, %a param("k2048") : tensor<16x2048xbf16>, tensor<8192x2048xbf16> -> tensor<16x8192xbf16>
    %1 = kiln.linear w1 %x8, %b param("n1024") : tensor<16x8192xbf16>, tensor<1024x8192xbf16> -> tensor<16x1024xbf16>
    %2 = kiln.linear w1 %x4, %c param("k4096n2048") : tensor<16x4096xbf16>, tensor<2048x4096xbf16> -> tensor<16x2048xbf16>
    %3 = kiln.linear w1 %x4, %d param("k4096n2064") : tensor<16x4096xbf16>, tensor<2064x4096xbf16> -> tensor<16x2064xbf16>
    return
  }
}

// -----

// force_output_projection: the output projection in FP8 with a warning,
// once per module (the first function with linears), unless a later rule
// excludes it.
// CHECK-LABEL: func.func @forced
// CHECK: param("lm_head.weight") {fp8 = #kiln.fp8_choice<fp8, forced_output_projection>}
// CHECK: param("odd") {fp8 = #kiln.fp8_choice<bf16, not_divisible_by_16>}
// CHECK-LABEL: func.func @again
// CHECK: param("lm_head.weight") {fp8 = #kiln.fp8_choice<fp8, forced_output_projection>}
module attributes {kiln.float8 = #kiln.float8<recipe = tensorwise, auto_filter_small_kn = false, force_output_projection = true>} {
  func.func @forced(%x: tensor<128x64xbf16>, %e: tensor<256x64xbf16>, %e2: tensor<200x64xbf16>) {
    // expected-warning @+1 {{the output projection runs in FP8 (float8.force_output_projection): its accuracy matters most for the loss}}
    %l = kiln.linear output %x, %e param("lm_head.weight") : tensor<128x64xbf16>, tensor<256x64xbf16> -> tensor<128x256xbf16>
    %m = kiln.linear output %x, %e2 param("odd") : tensor<128x64xbf16>, tensor<200x64xbf16> -> tensor<128x200xbf16>
    return
  }
  func.func @again(%x: tensor<128x64xbf16>, %e: tensor<256x64xbf16>) {
    %l = kiln.linear output %x, %e param("lm_head.weight") : tensor<128x64xbf16>, tensor<256x64xbf16> -> tensor<128x256xbf16>
    return
  }
}

// -----

// No linear qualifies: one warning naming each reason, at the first linear.
// CHECK-LABEL: func.func @none
module attributes {kiln.float8 = #kiln.float8<recipe = tensorwise>} {
  func.func @none(%x: tensor<128x64xbf16>, %w: tensor<64x64xbf16>, %e: tensor<256x64xbf16>) {
    // expected-warning @+1 {{float8.enable is set but no linear qualifies for FP8, so the model trains in BF16: output projection: lm_head.weight; small GEMM: 2 linears (q, ...) (`kiln explain --fp8` lists each)}}
    %q = kiln.linear wq %x, %w param("q") : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xbf16>
    %k = kiln.linear wk %x, %w param("k") : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xbf16>
    %l = kiln.linear output %x, %e param("lm_head.weight") : tensor<128x64xbf16>, tensor<256x64xbf16> -> tensor<128x256xbf16>
    return
  }
}

// -----

// Without a policy (FP8 off) nothing is marked.
// CHECK-LABEL: func.func @off
// CHECK-NOT: fp8 =
func.func @off(%x: tensor<128x64xbf16>, %w: tensor<64x64xbf16>) {
  %q = kiln.linear wq %x, %w param("q") : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xbf16>
  return
}

// -----

// The policy is a #kiln.float8, not the dictionary of earlier versions.
// expected-error @+1 {{kiln.float8 must be a #kiln.float8 attribute, got {recipe = "tensorwise"}}}
module attributes {kiln.float8 = {recipe = "tensorwise"}} {
}
