//===- ModelImporter.cpp - Config to the kiln dialect ---------------------===//
//
// Emits the forward pass and loss of a Llama-family decoder:
//   h = embed(tokens)
//   per layer: h += wo(attn(rope(wq(n)), rope(wk(n)), wv(n))), n = norm(h)
//              h += w2(silu(w1(n)) * w3(n)),                   n = norm(h)
//   loss = cross_entropy(output(norm(h)), targets)
// Activations are f32 here; the precision phase introduces lower dtypes.
//
//===----------------------------------------------------------------------===//

#include "kiln/Frontend/ModelImporter.h"
#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"
#include "kiln/Frontend/ConfigParser.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <cmath>

using namespace mlir;
using namespace kiln;

std::vector<ParamSpec> kiln::modelParameters(const Config &config) {
  const ModelConfig &m = config.model;
  int64_t kvDim = m.kvHeads() * m.headDim();
  int64_t hidden = m.ffnHiddenDim();
  // TorchTitan: output layers of block i scaled by 1/sqrt(2 * (i + 1)); the
  // output projection uses std dim^-1/2 truncated at 3 std.
  double outStd = 1.0 / std::sqrt(static_cast<double>(m.dim));
  ParamSpec outputInit{"", {}, InitKind::trunc_normal, outStd, -3 * outStd,
                       3 * outStd};
  auto tn = [](std::string name, std::vector<int64_t> shape, double std) {
    return ParamSpec{std::move(name), std::move(shape), InitKind::trunc_normal,
                     std, -2.0, 2.0};
  };
  auto ones = [](std::string name, int64_t n) {
    return ParamSpec{std::move(name), {n}, InitKind::ones};
  };

  std::vector<ParamSpec> params;
  // A tied table is also the output projection: it takes the output's init.
  if (m.tie_embeddings) {
    ParamSpec embed = outputInit;
    embed.name = "model.embed_tokens.weight";
    embed.shape = {m.vocab_size, m.dim};
    params.push_back(embed);
  } else {
    params.push_back({"model.embed_tokens.weight",
                      {m.vocab_size, m.dim},
                      InitKind::normal,
                      1.0});
  }
  for (int64_t i = 0; i < m.n_layers; ++i) {
    std::string p = "model.layers." + std::to_string(i) + ".";
    double depthStd = 0.02 / std::sqrt(2.0 * static_cast<double>(i + 1));
    params.push_back(ones(p + "input_layernorm.weight", m.dim));
    params.push_back(tn(p + "self_attn.q_proj.weight", {m.dim, m.dim}, 0.02));
    params.push_back(tn(p + "self_attn.k_proj.weight", {kvDim, m.dim}, 0.02));
    params.push_back(tn(p + "self_attn.v_proj.weight", {kvDim, m.dim}, 0.02));
    params.push_back(
        tn(p + "self_attn.o_proj.weight", {m.dim, m.dim}, depthStd));
    params.push_back(ones(p + "post_attention_layernorm.weight", m.dim));
    params.push_back(tn(p + "mlp.gate_proj.weight", {hidden, m.dim}, 0.02));
    params.push_back(tn(p + "mlp.up_proj.weight", {hidden, m.dim}, depthStd));
    params.push_back(
        tn(p + "mlp.down_proj.weight", {m.dim, hidden}, depthStd));
  }
  params.push_back(ones("model.norm.weight", m.dim));
  if (!m.tie_embeddings) {
    ParamSpec out = outputInit;
    out.name = "lm_head.weight";
    out.shape = {m.vocab_size, m.dim};
    params.push_back(out);
  }
  return params;
}

namespace {
/// Emits the body of @forward_loss, one helper per model component.
class ForwardBuilder {
public:
  ForwardBuilder(OpBuilder &b, const Config &config,
                 llvm::StringMap<Value> params)
      : b(b), config(config), m(config.model), params(std::move(params)),
        f32(b.getF32Type()) {
    // One microbatch (kiln-grad-accum makes the step take the share).
    batch = config.microbatchRows();
    seq = config.training.seq_len;
  }

  /// The whole model, or under pipeline parallel the rank's stages
  /// (Config::ppPosition): the loss, or 0 on a rank without the last stage.
  Value build(Value tokens, Value targets);

private:
  /// Location of the model key that decides a component, named after it.
  Location loc(llvm::StringRef name, llvm::StringRef key,
               llvm::ArrayRef<llvm::StringRef> fallbacks = {}) {
    Location file = keyLocation(b.getContext(), config, key, fallbacks);
    return NameLoc::get(b.getStringAttr(name), file);
  }
  RankedTensorType act(llvm::ArrayRef<int64_t> tail) {
    SmallVector<int64_t> shape = {batch, seq};
    shape.append(tail.begin(), tail.end());
    return RankedTensorType::get(shape, f32);
  }
  Value linear(LinearRole role, llvm::StringRef paramName, Value x,
               Location at) {
    Value w = params.lookup(paramName);
    int64_t out = cast<RankedTensorType>(w.getType()).getDimSize(0);
    return LinearOp::create(b, at, act({out}), role, x, w, paramName,
                            /*fp8=*/Fp8ChoiceAttr());
  }
  Value rmsNorm(llvm::StringRef paramName, Value x, Location at) {
    return RMSNormOp::create(b, at, x.getType(), x, params.lookup(paramName),
                             b.getF64FloatAttr(m.norm_eps));
  }
  Value attentionBlock(const std::string &prefix, Value x);
  Value feedForwardBlock(const std::string &prefix, Value x);
  Value embed(Value tokens);
  Value layers(int64_t begin, int64_t end, Value h);
  Value head(Value h, Value targets);

  OpBuilder &b;
  const Config &config;
  const ModelConfig &m;
  llvm::StringMap<Value> params;
  Type f32;
  int64_t batch, seq;
};
} // namespace

Value ForwardBuilder::attentionBlock(const std::string &prefix, Value x) {
  std::string attn = prefix + "self_attn.";
  int64_t hd = m.headDim(), hkv = m.kvHeads();
  Location headsLoc = loc(attn + "attention", "model.n_heads");
  Location kvLoc = loc(attn + "kv", "model.n_kv_heads", {"model.n_heads"});
  Value n = rmsNorm(prefix + "input_layernorm.weight", x,
                    loc(prefix + "input_layernorm", "model.norm_eps",
                        {"model.dim"}));
  Value q = linear(LinearRole::wq, attn + "q_proj.weight", n,
                   loc(attn + "q_proj", "model.n_heads"));
  Value k = linear(LinearRole::wk, attn + "k_proj.weight", n,
                   loc(attn + "k_proj", "model.n_kv_heads", {"model.n_heads"}));
  Value v = linear(LinearRole::wv, attn + "v_proj.weight", n,
                   loc(attn + "v_proj", "model.n_kv_heads", {"model.n_heads"}));
  auto heads = [&](Value t, int64_t h, Location at) -> Value {
    return ReshapeOp::create(b, at, act({h, hd}), t);
  };
  q = heads(q, m.n_heads, headsLoc);
  k = heads(k, hkv, kvLoc);
  v = heads(v, hkv, kvLoc);
  Location ropeLoc = loc(attn + "rope", "model.rope_theta", {"model.n_heads"});
  FloatAttr theta = b.getF64FloatAttr(m.rope_theta);
  q = RopeOp::create(b, ropeLoc, q.getType(), q, theta);
  k = RopeOp::create(b, ropeLoc, k.getType(), k, theta);
  auto lseType = RankedTensorType::get({batch, m.n_heads, seq}, f32);
  auto sdpa = AttentionOp::create(
      b, headsLoc, q.getType(), lseType, q, k, v, b.getUnitAttr(),
      b.getF64FloatAttr(1.0 / std::sqrt(static_cast<double>(hd))));
  Value o = ReshapeOp::create(b, headsLoc, act({m.dim}), sdpa.getResult());
  o = linear(LinearRole::wo, attn + "o_proj.weight", o,
             loc(attn + "o_proj", "model.n_heads"));
  return AddOp::create(b, loc(prefix + "attention_residual", "model.n_layers"),
                       x, o);
}

Value ForwardBuilder::feedForwardBlock(const std::string &prefix, Value x) {
  std::string mlp = prefix + "mlp.";
  llvm::SmallVector<llvm::StringRef> sizeKeys = {"model.multiple_of",
                                                 "model.dim"};
  Value n = rmsNorm(prefix + "post_attention_layernorm.weight", x,
                    loc(prefix + "post_attention_layernorm", "model.norm_eps",
                        {"model.dim"}));
  Location ffnLoc = loc(mlp + "act", "model.ffn_dim_multiplier", sizeKeys);
  Value gate = linear(LinearRole::w1, mlp + "gate_proj.weight", n,
                      loc(mlp + "gate_proj", "model.ffn_dim_multiplier",
                          sizeKeys));
  Value up = linear(LinearRole::w3, mlp + "up_proj.weight", n,
                    loc(mlp + "up_proj", "model.ffn_dim_multiplier", sizeKeys));
  Value act = SiluOp::create(b, ffnLoc, gate);
  Value prod = MulOp::create(b, ffnLoc, act, up);
  Value down = linear(LinearRole::w2, mlp + "down_proj.weight", prod,
                      loc(mlp + "down_proj", "model.ffn_dim_multiplier",
                          sizeKeys));
  return AddOp::create(b, loc(prefix + "mlp_residual", "model.n_layers"), x,
                       down);
}

Value ForwardBuilder::embed(Value tokens) {
  return EmbeddingOp::create(b, loc("model.embed_tokens", "model.vocab_size"),
                             act({m.dim}),
                             params.lookup("model.embed_tokens.weight"), tokens,
                             b.getStringAttr("model.embed_tokens.weight"),
                             /*vocab_start=*/nullptr, /*vocab_size=*/nullptr);
}

Value ForwardBuilder::layers(int64_t begin, int64_t end, Value h) {
  for (int64_t i = begin; i < end; ++i) {
    std::string prefix = "model.layers." + std::to_string(i) + ".";
    h = attentionBlock(prefix, h);
    h = feedForwardBlock(prefix, h);
  }
  return h;
}

Value ForwardBuilder::head(Value h, Value targets) {
  h = rmsNorm("model.norm.weight", h,
              loc("model.norm", "model.norm_eps", {"model.dim"}));
  llvm::StringRef weight =
      m.tie_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
  Location headLoc = loc("lm_head", "model.vocab_size");
  Value logits = linear(LinearRole::output, weight, h, headLoc);
  return CrossEntropyOp::create(b, headLoc, RankedTensorType::get({}, f32),
                                logits, targets);
}

Value ForwardBuilder::build(Value tokens, Value targets) {
  int64_t stages = config.runMesh().pp > 1 ? config.pipelineStages() : 1;
  if (stages == 1)
    return head(layers(0, m.n_layers, embed(tokens)), targets);
  // Stage s holds layers [s * L / S, (s + 1) * L / S) and runs on pp rank
  // s % pp: this rank's stages, each a forward of its own between the
  // transfers that connect it to its neighbours (docs/pp.md).
  int64_t pp = config.runMesh().pp;
  Location pipeLoc = loc("pipeline", "parallelism.pipeline_parallel_degree");
  Value loss;
  for (int64_t s = config.ppPosition; s < stages; s += pp) {
    Value h = s == 0 ? embed(tokens)
                     : PipeRecvOp::create(b, pipeLoc, act({m.dim}),
                                          PipeDirection::activation, s, stages)
                           .getResult();
    auto [first, end] = config.stageLayers(s);
    h = layers(first, end, h);
    if (s == stages - 1)
      loss = head(h, targets);
    else
      PipeSendOp::create(b, pipeLoc, h, PipeDirection::activation, s, stages);
  }
  if (loss)
    return loss;
  auto scalar = RankedTensorType::get({}, f32);
  return arith::ConstantOp::create(b, pipeLoc,
                                   DenseElementsAttr::get(scalar, 0.0f));
}

/// Whether parameter `name` belongs to a stage this rank holds (all of them
/// without pipeline parallel).
static bool heldByRank(const Config &config, llvm::StringRef name) {
  MeshShape mesh = config.runMesh();
  if (mesh.pp == 1)
    return true;
  int64_t stages = config.pipelineStages();
  int64_t stage = stages - 1; // the final norm and the output projection
  if (name.starts_with("model.embed_tokens."))
    stage = 0;
  llvm::StringRef rest = name;
  int64_t layer;
  if (rest.consume_front("model.layers.") && !rest.consumeInteger(10, layer))
    for (int64_t s = 0; s < stages; ++s)
      if (config.stageLayers(s).second > layer) {
        stage = s;
        break;
      }
  return stage % mesh.pp == config.ppPosition;
}

/// The hyperparameters the train phase needs, carried by the module so that
/// every IR dump is self-contained.
static DictionaryAttr optimizerAttr(OpBuilder &b, const Config &config) {
  const OptimizerConfig &o = config.optimizer;
  const LRSchedulerConfig &s = config.lr_scheduler;
  return b.getDictionaryAttr({
      b.getNamedAttr("lr", b.getF64FloatAttr(o.lr)),
      b.getNamedAttr("min_lr", b.getF64FloatAttr(s.min_lr)),
      b.getNamedAttr("beta1", b.getF64FloatAttr(o.betas[0])),
      b.getNamedAttr("beta2", b.getF64FloatAttr(o.betas[1])),
      b.getNamedAttr("eps", b.getF64FloatAttr(o.eps)),
      b.getNamedAttr("weight_decay", b.getF64FloatAttr(o.weight_decay)),
      b.getNamedAttr("max_norm", b.getF64FloatAttr(o.max_norm)),
      b.getNamedAttr("warmup_steps", b.getI64IntegerAttr(s.warmup_steps)),
      b.getNamedAttr("total_steps",
                     b.getI64IntegerAttr(config.training.steps)),
      b.getNamedAttr("decay", b.getStringAttr(s.decay)),
  });
}

namespace {
/// The parameters of #kiln.float8 from [float8]; the schema allows only the
/// enums' spellings, so a failure here is a schema out of step.
struct Float8Fields {
  Fp8Recipe recipe;
  ArrayAttr filterFqns;
  AmaxComputeAlgo algo;
};
FailureOr<Float8Fields>
float8Fields(MLIRContext *context, const Float8Config &f8,
             function_ref<InFlightDiagnostic()> emitError) {
  std::optional<Fp8Recipe> recipe = symbolizeFp8Recipe(f8.recipe);
  if (!recipe)
    return emitError() << "float8.recipe must be tensorwise, rowwise or "
                          "delayed, got '"
                       << f8.recipe << "'";
  std::optional<AmaxComputeAlgo> algo =
      symbolizeAmaxComputeAlgo(f8.amax_compute_algo);
  if (!algo)
    return emitError() << "float8.amax_compute_algo must be max or "
                          "most_recent, got '"
                       << f8.amax_compute_algo << "'";
  SmallVector<Attribute> fqns;
  for (const std::string &f : f8.filter_fqns)
    fqns.push_back(StringAttr::get(context, f));
  return Float8Fields{*recipe, ArrayAttr::get(context, fqns), *algo};
}
} // namespace

LogicalResult
kiln::verifyFloat8Policy(MLIRContext *context, const Float8Config &f8,
                         function_ref<InFlightDiagnostic()> emitError) {
  FailureOr<Float8Fields> fields = float8Fields(context, f8, emitError);
  if (failed(fields))
    return failure();
  return Float8Attr::verify(emitError, fields->recipe, fields->filterFqns,
                            f8.auto_filter_small_kn, f8.force_output_projection,
                            f8.enable_fsdp_float8_all_gather,
                            f8.amax_history_len, fields->algo);
}

Float8Attr
kiln::importFloat8Policy(MLIRContext *context, const Float8Config &f8,
                         function_ref<InFlightDiagnostic()> emitError) {
  FailureOr<Float8Fields> fields = float8Fields(context, f8, emitError);
  if (failed(fields))
    return {};
  return Float8Attr::getChecked(
      emitError, context, fields->recipe, fields->filterFqns,
      f8.auto_filter_small_kn, f8.force_output_projection,
      f8.enable_fsdp_float8_all_gather, f8.amax_history_len, fields->algo);
}

OwningOpRef<ModuleOp> kiln::importModel(MLIRContext *context,
                                        const Config &config) {
  context->loadDialect<KilnDialect, func::FuncDialect, arith::ArithDialect>();
  OpBuilder b(context);
  Location fileLoc = FileLineColLoc::get(context, config.sourceName, 1, 1);
  OwningOpRef<ModuleOp> module = ModuleOp::create(fileLoc);
  b.setInsertionPointToEnd(module->getBody());
  module->getOperation()->setAttr("kiln.optimizer",
                                  optimizerAttr(b, config));
  module->getOperation()->setAttr(
      "kiln.precision",
      b.getDictionaryAttr(
          {b.getNamedAttr("param",
                          b.getStringAttr(config.mixed_precision.param)),
           b.getNamedAttr("reduce",
                          b.getStringAttr(config.mixed_precision.reduce))}));

  const TrainingConfig &t = config.training;
  module->getOperation()->setAttr(
      "kiln.training",
      b.getDictionaryAttr(
          {b.getNamedAttr("steps", b.getI64IntegerAttr(t.steps)),
           b.getNamedAttr("seed", b.getI64IntegerAttr(t.seed)),
           b.getNamedAttr("eval_interval", b.getI64IntegerAttr(t.eval_interval)),
           b.getNamedAttr("eval_steps", b.getI64IntegerAttr(t.eval_steps)),
           b.getNamedAttr("data", b.getStringAttr(t.data)),
           b.getNamedAttr("checkpoint_interval",
                          b.getI64IntegerAttr(config.checkpoint.interval)),
           b.getNamedAttr("checkpoint_folder",
                          b.getStringAttr(config.checkpoint.folder)),
           b.getNamedAttr("comm_timeout_seconds",
                          b.getI64IntegerAttr(
                              config.comm.train_timeout_seconds))}));

  const ActivationCheckpointConfig &ac = config.activation_checkpoint;
  module->getOperation()->setAttr("kiln.activation_checkpoint",
                                  b.getStringAttr(ac.mode));
  if (ac.mode == "selective")
    module->getOperation()->setAttr(KilnDialect::kSelectiveAcAttrName,
                                    b.getStringAttr(ac.selective_ac_option));
  // The mesh the config and the run's world size decided (Mesh.cpp): where
  // the world size enters the compiler.
  MeshShape mesh = config.runMesh();
  module->getOperation()->setAttr(
      KilnDialect::kMeshAttrName,
      MeshAttr::get(context, mesh.pp, mesh.dpShard, mesh.tp));
  // Tensor parallel's rank-dependent part (kiln-tp-partition, docs/tp.md):
  // the rank's position on the tp axis (Config::tpPosition), the one place
  // it enters the IR.
  if (mesh.tp > 1)
    module->getOperation()->setAttr(
        KilnDialect::kTpAttrName,
        b.getDictionaryAttr(
            {b.getNamedAttr("rank", b.getI64IntegerAttr(config.tpPosition)),
             b.getNamedAttr(
                 "loss_parallel",
                 b.getBoolAttr(!config.parallelism.disable_loss_parallel)),
             b.getNamedAttr(
                 "async",
                 b.getBoolAttr(
                     config.parallelism.enable_async_tensor_parallel))}));
  // Under pipeline parallel a stage's parameters stay gathered across its
  // microbatches (TorchTitan's default policy), so they are gathered once
  // per step (docs/pp.md).
  module->getOperation()->setAttr(
      "kiln.fsdp", b.getDictionaryAttr({b.getNamedAttr(
                       "reshard_after_forward",
                       b.getBoolAttr(config.parallelism.reshard_after_forward &&
                                     mesh.pp == 1))}));

  // Pipeline parallel's rank-dependent part (docs/pp.md): which stages the
  // rank holds, and the schedule kiln-pipeline-schedule orders them by.
  if (mesh.pp > 1)
    module->getOperation()->setAttr(
        KilnDialect::kPpAttrName,
        b.getDictionaryAttr(
            {b.getNamedAttr("rank", b.getI64IntegerAttr(config.ppPosition)),
             b.getNamedAttr("stages",
                            b.getI64IntegerAttr(config.pipelineStages())),
             b.getNamedAttr("vocab_size",
                            b.getI64IntegerAttr(config.model.vocab_size)),
             b.getNamedAttr(
                 "schedule",
                 b.getStringAttr(
                     config.parallelism.pipeline_parallel_schedule))}));
  // Gradient accumulation (kiln-grad-accum, docs/pp.md): the step runs
  // @forward_loss's backward on this many microbatches.
  if (config.microbatches() > 1)
    module->getOperation()->setAttr(KilnDialect::kMicrobatchesAttrName,
                                    b.getI64IntegerAttr(config.microbatches()));

  if (config.float8.enable) {
    Location at = keyLocation(context, config, "float8.enable");
    Float8Attr policy = importFloat8Policy(context, config.float8,
                                           [&] { return emitError(at); });
    if (!policy)
      return nullptr;
    module->getOperation()->setAttr(KilnDialect::kFloat8AttrName, policy);
  }

  int64_t batch = config.microbatchRows();
  int64_t seq = config.training.seq_len;
  auto tokenType = RankedTensorType::get({batch, seq}, b.getI32Type());
  std::vector<ParamSpec> specs = modelParameters(config);

  SmallVector<Type> argTypes = {tokenType, tokenType};
  SmallVector<Attribute> argAttrs = {
      b.getDictionaryAttr(b.getNamedAttr(KilnDialect::kInputAttrName,
                                         b.getStringAttr("tokens"))),
      b.getDictionaryAttr(b.getNamedAttr(KilnDialect::kInputAttrName,
                                         b.getStringAttr("targets")))};
  llvm::erase_if(
      specs, [&](const ParamSpec &p) { return !heldByRank(config, p.name); });
  for (const ParamSpec &p : specs) {
    argTypes.push_back(RankedTensorType::get(p.shape, b.getF32Type()));
    argAttrs.push_back(b.getDictionaryAttr(
        {b.getNamedAttr(KilnDialect::kParamAttrName, b.getStringAttr(p.name)),
         b.getNamedAttr(KilnDialect::kInitAttrName,
                        InitAttr::get(context, p.init, p.std, p.lo, p.hi))}));
  }
  auto lossType = RankedTensorType::get({}, b.getF32Type());
  auto func = func::FuncOp::create(
      b, keyLocation(context, config, "model"), "forward_loss",
      b.getFunctionType(argTypes, {lossType}));
  func.setAllArgAttrs(argAttrs);

  Block *entry = func.addEntryBlock();
  b.setInsertionPointToStart(entry);
  llvm::StringMap<Value> params;
  for (auto [i, p] : llvm::enumerate(specs))
    params[p.name] = entry->getArgument(i + 2);
  ForwardBuilder builder(b, config, std::move(params));
  Value loss = builder.build(entry->getArgument(0), entry->getArgument(1));
  func::ReturnOp::create(b, keyLocation(context, config, "model"), loss);
  return module;
}
