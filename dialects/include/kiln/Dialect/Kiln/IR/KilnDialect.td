//===- KilnDialect.td - The kiln dialect -------------------*- tablegen -*-===//
//
// The kiln dialect describes one training step of a decoder-only transformer
// at the level its compiler reasons about: embeddings, norms, linears that
// know their role, attention as one primitive, and the loss.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_KILN_IR_KILNDIALECT_TD
#define KILN_DIALECT_KILN_IR_KILNDIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Kiln_Dialect : Dialect {
  let name = "kiln";
  let cppNamespace = "::kiln";
  let summary = "Transformer training graphs";
  let description = [{
    Ops of a decoder-only (Llama-family) transformer training step. Tensors
    are ranked and statically shaped; activations are laid out batch-major
    (`[batch, seq, ...]`). Linear weights use PyTorch's `[out, in]` layout so
    that `linear(x, W) = x * W^T`.

    Function arguments that are model parameters carry `kiln.param` (the HF
    Llama name of the parameter) and `kiln.init` (how it is initialised);
    data inputs carry `kiln.input`, optimizer state `kiln.state`. Results
    carry `kiln.grad` (the gradient of a parameter), `kiln.state` (the new
    value of a parameter or state) or `kiln.output` (a metric).
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let hasOperationAttrVerify = 1;
  let hasCanonicalizer = 0;
  let extraClassDeclaration = [{
    static constexpr ::llvm::StringLiteral kParamAttrName = "kiln.param";
    static constexpr ::llvm::StringLiteral kInitAttrName = "kiln.init";
    static constexpr ::llvm::StringLiteral kInputAttrName = "kiln.input";
    /// Optimizer state (arguments) and every updated state (results).
    static constexpr ::llvm::StringLiteral kStateAttrName = "kiln.state";
    /// A result that is the gradient of the named parameter.
    static constexpr ::llvm::StringLiteral kGradAttrName = "kiln.grad";
    /// On a flat shard of a parameter group (kiln-fsdp): the parameters the
    /// group's flat buffer holds, each {name, offset, shape, init}.
    static constexpr ::llvm::StringLiteral kShardOfAttrName = "kiln.shard_of";
    /// A result that is a metric: "loss", "grad_norm", "lr".
    static constexpr ::llvm::StringLiteral kOutputAttrName = "kiln.output";
    /// On the module: its FP8 policy, a #kiln.float8 (absent: no FP8).
    static constexpr ::llvm::StringLiteral kFloat8AttrName = "kiln.float8";
    /// On the module: the device mesh, a #kiln.mesh (absent: one rank).
    static constexpr ::llvm::StringLiteral kMeshAttrName = "kiln.mesh";
    // Tensor parallel (docs/tp.md): the module's `kiln.tp` dictionary (the
    // rank's position on the tp axis, loss parallel) and an argument's shard.
    static constexpr ::llvm::StringLiteral kTpAttrName = "kiln.tp";
    static constexpr ::llvm::StringLiteral kTpShardAttrName = "kiln.tp_shard";
    /// On the module: pipeline parallel's `kiln.pp` dictionary (the rank's
    /// position on the pp axis, the stage count, the schedule; docs/pp.md).
    static constexpr ::llvm::StringLiteral kPpAttrName = "kiln.pp";
    /// On an op, between kiln-grad-accum and kiln-pipeline-schedule: the
    /// microbatch it computes.
    static constexpr ::llvm::StringLiteral kMicrobatchAttrName =
        "kiln.microbatch";
    /// On an op, from kiln-pipeline-schedule on: the unit it computes
    /// ("F3s1": the forward of microbatch 3 on stage 1), an annotation the
    /// plan keeps for traces and `kiln explain --schedule`.
    static constexpr ::llvm::StringLiteral kUnitAttrName = "kiln.unit";
    /// On the module: microbatches per step (gradient accumulation,
    /// kiln-grad-accum; absent: 1).
    static constexpr ::llvm::StringLiteral kMicrobatchesAttrName =
        "kiln.microbatches";
    /// On the module: selective activation checkpointing's policy
    /// (`[activation_checkpoint] selective_ac_option`; absent: gemm).
    static constexpr ::llvm::StringLiteral kSelectiveAcAttrName =
        "kiln.selective_ac";
    /// Whether `policy` is one kiln-activation-checkpoint knows: `gemm`, `op`
    /// or a positive number of blocks (TorchTitan's layer policy).
    static bool isSelectiveAcPolicy(::llvm::StringRef policy);

  private:
    void registerAttributes();
  public:
  }];
}

class Kiln_Op<string mnemonic, list<Trait> traits = []>
    : Op<Kiln_Dialect, mnemonic, traits>;

#endif // KILN_DIALECT_KILN_IR_KILNDIALECT_TD
