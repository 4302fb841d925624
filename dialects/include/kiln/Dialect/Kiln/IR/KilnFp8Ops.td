//===- KilnFp8Ops.td - FP8 scaling, casts and scaled GEMMs -*- tablegen -*-===//
//
// What `kiln-fp8-linear` writes. Every FP8 operand is made by one
// `kiln.quantize`, which returns the codes and the scale it multiplied by;
// `kiln.scaled_matmul` divides the scales back out after accumulating in
// fp32 (as cuBLASLt's scale pointers do). The scale of a tensor with amax
// `a` for a format whose largest finite value is F:
//
//   scale = F / max(a, 1e-12)                       (f32 arithmetic)
//   scale = 2^floor(log2(scale))                    (with `pow2_scale`)
//
// F is 448 for f8E4M3FN and 57344 for f8E5M2; the codes are
// saturating round-to-nearest-even casts of `x * scale` (fp32 product),
// bit-exact with cuda_fp8.h under __NV_SATFINITE.
//
// Included from KilnOps.td.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_KILN_IR_KILNFP8OPS_TD
#define KILN_DIALECT_KILN_IR_KILNFP8OPS_TD

def Kiln_F32Tensor : StaticShapeTensorOf<[F32]>;

def Kiln_AmaxOp : Kiln_Op<"amax", [Pure]> {
  let summary = "largest magnitude of a tensor";
  let description = [{
    `result = max over all elements of |input|` in f32; a NaN element makes
    it NaN. Fusible: a fused group computes it as an `amax` store, so no op
    of the same group can read it.

    ```mlir
    %a = kiln.amax %x : tensor<128x64xbf16> -> tensor<f32>
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$input);
  let results = (outs Kiln_ScalarF32:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

def Kiln_QuantizeOp : Kiln_Op<"quantize", [Pure]> {
  let summary = "scales a tensor into an FP8 format: the codes and the scale";
  let description = [{
    Tensorwise (an `amax` operand): one scale from that amax for the whole
    tensor. Rowwise (no `amax` operand): one scale per row (over the last
    dimension) from the row's own amax; `scale` then has the input's shape
    without its last dimension. The result's element type picks the format.
    See the file header for the formulas.

    Rules:
    - quantize_c1: `result` has the shape of `input`.
    - quantize_c2: `scale` is rank-0 with an `amax` operand, else the
      input's shape without its last dimension.

    ```mlir
    %q, %s = kiln.quantize %x, %a : tensor<128x64xbf16>, tensor<f32> -> tensor<128x64xf8E4M3FN>, tensor<f32>
    %qr, %sr = kiln.quantize %x {pow2_scale} : tensor<128x64xbf16> -> tensor<128x64xf8E4M3FN>, tensor<128xf32>
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$input,
                       Optional<Kiln_ScalarF32>:$amax, UnitAttr:$pow2_scale);
  let results = (outs Kiln_Fp8Tensor:$result, Kiln_F32Tensor:$scale);
  let assemblyFormat = [{
    $input (`,` $amax^)? attr-dict `:` type($input) (`,` type($amax)^)? `->`
    type($result) `,` type($scale)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    bool isRowwise() { return !getAmax(); }
  }];
}

def Kiln_ScaledMatmulOp : Kiln_Op<"scaled_matmul", [Pure]> {
  let summary = "FP8 GEMM a * b^T with the scales divided out";
  let description = [{
    `result[m, n] = (sum_k a[m, k] * b[n, k]) * ((1 / a_scale[m]) *
    (1 / b_scale[n]))`: the codes' values multiplied exactly, summed in
    fp32, the reciprocals taken in f32, the result rounded to its type. A
    rank-0 scale applies to every row. Both operands are K-major (cuBLASLt's
    FP8 layout), so the three GEMMs of a linear each read operands
    quantized or transposed for them. `gemm` says which one this is
    (`output`, `grad_input`, `grad_weight`); `role` and `param` are those
    of the linear. `fast_accumulation` lets the GEMM accumulate with
    Hopper's fast FP8 accumulation (cuBLASLt's FAST_ACCUM: partial sums
    promoted to fp32 less often); kiln-fp8-linear sets it for the forward
    GEMM only, as torchao's recipes do. The CPU backend sums exactly in
    fp32 either way.

    Rules:
    - scaled_matmul_c1: `a` is [M, K] and `b` is [N, K]; `result` is [M, N].
    - scaled_matmul_c2: each scale is rank-0 or has one value per row of
      its operand.
    - scaled_matmul_c3: not both operands are f8E5M2.

    ```mlir
    %y = kiln.scaled_matmul output wq %xq, %xs, %wq, %ws param("w")
        {fast_accumulation = true}
        : tensor<128x64xf8E4M3FN>, tensor<f32>, tensor<64x64xf8E4M3FN>, tensor<f32> -> tensor<128x64xbf16>
    ```
  }];
  let arguments = (ins StrAttr:$gemm, Kiln_LinearRoleAttr:$role,
                       Kiln_Fp8Tensor:$a, Kiln_F32Tensor:$a_scale,
                       Kiln_Fp8Tensor:$b, Kiln_F32Tensor:$b_scale,
                       StrAttr:$param, BoolAttr:$fast_accumulation);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = [{
    $gemm `` $role $a `,` $a_scale `,` $b `,` $b_scale `param` `(` $param `)`
    attr-dict `:` type($a) `,` type($a_scale) `,` type($b) `,`
    type($b_scale) `->` type($result)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// FP8 all-gather (`kiln-fp8-all-gather`): weights cast to e4m3 on their
// shards, so that the all-gather moves one byte per element. A group's flat
// buffer holds weight i at [offsets[i], offsets[i] + sizes[i]); rank r's
// shard of length S is elements [r * S, (r + 1) * S) of it, r being the
// rank that runs the op.
//===----------------------------------------------------------------------===//

def Kiln_ShardAmaxOp : Kiln_Op<"shard_amax", [Pure]> {
  let summary = "each weight's largest magnitude within this rank's shard";
  let description = [{
    `result[i]` = max |x| over the elements of weight i that lie in this
    rank's shard, 0 when none does. An all-reduce(max) of the result over
    the `ranks` ranks gives every weight its amax.

    Rules:
    - shard_amax_c1: `offsets` and `sizes` have one entry per result element.
    - shard_amax_c2: each weight lies inside the flat buffer of `ranks`
      shards, and the weights do not overlap.

    ```mlir
    %a = kiln.shard_amax %shard {offsets = array<i64: 0, 4096>, sizes = array<i64: 4096, 2048>, ranks = 2 : i64} : tensor<3072xbf16> -> tensor<2xf32>
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$shard, DenseI64ArrayAttr:$offsets,
                       DenseI64ArrayAttr:$sizes, I64Attr:$ranks);
  let results = (outs Kiln_F32Tensor:$result);
  let assemblyFormat = "$shard attr-dict `:` type($shard) `->` type($result)";
  let hasVerifier = 1;
}

def Kiln_ShardQuantizeOp : Kiln_Op<"shard_quantize", [Pure]> {
  let summary = "casts this rank's shard to e4m3, each weight with its scale";
  let description = [{
    `scales[i] = 448 / max(amax[i], 1e-12)` (f32), and each element of
    weight i in the shard becomes the e4m3 code of `x * scales[i]`, as
    `kiln.quantize` makes it; elements of no listed weight (padding) become
    0. With the global amaxes, gathering the codes of every rank gives each
    weight's FP8 cast as a whole, bit for bit.

    Rules:
    - shard_quantize_c1: `codes` has the shard's shape; `amax` and `scales`
      have one element per weight; the weights are as in shard_amax_c2.

    ```mlir
    %c, %s = kiln.shard_quantize %shard, %amax {offsets = array<i64: 0, 4096>, sizes = array<i64: 4096, 2048>, ranks = 2 : i64} : tensor<3072xbf16>, tensor<2xf32> -> tensor<3072xf8E4M3FN>, tensor<2xf32>
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$shard, Kiln_F32Tensor:$amax,
                       DenseI64ArrayAttr:$offsets, DenseI64ArrayAttr:$sizes,
                       I64Attr:$ranks);
  let results = (outs Kiln_Fp8Tensor:$codes, Kiln_F32Tensor:$scales);
  let assemblyFormat = [{
    $shard `,` $amax attr-dict `:` type($shard) `,` type($amax) `->`
    type($codes) `,` type($scales)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// The delayed recipe: scales from the amaxes of earlier steps. Each cast
// has a history (a training state, zeros at initialisation, most recent
// first) of the amaxes all-reduced over ranks at the end of each step.
//===----------------------------------------------------------------------===//

def Kiln_DelayedAmaxOp : Kiln_Op<"delayed_amax", [Pure]> {
  let summary = "the amax a delayed cast scales with";
  let description = [{
    `h = max(history)` (`algo = "max"`) or `history[0]` (`"most_recent"`).
    Without `current` the result is `h`; with it, `h` when `h` is positive,
    else `current` (a history with nothing recorded yet scales dynamically,
    as torchao's delayed scaling initialises its buffers: what the
    `@fp8_calibration` step does before the first training step). Values
    beyond `h` saturate in the cast.

    Rules:
    - delayed_amax_c1: `history` is rank-1 and not empty.
    - delayed_amax_c2: `algo` is `max` or `most_recent`.

    ```mlir
    %a = kiln.delayed_amax %history {algo = "max"} : tensor<16xf32>
    %b = kiln.delayed_amax %history, %current {algo = "max"} : tensor<16xf32>
    ```
  }];
  let arguments = (ins Kiln_F32Tensor:$history,
                       Optional<Kiln_ScalarF32>:$current, StrAttr:$algo);
  let results = (outs Kiln_ScalarF32:$result);
  let assemblyFormat = [{
    $history (`,` $current^)? attr-dict `:` type($history)
  }];
  let hasVerifier = 1;
}

def Kiln_AmaxHistoryUpdateOp : Kiln_Op<"amax_history_update",
    [Pure, AllTypesMatch<["history", "result"]>]> {
  let summary = "the history with this step's amax in front";
  let description = [{
    `result = [amax, history[0], ..., history[n - 2]]`: the oldest entry
    drops out.

    Rules:
    - amax_history_update_c1: `history` is rank-1 and not empty.

    ```mlir
    %h2 = kiln.amax_history_update %history, %amax : tensor<16xf32>
    ```
  }];
  let arguments = (ins Kiln_F32Tensor:$history, Kiln_ScalarF32:$amax);
  let results = (outs Kiln_F32Tensor:$result);
  let assemblyFormat = [{
    $history `,` $amax attr-dict `:` type($history)
  }];
  let hasVerifier = 1;
}

#endif // KILN_DIALECT_KILN_IR_KILNFP8OPS_TD
