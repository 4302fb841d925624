// RUN: kiln-opt %s -split-input-file -kiln-fp8-linear -verify-diagnostics | FileCheck %s

// Tensorwise: the linear marked fp8 and its two backward ops become scaled
// GEMMs; the one marked bf16 stays. The output gradient is e5m2, the rest
// e4m3; each operand is quantized once, right where it is made, with the
// transposed codes the backward GEMMs read. Only the forward GEMM
// accumulates fast.
// CHECK-LABEL: func.func @tensorwise(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x16x64xbf16>, %[[W:[^:]+]]: tensor<32x64xbf16>, %[[W1:[^:]+]]: tensor<200x64xbf16>, %[[DY:[^:]+]]: tensor<2x16x32xbf16>
// CHECK: %[[DY2:.+]] = kiln.reshape %[[DY]] : tensor<2x16x32xbf16> -> tensor<32x32xbf16>
// CHECK-NEXT: %[[ADY:.+]] = kiln.amax %[[DY2]]
// CHECK-NEXT: %[[DQ:.+]], %[[DS:.+]] = kiln.quantize %[[DY2]], %[[ADY]] : tensor<32x32xbf16>, tensor<f32> -> tensor<32x32xf8E5M2>, tensor<f32>
// CHECK-NEXT: %[[DT:.+]] = kiln.transpose %[[DQ]] [1, 0]
// CHECK-NEXT: %[[AW:.+]] = kiln.amax %[[W]]
// CHECK-NEXT: %[[WQ:.+]], %[[WS:.+]] = kiln.quantize %[[W]], %[[AW]] : tensor<32x64xbf16>, tensor<f32> -> tensor<32x64xf8E4M3FN>, tensor<f32>
// CHECK-NEXT: %[[WT:.+]] = kiln.transpose %[[WQ]] [1, 0] : tensor<32x64xf8E4M3FN> -> tensor<64x32xf8E4M3FN>
// CHECK-NEXT: %[[X2:.+]] = kiln.reshape %[[X]] : tensor<2x16x64xbf16> -> tensor<32x64xbf16>
// CHECK-NEXT: %[[AX:.+]] = kiln.amax %[[X2]]
// CHECK-NEXT: %[[XQ:.+]], %[[XS:.+]] = kiln.quantize %[[X2]], %[[AX]] : tensor<32x64xbf16>, tensor<f32> -> tensor<32x64xf8E4M3FN>, tensor<f32>
// CHECK-NEXT: %[[XT:.+]] = kiln.transpose %[[XQ]] [1, 0] : tensor<32x64xf8E4M3FN> -> tensor<64x32xf8E4M3FN>
// CHECK-NEXT: %[[Y:.+]] = kiln.scaled_matmul "output" wq %[[XQ]], %[[XS]], %[[WQ]], %[[WS]] param("q") {fast_accumulation = true} : tensor<32x64xf8E4M3FN>, tensor<f32>, tensor<32x64xf8E4M3FN>, tensor<f32> -> tensor<32x32xbf16>
// CHECK-NEXT: %[[Y3:.+]] = kiln.reshape %[[Y]] : tensor<32x32xbf16> -> tensor<2x16x32xbf16>
// CHECK-NEXT: %[[H:.+]] = kiln.linear w1 %[[X]], %[[W1]] param("w1") {fp8 = #kiln.fp8_choice<bf16, not_divisible_by_16>}
// CHECK-NEXT: %[[DX:.+]] = kiln.scaled_matmul "grad_input" wq %[[DQ]], %[[DS]], %[[WT]], %[[WS]] param("q") {fast_accumulation = false} : tensor<32x32xf8E5M2>, tensor<f32>, tensor<64x32xf8E4M3FN>, tensor<f32> -> tensor<32x64xbf16>
// CHECK-NEXT: %[[DX3:.+]] = kiln.reshape %[[DX]] : tensor<32x64xbf16> -> tensor<2x16x64xbf16>
// CHECK-NEXT: %[[DW:.+]] = kiln.scaled_matmul "grad_weight" wq %[[DT]], %[[DS]], %[[XT]], %[[XS]] param("q") {fast_accumulation = false} : tensor<32x32xf8E5M2>, tensor<f32>, tensor<64x32xf8E4M3FN>, tensor<f32> -> tensor<32x64xbf16>
// CHECK-NEXT: return %[[Y3]], %[[H]], %[[DX3]], %[[DW]]
module attributes {kiln.float8 = #kiln.float8<recipe = tensorwise>} {
  func.func @tensorwise(%x: tensor<2x16x64xbf16>, %w: tensor<32x64xbf16>, %w1: tensor<200x64xbf16>, %dy: tensor<2x16x32xbf16>)
      -> (tensor<2x16x32xbf16>, tensor<2x16x200xbf16>, tensor<2x16x64xbf16>, tensor<32x64xbf16>) {
    %y = kiln.linear wq %x, %w param("q") {fp8 = #kiln.fp8_choice<fp8>} : tensor<2x16x64xbf16>, tensor<32x64xbf16> -> tensor<2x16x32xbf16>
    %h = kiln.linear w1 %x, %w1 param("w1") {fp8 = #kiln.fp8_choice<bf16, not_divisible_by_16>} : tensor<2x16x64xbf16>, tensor<200x64xbf16> -> tensor<2x16x200xbf16>
    %dx = kiln.linear_grad_input wq %dy, %w param("q") : tensor<2x16x32xbf16>, tensor<32x64xbf16> -> tensor<2x16x64xbf16>
    %dw = kiln.linear_grad_weight wq %dy, %x param("q") : tensor<2x16x32xbf16>, tensor<2x16x64xbf16> -> tensor<32x64xbf16>
    return %y, %h, %dx, %dw : tensor<2x16x32xbf16>, tensor<2x16x200xbf16>, tensor<2x16x64xbf16>, tensor<32x64xbf16>
  }
}

// -----

// Rowwise: one power-of-two scale per row, all e4m3; the backward
// transposes its bf16 operands and quantizes them again, just before its
// first GEMM.
// CHECK-LABEL: func.func @rowwise(
// CHECK-SAME: %[[X:[^:]+]]: tensor<16x64xbf16>, %[[W:[^:]+]]: tensor<32x64xbf16>, %[[DY:[^:]+]]: tensor<16x32xbf16>
// CHECK: %[[WQ:.+]], %[[WS:.+]] = kiln.quantize %[[W]] {pow2_scale} : tensor<32x64xbf16> -> tensor<32x64xf8E4M3FN>, tensor<32xf32>
// CHECK-NEXT: %[[XQ:.+]], %[[XS:.+]] = kiln.quantize %[[X]] {pow2_scale} : tensor<16x64xbf16> -> tensor<16x64xf8E4M3FN>, tensor<16xf32>
// CHECK-NEXT: kiln.scaled_matmul "output" wq %[[XQ]], %[[XS]], %[[WQ]], %[[WS]] param("q") {fast_accumulation = true} : tensor<16x64xf8E4M3FN>, tensor<16xf32>, tensor<32x64xf8E4M3FN>, tensor<32xf32> -> tensor<16x32xbf16>
// CHECK-NEXT: %[[DQ:.+]], %[[DS:.+]] = kiln.quantize %[[DY]] {pow2_scale} : tensor<16x32xbf16> -> tensor<16x32xf8E4M3FN>, tensor<16xf32>
// CHECK-NEXT: %[[WT:.+]] = kiln.transpose %[[W]] [1, 0] : tensor<32x64xbf16> -> tensor<64x32xbf16>
// CHECK-NEXT: %[[WTQ:.+]], %[[WTS:.+]] = kiln.quantize %[[WT]] {pow2_scale} : tensor<64x32xbf16> -> tensor<64x32xf8E4M3FN>, tensor<64xf32>
// CHECK-NEXT: %[[DT:.+]] = kiln.transpose %[[DY]] [1, 0]
// CHECK-NEXT: %[[DTQ:.+]], %[[DTS:.+]] = kiln.quantize %[[DT]] {pow2_scale}
// CHECK-NEXT: %[[XT:.+]] = kiln.transpose %[[X]] [1, 0]
// CHECK-NEXT: %[[XTQ:.+]], %[[XTS:.+]] = kiln.quantize %[[XT]] {pow2_scale}
// CHECK-NEXT: kiln.scaled_matmul "grad_input" wq %[[DQ]], %[[DS]], %[[WTQ]], %[[WTS]] param("q") {fast_accumulation = false}
// CHECK-NEXT: kiln.scaled_matmul "grad_weight" wq %[[DTQ]], %[[DTS]], %[[XTQ]], %[[XTS]] param("q") {fast_accumulation = false}
module attributes {kiln.float8 = #kiln.float8<recipe = rowwise>} {
  func.func @rowwise(%x: tensor<16x64xbf16>, %w: tensor<32x64xbf16>, %dy: tensor<16x32xbf16>)
      -> (tensor<16x32xbf16>, tensor<16x64xbf16>, tensor<32x64xbf16>) {
    %y = kiln.linear wq %x, %w param("q") {fp8 = #kiln.fp8_choice<fp8>} : tensor<16x64xbf16>, tensor<32x64xbf16> -> tensor<16x32xbf16>
    %dx = kiln.linear_grad_input wq %dy, %w param("q") : tensor<16x32xbf16>, tensor<32x64xbf16> -> tensor<16x64xbf16>
    %dw = kiln.linear_grad_weight wq %dy, %x param("q") : tensor<16x32xbf16>, tensor<16x64xbf16> -> tensor<32x64xbf16>
    return %y, %dx, %dw : tensor<16x32xbf16>, tensor<16x64xbf16>, tensor<32x64xbf16>
  }
}

// -----

// Delayed, in @train_step: each cast scales with its history's amax
// (amax_compute_algo) and puts this step's amax in front of it; the
// histories are new state arguments and results. A recomputed clone of the
// same input shares the forward's codes. @fp8_calibration, the copy that fills
// the histories before the first step, keeps only the history updates.
// CHECK-LABEL: func.func @train_step(
// CHECK-SAME: %[[X:[^:]+]]: tensor<16x64xbf16>, %[[W:[^:]+]]: tensor<32x64xbf16>, %[[DY:[^:]+]]: tensor<16x32xbf16>, %[[HI:[^:]+]]: tensor<4xf32> {kiln.state = "fp8_amax_history.input.q"}, %[[HW:[^:]+]]: tensor<4xf32> {kiln.state = "fp8_amax_history.weight.q"}, %[[HG:[^:]+]]: tensor<4xf32> {kiln.state = "fp8_amax_history.grad_output.q"})
// CHECK-SAME: -> (tensor<16x32xbf16>, tensor<16x32xbf16>, tensor<32x64xbf16>, tensor<4xf32> {kiln.state = "fp8_amax_history.input.q"}, tensor<4xf32> {kiln.state = "fp8_amax_history.weight.q"}, tensor<4xf32> {kiln.state = "fp8_amax_history.grad_output.q"})
// CHECK: %[[AG:.+]] = kiln.amax %[[DY]]
// CHECK-NEXT: %[[DG:.+]] = kiln.delayed_amax %[[HG]] {algo = "most_recent"}
// CHECK-NEXT: %[[DQ:.+]], %{{.+}} = kiln.quantize %[[DY]], %[[DG]] : {{.*}} -> tensor<16x32xf8E5M2>, tensor<f32>
// CHECK: %[[AW:.+]] = kiln.amax %[[W]]
// CHECK-NEXT: %[[DW:.+]] = kiln.delayed_amax %[[HW]] {algo = "most_recent"}
// CHECK-NEXT: %[[WQ:.+]], %[[WS:.+]] = kiln.quantize %[[W]], %[[DW]]
// CHECK-NEXT: %[[AX:.+]] = kiln.amax %[[X]]
// CHECK-NEXT: %[[DX:.+]] = kiln.delayed_amax %[[HI]] {algo = "most_recent"}
// CHECK-NEXT: %[[XQ:.+]], %[[XS:.+]] = kiln.quantize %[[X]], %[[DX]]
// CHECK: %[[Y:.+]] = kiln.scaled_matmul "output" wq %[[XQ]], %[[XS]], %[[WQ]], %[[WS]] param("q") {fast_accumulation = true}
// CHECK-NEXT: %[[R:.+]] = kiln.scaled_matmul "output" wq %[[XQ]], %[[XS]], %[[WQ]], %[[WS]] param("q") {fast_accumulation = true}
// CHECK-NEXT: %[[G:.+]] = kiln.scaled_matmul "grad_weight" wq
// CHECK-NEXT: %[[UI:.+]] = kiln.amax_history_update %[[HI]], %[[AX]]
// CHECK-NEXT: %[[UW:.+]] = kiln.amax_history_update %[[HW]], %[[AW]]
// CHECK-NEXT: %[[UG:.+]] = kiln.amax_history_update %[[HG]], %[[AG]]
// CHECK-NEXT: return %[[Y]], %[[R]], %[[G]], %[[UI]], %[[UW]], %[[UG]]
// CHECK-LABEL: func.func @fp8_calibration(
// CHECK-SAME: -> (tensor<4xf32> {kiln.state = "fp8_amax_history.input.q"}, tensor<4xf32> {kiln.state = "fp8_amax_history.weight.q"}, tensor<4xf32> {kiln.state = "fp8_amax_history.grad_output.q"})
// CHECK-COUNT-3: kiln.amax %
// CHECK-COUNT-3: kiln.amax_history_update
// CHECK-NOT: scaled_matmul
// CHECK: return
module attributes {kiln.float8 = #kiln.float8<recipe = delayed, amax_history_len = 4, amax_compute_algo = most_recent>} {
  func.func @train_step(%x: tensor<16x64xbf16>, %w: tensor<32x64xbf16>, %dy: tensor<16x32xbf16>)
      -> (tensor<16x32xbf16>, tensor<16x32xbf16>, tensor<32x64xbf16>) {
    %y = kiln.linear wq %x, %w param("q") {fp8 = #kiln.fp8_choice<fp8>} : tensor<16x64xbf16>, tensor<32x64xbf16> -> tensor<16x32xbf16>
    %r = kiln.linear wq %x, %w param("q") {fp8 = #kiln.fp8_choice<fp8>, kiln.recomputed} : tensor<16x64xbf16>, tensor<32x64xbf16> -> tensor<16x32xbf16>
    %dw = kiln.linear_grad_weight wq %dy, %x param("q") : tensor<16x32xbf16>, tensor<16x64xbf16> -> tensor<32x64xbf16>
    return %y, %r, %dw : tensor<16x32xbf16>, tensor<16x32xbf16>, tensor<32x64xbf16>
  }
}

// -----

// Full activation checkpointing: the recomputed linear quantizes its own
// (recomputed) input with the forward's amax (the same bits: no second
// reduction, and under the delayed recipe no history of its own), and the
// backward's grad-weight GEMM multiplies those codes, transposed right
// where they are made; the forward's codes serve the forward GEMM only, so
// nothing FP8 lives from forward to backward but the amax.
// CHECK-LABEL: func.func @recomputed(
// CHECK-SAME: %[[X:[^:]+]]: tensor<16x64xbf16>, %[[W:[^:]+]]: tensor<32x64xbf16>, %[[DY:[^:]+]]: tensor<16x32xbf16>
// CHECK: %[[S:.+]] = kiln.silu %[[X]] :
// CHECK-NEXT: %[[AS:.+]] = kiln.amax %[[S]]
// CHECK-NEXT: %[[XQ:.+]], %[[XS:.+]] = kiln.quantize %[[S]], %[[AS]]
// CHECK-NOT: kiln.transpose
// CHECK: kiln.scaled_matmul "output" wq %[[XQ]], %[[XS]]
// CHECK-NEXT: %[[R:.+]] = kiln.silu %[[X]] {kiln.recomputed}
// CHECK-NEXT: %[[RQ:.+]], %[[RS:.+]] = kiln.quantize %[[R]], %[[AS]]
// CHECK-NEXT: %[[RT:.+]] = kiln.transpose %[[RQ]] [1, 0] : tensor<16x64xf8E4M3FN> -> tensor<64x16xf8E4M3FN>
// CHECK: kiln.scaled_matmul "output" wq %[[RQ]], %[[RS]]
// CHECK: kiln.scaled_matmul "grad_weight" wq %{{.+}}, %{{.+}}, %[[RT]], %[[RS]]
module attributes {kiln.float8 = #kiln.float8<recipe = tensorwise>} {
  func.func @recomputed(%x: tensor<16x64xbf16>, %w: tensor<32x64xbf16>, %dy: tensor<16x32xbf16>)
      -> (tensor<16x32xbf16>, tensor<16x32xbf16>, tensor<32x64xbf16>) {
    %s = kiln.silu %x : tensor<16x64xbf16>
    %y = kiln.linear wq %s, %w param("q") {fp8 = #kiln.fp8_choice<fp8>} : tensor<16x64xbf16>, tensor<32x64xbf16> -> tensor<16x32xbf16>
    %s2 = kiln.silu %x {kiln.recomputed} : tensor<16x64xbf16>
    %r = kiln.linear wq %s2, %w param("q") {fp8 = #kiln.fp8_choice<fp8>, kiln.recomputed} : tensor<16x64xbf16>, tensor<32x64xbf16> -> tensor<16x32xbf16>
    %dw = kiln.linear_grad_weight wq %dy, %s2 param("q") : tensor<16x32xbf16>, tensor<16x64xbf16> -> tensor<32x64xbf16>
    return %y, %r, %dw : tensor<16x32xbf16>, tensor<16x32xbf16>, tensor<32x64xbf16>
  }
}

// -----

// Selective activation checkpointing (or full, for a linear whose
// recomputed forward the backward does not run: the down projection): the
// backward recomputes the linear's input (a clone) for its grad-weight GEMM. Its codes are made there, from
// the clone with the forward's amax (the same bits: the same codes and
// scale), and transposed; the forward's codes are not transposed, so
// nothing FP8 lives from forward to backward.
// CHECK-LABEL: func.func @selective(
// CHECK-SAME: %[[X:[^:]+]]: tensor<16x64xbf16>, %[[W:[^:]+]]: tensor<32x64xbf16>, %[[DY:[^:]+]]: tensor<16x32xbf16>
// CHECK: %[[S:.+]] = kiln.silu %[[X]] :
// CHECK-NEXT: %[[AS:.+]] = kiln.amax %[[S]]
// CHECK-NEXT: %[[XQ:.+]], %[[XS:.+]] = kiln.quantize %[[S]], %[[AS]]
// CHECK-NOT: kiln.transpose
// CHECK: kiln.scaled_matmul "output" wq %[[XQ]], %[[XS]]
// CHECK-NEXT: %[[R:.+]] = kiln.silu %[[X]] {kiln.recomputed}
// CHECK-NEXT: %[[RQ:.+]], %[[RS:.+]] = kiln.quantize %[[R]], %[[AS]]
// CHECK-NEXT: %[[RT:.+]] = kiln.transpose %[[RQ]] [1, 0] : tensor<16x64xf8E4M3FN> -> tensor<64x16xf8E4M3FN>
// CHECK-NOT: kiln.amax
// CHECK: kiln.scaled_matmul "grad_weight" wq %{{.+}}, %{{.+}}, %[[RT]], %[[RS]]
module attributes {kiln.float8 = #kiln.float8<recipe = tensorwise>} {
  func.func @selective(%x: tensor<16x64xbf16>, %w: tensor<32x64xbf16>, %dy: tensor<16x32xbf16>)
      -> (tensor<16x32xbf16>, tensor<32x64xbf16>) {
    %s = kiln.silu %x : tensor<16x64xbf16>
    %y = kiln.linear wq %s, %w param("q") {fp8 = #kiln.fp8_choice<fp8>} : tensor<16x64xbf16>, tensor<32x64xbf16> -> tensor<16x32xbf16>
    %s2 = kiln.silu %x {kiln.recomputed} : tensor<16x64xbf16>
    %dw = kiln.linear_grad_weight wq %dy, %s2 param("q") : tensor<16x32xbf16>, tensor<16x64xbf16> -> tensor<32x64xbf16>
    return %y, %dw : tensor<16x32xbf16>, tensor<32x64xbf16>
  }
}

// -----

// Under tensor parallel, a recomputed sequence-parallel gather is not
// gathered again for the backward's codes: the grad-weight GEMM multiplies
// the forward's transposed codes, and the recomputed gather goes.
// CHECK-LABEL: func.func @gathered(
// CHECK: %[[G:.+]] = kiln.all_gather_start
// CHECK-NEXT: %[[GW:.+]] = kiln.wait %[[G]]
// CHECK-NEXT: %[[X:.+]] = kiln.reshape %[[GW]]
// CHECK-NEXT: %[[AX:.+]] = kiln.amax %[[X]]
// CHECK-NEXT: %[[XQ:.+]], %[[XS:.+]] = kiln.quantize %[[X]], %[[AX]]
// CHECK-NEXT: %[[XT:.+]] = kiln.transpose %[[XQ]] [1, 0]
// CHECK-NOT: kiln.all_gather_start
// CHECK: kiln.scaled_matmul "grad_weight" wq %{{.+}}, %{{.+}}, %[[XT]], %[[XS]]
module attributes {kiln.mesh = #kiln.mesh<dp_shard = 1, tp = 2>, kiln.float8 = #kiln.float8<recipe = tensorwise>} {
  func.func @gathered(%xs: tensor<512xbf16>, %w: tensor<32x64xbf16>, %dy: tensor<16x32xbf16>)
      -> (tensor<16x32xbf16>, tensor<32x64xbf16>) {
    %g = kiln.all_gather_start %xs over tp {group = "q", ranks = 2 : i64} : tensor<512xbf16> -> tensor<1024xbf16>
    %gw = kiln.wait %g : tensor<1024xbf16>
    %x = kiln.reshape %gw : tensor<1024xbf16> -> tensor<16x64xbf16>
    %y = kiln.linear wq %x, %w param("q") {fp8 = #kiln.fp8_choice<fp8>} : tensor<16x64xbf16>, tensor<32x64xbf16> -> tensor<16x32xbf16>
    %g2 = kiln.all_gather_start %xs over tp {group = "q", ranks = 2 : i64, kiln.recomputed} : tensor<512xbf16> -> tensor<1024xbf16>
    %gw2 = kiln.wait %g2 {kiln.recomputed} : tensor<1024xbf16>
    %x2 = kiln.reshape %gw2 {kiln.recomputed} : tensor<1024xbf16> -> tensor<16x64xbf16>
    %dw = kiln.linear_grad_weight wq %dy, %x2 param("q") : tensor<16x32xbf16>, tensor<16x64xbf16> -> tensor<32x64xbf16>
    return %y, %dw : tensor<16x32xbf16>, tensor<32x64xbf16>
  }
}

// -----

// Without a policy the pass does nothing, marks or not.
// CHECK-LABEL: func.func @off
// CHECK-NEXT: kiln.linear wq
// CHECK-NOT: scaled_matmul
func.func @off(%x: tensor<16x64xbf16>, %w: tensor<32x64xbf16>) -> tensor<16x32xbf16> {
  %y = kiln.linear wq %x, %w param("q") {fp8 = #kiln.fp8_choice<fp8>} : tensor<16x64xbf16>, tensor<32x64xbf16> -> tensor<16x32xbf16>
  return %y : tensor<16x32xbf16>
}

// -----

// The decisions are kiln-fp8-select's: a linear it has not marked is an
// error, not a decision taken here.
module attributes {kiln.float8 = #kiln.float8<recipe = tensorwise>} {
  func.func @unmarked(%x: tensor<16x64xbf16>, %w: tensor<32x64xbf16>) -> tensor<16x32xbf16> {
    // expected-error @+1 {{'kiln.linear' op has no FP8 mark; kiln-fp8-linear reads the decisions kiln-fp8-select writes (run it first)}}
    %y = kiln.linear wq %x, %w param("q") : tensor<16x64xbf16>, tensor<32x64xbf16> -> tensor<16x32xbf16>
    return %y : tensor<16x32xbf16>
  }
}

// -----

// Each FP8 linear is paired with its backward by its parameter: two FP8
// linears of one weight (async TP's chunks) are an error, not a crash.
module attributes {kiln.float8 = #kiln.float8<recipe = tensorwise>} {
  func.func @chunks(%x: tensor<16x64xbf16>, %x2: tensor<16x64xbf16>, %w: tensor<32x64xbf16>) -> (tensor<16x32xbf16>, tensor<16x32xbf16>) {
    %y = kiln.linear wq %x, %w param("q") {fp8 = #kiln.fp8_choice<fp8>} : tensor<16x64xbf16>, tensor<32x64xbf16> -> tensor<16x32xbf16>
    // expected-error @+1 {{'kiln.linear' op kiln-fp8-linear: parameter 'q' is read by more than one FP8 linear (async TP's chunks?); one per parameter is supported}}
    %y2 = kiln.linear wq %x2, %w param("q") {fp8 = #kiln.fp8_choice<fp8>} : tensor<16x64xbf16>, tensor<32x64xbf16> -> tensor<16x32xbf16>
    return %y, %y2 : tensor<16x32xbf16>, tensor<16x32xbf16>
  }
}
