//===- KilnAttrs.td - Attributes of the kiln dialect -------*- tablegen -*-===//

#ifndef KILN_DIALECT_KILN_IR_KILNATTRS_TD
#define KILN_DIALECT_KILN_IR_KILNATTRS_TD

include "kiln/Dialect/Kiln/IR/KilnDialect.td"
include "mlir/IR/EnumAttr.td"

// What a linear computes in the model. Later passes decide by role (the FP8
// rewrite never touches `output` unless forced), so the role travels with
// the forward op and with both of its backward ops.
def Kiln_LinearRole : I32EnumAttr<"LinearRole", "role of a linear layer", [
  I32EnumAttrCase<"wq", 0>, I32EnumAttrCase<"wk", 1>,
  I32EnumAttrCase<"wv", 2>, I32EnumAttrCase<"wo", 3>,
  I32EnumAttrCase<"w1", 4>, I32EnumAttrCase<"w2", 5>,
  I32EnumAttrCase<"w3", 6>, I32EnumAttrCase<"output", 7>
]> {
  let cppNamespace = "::kiln";
  let genSpecializedAttr = 0;
}
def Kiln_LinearRoleAttr : EnumAttr<Kiln_Dialect, Kiln_LinearRole, "role"> {
  let assemblyFormat = "$value";
}

def Kiln_InitKind : I32EnumAttr<"InitKind", "parameter initialiser", [
  I32EnumAttrCase<"zeros", 0>, I32EnumAttrCase<"ones", 1>,
  I32EnumAttrCase<"normal", 2>, I32EnumAttrCase<"trunc_normal", 3>
]> {
  let cppNamespace = "::kiln";
  let genSpecializedAttr = 0;
}

def Kiln_InitAttr : AttrDef<Kiln_Dialect, "Init"> {
  let mnemonic = "init";
  let summary = "how a parameter is initialised";
  let description = [{
    `#kiln.init<ones>`, `#kiln.init<zeros>`, `#kiln.init<normal, std = S>` or
    `#kiln.init<trunc_normal, std = S, a = A, b = B>` (mean 0, truncated to
    the absolute interval [A, B], as torch.nn.init.trunc_normal_).
  }];
  let parameters = (ins "InitKind":$kind, APFloatParameter<"">:$std,
                        APFloatParameter<"">:$lo, APFloatParameter<"">:$hi);
  let builders = [
    AttrBuilder<(ins "InitKind":$kind, "double":$std, "double":$lo,
                     "double":$hi), [{
      return $_get($_ctxt, kind, ::llvm::APFloat(std), ::llvm::APFloat(lo),
                   ::llvm::APFloat(hi));
    }]>
  ];
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

//===----------------------------------------------------------------------===//
// FP8 policy: what the frontend asks for (`#kiln.float8`, on the module) and
// what kiln-fp8-select decided for each linear (`#kiln.fp8_choice`).
//===----------------------------------------------------------------------===//

def Kiln_Fp8Recipe : I32EnumAttr<"Fp8Recipe", "FP8 scaling recipe", [
  I32EnumAttrCase<"tensorwise", 0>, I32EnumAttrCase<"rowwise", 1>,
  I32EnumAttrCase<"delayed", 2>
]> {
  let cppNamespace = "::kiln";
  let genSpecializedAttr = 0;
}

def Kiln_AmaxComputeAlgo : I32EnumAttr<"AmaxComputeAlgo",
    "how the delayed recipe reads its amax history", [
  I32EnumAttrCase<"max", 0>, I32EnumAttrCase<"most_recent", 1>
]> {
  let cppNamespace = "::kiln";
  let genSpecializedAttr = 0;
}

def Kiln_Float8Attr : AttrDef<Kiln_Dialect, "Float8"> {
  let mnemonic = "float8";
  let summary = "the module's FP8 policy ([float8] of the model file)";
  let description = [{
    Set by the frontend on the module as `kiln.float8` when `[float8] enable
    = true`; absent, no pass touches FP8. The fields are the TOML keys of
    `[float8]`, TorchTitan's names; every one but `recipe` may be left out
    and then takes the TOML default (shown below), and the printer leaves
    out those equal to it.

    ```mlir
    module attributes {kiln.float8 = #kiln.float8<recipe = tensorwise,
        filter_fqns = ["k_proj"], auto_filter_small_kn = true,
        force_output_projection = false,
        enable_fsdp_float8_all_gather = false, amax_history_len = 16,
        amax_compute_algo = max>} { ... }
    ```

    Rules:
    - float8_c1: each entry of `filter_fqns` is a string that compiles as a
      regular expression (llvm::Regex, POSIX extended).
    - float8_c2: `enable_fsdp_float8_all_gather` needs `recipe = tensorwise`:
      the other recipes' scales are not one per tensor, so a shard cannot
      be cast before the gather.
    - float8_c3: `amax_history_len` lies in [1, 1024].
  }];
  let parameters = (ins "Fp8Recipe":$recipe, "::mlir::ArrayAttr":$filter_fqns,
                        "bool":$auto_filter_small_kn,
                        "bool":$force_output_projection,
                        "bool":$enable_fsdp_float8_all_gather,
                        "int64_t":$amax_history_len,
                        "AmaxComputeAlgo":$amax_compute_algo);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    static constexpr int64_t kMaxAmaxHistoryLen = 1024;
    /// The patterns of `filter_fqns`.
    ::llvm::SmallVector<::llvm::StringRef> getFilterPatterns() const;
  }];
}

// Why kiln-fp8-select decided as it did for one linear. Two reasons mean
// FP8 (`eligible`, `forced_output_projection`), the others BF16.
def Kiln_Fp8Reason : I32EnumAttr<"Fp8Reason", "why a linear is FP8 or not", [
  I32EnumAttrCase<"eligible", 0>,
  I32EnumAttrCase<"forced_output_projection", 1>,
  I32EnumAttrCase<"output_projection", 2>,
  I32EnumAttrCase<"not_divisible_by_16", 3>,
  I32EnumAttrCase<"filtered", 4>,
  I32EnumAttrCase<"small_gemm", 5>
]> {
  let cppNamespace = "::kiln";
  let genSpecializedAttr = 0;
}

def Kiln_Fp8ChoiceAttr : AttrDef<Kiln_Dialect, "Fp8Choice"> {
  let mnemonic = "fp8_choice";
  let summary = "whether a linear runs in FP8, and why";
  let description = [{
    kiln-fp8-select's mark on a `kiln.linear` (its `fp8` attribute): the
    dtype its GEMMs will run in, then the reason unless it is simply
    eligible, with the pattern for `filtered`.

    ```mlir
    #kiln.fp8_choice<fp8>
    #kiln.fp8_choice<fp8, forced_output_projection>
    #kiln.fp8_choice<bf16, output_projection>
    #kiln.fp8_choice<bf16, not_divisible_by_16>
    #kiln.fp8_choice<bf16, filtered = "k_proj">
    #kiln.fp8_choice<bf16, small_gemm>
    ```

    Rules:
    - fp8_choice_c1: `pattern` is set exactly when the reason is `filtered`.
    - fp8_choice_c2 (parser): the dtype written is the reason's.
  }];
  let parameters = (ins "Fp8Reason":$reason,
                        OptionalParameter<"::mlir::StringAttr">:$pattern);
  let builders = [
    AttrBuilder<(ins "Fp8Reason":$reason), [{
      return $_get($_ctxt, reason, ::mlir::StringAttr());
    }]>
  ];
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Whether the linear's GEMMs run in FP8.
    bool isFp8() const;
    /// The reason in words, as `kiln explain --fp8` prints a BF16 linear's
    /// ("small GEMM", "filtered by pattern 'k_proj'", ...); empty for an
    /// eligible linear.
    std::string describe() const;
  }];
}

//===----------------------------------------------------------------------===//
// The device mesh (docs/tp.md, "The mesh"): `#kiln.mesh` on the module, and
// the axis every collective runs over.
//===----------------------------------------------------------------------===//

def Kiln_MeshAxis : I32EnumAttr<"MeshAxis", "an axis of the device mesh", [
  I32EnumAttrCase<"dp_shard", 0>, I32EnumAttrCase<"tp", 1>,
  I32EnumAttrCase<"pp", 2>
]> {
  let cppNamespace = "::kiln";
  let genSpecializedAttr = 0;
}
def Kiln_MeshAxisAttr : EnumAttr<Kiln_Dialect, Kiln_MeshAxis, "axis"> {
  let assemblyFormat = "$value";
}

def Kiln_TpShardAttr : AttrDef<Kiln_Dialect, "TpShard"> {
  let mnemonic = "tp_shard";
  let summary = "which slice of a whole tensor a tensor-parallel rank holds";
  let description = [{
    On an argument of `@forward_loss` as `kiln.tp_shard`, written by
    `kiln-tp-partition`: the argument is chunk `index` (the rank's position
    on the mesh's tp axis) of `tp` equal chunks of the whole tensor along
    `dim`. Parameters keep their HF name (`kiln.param`), so a checkpoint can
    gather the whole tensor; the token input is the rank's sequence shard.
    `pad` (omitted when 0) counts padding entries at the end of `dim`: the
    whole tensor is `tp x size - pad` long along it (a vocabulary that tp
    does not divide, padded for the output projection; docs/tp.md).

    ```mlir
    %wq: tensor<32x64xf32> {kiln.param = "model.layers.0.self_attn.q_proj.weight",
                            kiln.tp_shard = #kiln.tp_shard<dim = 0, index = 1>}
    ```
  }];
  let parameters = (ins "int64_t":$dim, "int64_t":$index,
                        DefaultValuedParameter<"int64_t", "0">:$pad);
  let builders = [
    AttrBuilder<(ins "int64_t":$dim, "int64_t":$index), [{
      return $_get($_ctxt, dim, index, 0);
    }]>
  ];
  let assemblyFormat = "`<` struct(params) `>`";
}

def Kiln_MeshAttr : AttrDef<Kiln_Dialect, "Mesh"> {
  let mnemonic = "mesh";
  let summary = "the device mesh [pp, dp_shard, tp] a module runs on";
  let description = [{
    On the module as `kiln.mesh`, set by the frontend from the mesh the
    config and the run's world size decide (frontend/Mesh.cpp). Three axes,
    TorchTitan's names and order: `pp` (pipeline stages) outermost, then
    `dp_shard` (FSDP), then `tp` (tensor parallel) innermost, so rank `r`
    sits at `(r / (dp_shard x tp), (r / tp) % dp_shard, r % tp)` and a tp
    group is `tp` consecutive ranks. A collective over an axis runs among
    the ranks that share the other axes' coordinates. `pp` is omitted when
    it is 1.

    ```mlir
    module attributes {kiln.mesh = #kiln.mesh<pp = 2, dp_shard = 2, tp = 4>} { ... }
    ```

    Rules:
    - mesh_c1: `pp`, `dp_shard` and `tp` are at least 1.
    - mesh_c2: their product (the world size) is below 2^31 (MPI's and
      NCCL's `int` ranks).
  }];
  let parameters = (ins DefaultValuedParameter<"int64_t", "1">:$pp,
                        "int64_t":$dp_shard, "int64_t":$tp);
  let builders = [
    AttrBuilder<(ins "int64_t":$dp_shard, "int64_t":$tp), [{
      return $_get($_ctxt, 1, dp_shard, tp);
    }]>
  ];
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// pp x dp_shard x tp.
    int64_t getRanks() const { return getPp() * getDpShard() * getTp(); }
    /// The size of one axis: the ranks of a collective over it.
    int64_t getAxisSize(MeshAxis axis) const {
      return axis == MeshAxis::tp   ? getTp()
             : axis == MeshAxis::pp ? getPp()
                                    : getDpShard();
    }
  }];
}

#endif // KILN_DIALECT_KILN_IR_KILNATTRS_TD
