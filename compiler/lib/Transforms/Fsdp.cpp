//===- Fsdp.cpp - Parameters, gradients and AdamW state as flat shards ----===//
//
// One rank's view of FSDP over `ranks` ranks (see Passes.td). The function
// already computes on the rank's share of the batch; what changes is where
// parameters come from (an all-gather of their group's shard, unflattened),
// where gradients go (a reduce-scatter of their group's flat buffer) and
// what the optimizer updates (the shards). Forward and backward are told
// apart by position: everything from the first cross_entropy_grad (under
// loss parallel, vocab_parallel_loss_grad) on is backward.
//
// With tp > 1 (the IR of one tp position), the tp-sharded and tp-replicated
// parameters go to different groups, and the gradient norm sums the former's
// squares over dp_shard and tp, the latter's over dp_shard only (TpNorm.h).
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"
#include "kiln/Transforms/Fp8Policy.h"
#include "kiln/Transforms/Passes.h"
#include "kiln/Transforms/TpNorm.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "kiln-fsdp"

namespace kiln {
#define GEN_PASS_DEF_KILNFSDP
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

struct Param {
  unsigned arg;
  std::string name;
  RankedTensorType type;
  InitAttr init;
  /// The parameter's `#kiln.tp_shard` (null: tp-replicated, or tp 1).
  TpShardAttr tpShard;
  int64_t offset = 0;
  AdamWOp adamw; // train_step only
};

struct Group {
  std::string name;
  SmallVector<Param *> params;
  int64_t total = 0, shard = 0;
  /// With tp > 1: the group's parameters are tp-replicated (no
  /// `#kiln.tp_shard`), so their squares count once in the norm.
  bool replicated = false;
  BlockArgument shardArg, expAvg, expAvgSq;
  /// The parameters as the forward saw them (to reuse in the backward when
  /// not resharding).
  DenseMap<Param *, Value> forwardViews;
};

/// The group a parameter belongs to: its transformer block, the embedding,
/// or `head` (the final norm and the output projection).
std::string groupName(StringRef param) {
  StringRef layers = "model.layers.";
  if (param.starts_with(layers)) {
    StringRef rest = param.drop_front(layers.size());
    return (layers + rest.take_until([](char c) { return c == '.'; })).str();
  }
  if (param.starts_with("model.embed_tokens"))
    return "model.embed_tokens";
  return "head";
}

class FunctionSharder {
public:
  FunctionSharder(func::FuncOp f, int64_t ranks, int64_t tp, bool reshard,
                  bool reduceInBf16, const llvm::StringSet<> &fp8Gathered)
      : f(f), body(f.getBody().front()), ranks(ranks), tp(tp), reshard(reshard),
        reduceInBf16(reduceInBf16), fp8Gathered(fp8Gathered),
        b(f.getContext()) {}
  LogicalResult run();

private:
  void collect();
  LogicalResult addShardArguments();
  DictionaryAttr part(const Param &p, StringRef prefix, InitAttr init);
  FailureOr<TpNorm> matchNorm();
  void gather(Group &g, bool backward);
  LogicalResult shardOptimizer();
  void averageLoss();
  LogicalResult finish();

  bool isBackward(Operation *op) const {
    return backwardStart && !op->isBeforeInBlock(backwardStart);
  }
  Type f32() { return b.getF32Type(); }
  /// The axis every collective of FSDP runs over.
  MeshAxisAttr dpShard() {
    return MeshAxisAttr::get(b.getContext(), MeshAxis::dp_shard);
  }

  func::FuncOp f;
  Block &body;
  int64_t ranks;
  /// The size of the tp axis (1: no tensor parallel).
  int64_t tp;
  bool reshard;
  /// `[mixed_precision] reduce = "bfloat16"`: gradients travel in bf16.
  bool reduceInBf16;
  /// Weights gathered in FP8 (float8.enable_fsdp_float8_all_gather): each
  /// block's go to a group of their own, `<block>.fp8`, which
  /// kiln-fp8-all-gather gathers as e4m3 codes.
  const llvm::StringSet<> &fp8Gathered;
  OpBuilder b;
  Operation *backwardStart = nullptr;
  std::vector<std::unique_ptr<Param>> params;
  std::vector<Group> groups;
  llvm::BitVector oldArgs;
  /// Results (by index) that the rewrite drops: per-parameter state.
  llvm::SmallDenseSet<unsigned> droppedResults;
  SmallVector<Value> newResults;
  SmallVector<DictionaryAttr> newResultAttrs;
};

void FunctionSharder::collect() {
  for (Operation &op : body)
    if (isa<CrossEntropyGradOp, VocabParallelLossGradOp>(op)) {
      backwardStart = &op;
      break;
    }
  llvm::StringMap<unsigned> groupIndex;
  for (BlockArgument arg : body.getArguments()) {
    auto name =
        f.getArgAttrOfType<StringAttr>(arg.getArgNumber(), KilnDialect::kParamAttrName);
    if (!name)
      continue;
    auto p = std::make_unique<Param>();
    p->arg = arg.getArgNumber();
    p->name = name.getValue().str();
    p->type = cast<RankedTensorType>(arg.getType());
    p->init = f.getArgAttrOfType<InitAttr>(p->arg, KilnDialect::kInitAttrName);
    p->tpShard =
        f.getArgAttrOfType<TpShardAttr>(p->arg, KilnDialect::kTpShardAttrName);
    for (Operation *user : arg.getUsers())
      if (auto adamw = dyn_cast<AdamWOp>(user); adamw && adamw.getParam() == arg)
        p->adamw = adamw;
    // With tp > 1 the tp-replicated parameters (the norms)
    // go to groups of their own, `<group>.replicated`: the norm counts their
    // squares once, the sharded ones' over tp, so no flat shard may mix the
    // two. The name depends on the argument only, so that training and
    // evaluation share their groups.
    bool replicated = tp > 1 && !p->tpShard;
    std::string g = groupName(p->name);
    if (replicated)
      g += ".replicated";
    if (fp8Gathered.contains(p->name))
      g += ".fp8";
    auto [it, added] = groupIndex.try_emplace(g, groups.size());
    if (added) {
      groups.emplace_back().name = g;
      groups.back().replicated = replicated;
    }
    Group &group = groups[it->second];
    p->offset = group.total;
    group.total += p->type.getNumElements();
    group.params.push_back(p.get());
    params.push_back(std::move(p));
  }
  for (Group &g : groups)
    g.shard = (g.total + ranks - 1) / ranks;
}

/// One part of a `kiln.shard_of` list: where `p` (its state `prefix` +
/// name) lies in the flat buffer and how it starts; with the parameter's
/// `#kiln.tp_shard`, that too (the part is that slice of the whole tensor).
DictionaryAttr FunctionSharder::part(const Param &p, StringRef prefix,
                                     InitAttr init) {
  SmallVector<NamedAttribute> entries = {
      b.getNamedAttr("name", b.getStringAttr(prefix + p.name)),
      b.getNamedAttr("offset", b.getI64IntegerAttr(p.offset)),
      b.getNamedAttr("shape", b.getDenseI64ArrayAttr(p.type.getShape())),
      b.getNamedAttr("init", init)};
  if (p.tpShard)
    entries.push_back(b.getNamedAttr("tp_shard", p.tpShard));
  return b.getDictionaryAttr(entries);
}

LogicalResult FunctionSharder::addShardArguments() {
  oldArgs.resize(body.getNumArguments());
  for (auto &p : params) {
    oldArgs.set(p->arg);
    if (p->adamw) {
      for (Value moment : {p->adamw.getExpAvg(), p->adamw.getExpAvgSq()}) {
        auto arg = dyn_cast<BlockArgument>(moment);
        if (!arg || arg.getOwner() != &body)
          return p->adamw.emitOpError("moments must be arguments of the step");
        oldArgs.set(arg.getArgNumber());
      }
    }
  }
  // The new arguments are appended together once all are known: one at a
  // time, each insertion would copy the whole signature again.
  SmallVector<Type> newTypes;
  SmallVector<DictionaryAttr> newAttrs;
  SmallVector<BlockArgument *> newArgs;
  auto add = [&](BlockArgument *arg, Type type,
                 ArrayRef<NamedAttribute> attrs) {
    newTypes.push_back(type);
    newAttrs.push_back(b.getDictionaryAttr(attrs));
    newArgs.push_back(arg);
  };
  for (Group &g : groups) {
    SmallVector<Attribute> parts;
    for (Param *p : g.params)
      parts.push_back(part(*p, "", p->init));
    auto shardType = RankedTensorType::get({g.shard}, f32());
    add(&g.shardArg, shardType,
        {b.getNamedAttr(KilnDialect::kStateAttrName, b.getStringAttr(g.name)),
         b.getNamedAttr(KilnDialect::kShardOfAttrName, b.getArrayAttr(parts))});
    if (g.params.front()->adamw) {
      for (auto [prefix, arg] :
           {std::pair<StringRef, BlockArgument *>{"exp_avg.", &g.expAvg},
            {"exp_avg_sq.", &g.expAvgSq}}) {
        // The moments of each parameter, zero at the start.
        SmallVector<Attribute> moments;
        for (Param *p : g.params)
          moments.push_back(part(
              *p, prefix,
              InitAttr::get(b.getContext(), InitKind::zeros, 0.0, 0.0, 0.0)));
        add(arg, shardType,
            {b.getNamedAttr(KilnDialect::kStateAttrName,
                            b.getStringAttr(prefix + g.name)),
             b.getNamedAttr(KilnDialect::kShardOfAttrName,
                            b.getArrayAttr(moments))});
      }
    }
  }
  unsigned firstNew = body.getNumArguments();
  if (failed(f.insertArguments(
          SmallVector<unsigned>(newTypes.size(), firstNew), newTypes, newAttrs,
          SmallVector<Location>(newTypes.size(), f.getLoc()))))
    return failure();
  for (auto [i, arg] : llvm::enumerate(newArgs))
    *arg = body.getArgument(firstNew + i);
  oldArgs.resize(body.getNumArguments());
  return success();
}

/// Replaces the group's forward (or backward) uses of its parameters with
/// views of one all-gathered buffer, built before the first of them.
void FunctionSharder::gather(Group &g, bool backward) {
  // (operand, parameter): uses through the param-dtype cast or direct.
  SmallVector<std::pair<OpOperand *, Param *>> uses;
  Type dtype = f32();
  for (Param *p : g.params)
    for (OpOperand &use : body.getArgument(p->arg).getUses()) {
      Operation *user = use.getOwner();
      if (isa<AdamWOp>(user))
        continue;
      if (auto cast = dyn_cast<CastOp>(user)) {
        dtype = cast.getType().getElementType();
        for (OpOperand &castUse : cast.getResult().getUses())
          if (isBackward(castUse.getOwner()) == backward)
            uses.push_back({&castUse, p});
        continue;
      }
      if (isBackward(user) == backward)
        uses.push_back({&use, p});
    }
  if (uses.empty())
    return;

  DenseMap<Param *, Value> views;
  if (backward && !reshard && !g.forwardViews.empty()) {
    views = g.forwardViews;
  } else {
    Operation *first = uses.front().first->getOwner();
    for (auto [use, p] : uses)
      if (use->getOwner()->isBeforeInBlock(first))
        first = use->getOwner();
    b.setInsertionPoint(first);
    Location loc = first->getLoc();
    Value shard = g.shardArg;
    if (dtype != f32())
      shard = CastOp::create(b, loc, RankedTensorType::get({g.shard}, dtype),
                             shard);
    auto fullType = RankedTensorType::get({g.shard * ranks}, dtype);
    auto start = AllGatherStartOp::create(b, loc, fullType, shard, dpShard(),
                                          b.getI64IntegerAttr(ranks),
                                          b.getStringAttr(g.name));
    Value full = WaitOp::create(b, loc, start.getResult());
    for (Param *p : g.params)
      views[p] = UnflattenOp::create(
          b, loc, RankedTensorType::get(p->type.getShape(), dtype), full,
          b.getI64IntegerAttr(p->offset));
    if (!backward)
      g.forwardViews = views;
  }
  for (auto [use, p] : uses)
    use->set(views[p]);
}

/// With tp > 1: the norm kiln-tp-grad-sync left (TpNorm.h), which says
/// whose squares it sums over tp. kiln-fsdp keeps that split and checks that
/// it is its groups': each group's gradients all on the side its
/// parameters' `#kiln.tp_shard` says.
FailureOr<TpNorm> FunctionSharder::matchNorm() {
  Value norm = params.front()->adamw.getGradNorm();
  FailureOr<TpNorm> parts = matchTpNorm(norm, tp);
  if (failed(parts))
    return f.emitOpError("kiln-fsdp: with tp > 1 (")
           << tp
           << ") AdamW must read kiln-tp-grad-sync's gradient norm (run it "
              "first)";
  DenseSet<Value> sharded(llvm::from_range, parts->sharded);
  DenseSet<Value> replicated(llvm::from_range, parts->replicated);
  if (sharded.size() + replicated.size() != params.size())
    return f.emitOpError("kiln-fsdp: the gradient norm reads ")
           << sharded.size() + replicated.size() << " gradients for "
           << params.size() << " parameters";
  for (Group &g : groups)
    for (Param *p : g.params) {
      if (p->adamw.getGradNorm() != norm)
        return p->adamw.emitOpError(
            "kiln-fsdp: every AdamW must read the same gradient norm");
      if (!(g.replicated ? replicated : sharded).contains(p->adamw.getGrad()))
        return p->adamw.emitOpError("kiln-fsdp: the gradient norm does not "
                                    "count the gradient of '")
               << p->name << "' as tp-"
               << (g.replicated ? "replicated" : "sharded")
               << ", as its #kiln.tp_shard says";
    }
  return parts;
}

LogicalResult FunctionSharder::shardOptimizer() {
  // The step's norm, replaced below: at tp 1 the optimizer's kiln.grad_norm;
  // with tp > 1 kiln-tp-grad-sync's sqrt, whose ops all go.
  Operation *norm = nullptr;
  SmallVector<Operation *> oldNorm;
  if (tp == 1) {
    for (Operation &op : body)
      if (isa<GradNormOp>(op))
        norm = &op;
    if (!norm)
      return f.emitOpError(
          "kiln-fsdp: a step with AdamW needs a kiln.grad_norm");
    oldNorm.push_back(norm);
  } else {
    FailureOr<TpNorm> tpNorm = matchNorm();
    if (failed(tpNorm))
      return failure();
    norm = tpNorm->ops.front();
    oldNorm = tpNorm->ops;
  }
  Location loc = norm->getLoc();

  // Each group's gradients to the rank's shard, averaged over ranks, in
  // the reduce dtype: with bf16, the bf16 gradients the optimizer's casts
  // read, and the shard cast to f32 afterwards.
  b.setInsertionPoint(norm);
  SmallVector<Value> gradShards;
  for (Group &g : groups) {
    SmallVector<Value> grads;
    SmallVector<int64_t> offsets;
    Type dtype = f32();
    for (Param *p : g.params) {
      Value grad = p->adamw.getGrad();
      auto cast = grad.getDefiningOp<CastOp>();
      if (reduceInBf16 && cast &&
          cast.getInput().getType().getElementType().isBF16()) {
        grad = cast.getInput();
        dtype = cast.getInput().getType().getElementType();
      }
      grads.push_back(grad);
      offsets.push_back(p->offset);
    }
    for (Value grad : grads)
      if (cast<RankedTensorType>(grad.getType()).getElementType() != dtype)
        return f.emitOpError("kiln-fsdp: the gradients of group '")
               << g.name << "' do not share one reduce dtype";
    auto flatType = RankedTensorType::get({g.shard * ranks}, dtype);
    Value flat = FlattenOp::create(b, loc, flatType, grads,
                                   b.getDenseI64ArrayAttr(offsets));
    auto shardType = RankedTensorType::get({g.shard}, dtype);
    auto start = ReduceScatterStartOp::create(
        b, loc, shardType, flat, dpShard(), b.getI64IntegerAttr(ranks),
        b.getStringAttr("mean"), b.getStringAttr(g.name));
    Value shard = WaitOp::create(b, loc, start.getResult());
    if (dtype != f32())
      shard = CastOp::create(b, loc, RankedTensorType::get({g.shard}, f32()),
                             shard);
    gradShards.push_back(shard);
  }

  // The global norm: every rank's sum of squares, summed over dp_shard,
  // then the root. With tp > 1 the rank's sum is buildTpSquares's, as
  // kiln-tp-grad-sync's was: the sharded groups' shards hold other slices
  // at each tp position, so their squares are summed over tp; the
  // replicated groups' are the same at every tp position (a dp_shard mean
  // of gradients already summed over tp), so theirs count once.
  Value squares;
  if (tp == 1) {
    squares = GradNormOp::create(b, loc, ValueRange(gradShards), true);
  } else {
    SmallVector<Value> sharded, replicated;
    for (auto [g, grad] : llvm::zip(groups, gradShards))
      (g.replicated ? replicated : sharded).push_back(grad);
    squares = buildTpSquares(b, loc, sharded, replicated, tp);
  }
  auto sum = AllReduceStartOp::create(b, loc, squares, dpShard(),
                                      b.getI64IntegerAttr(ranks),
                                      b.getStringAttr("sum"));
  Value total = WaitOp::create(b, loc, sum.getResult());
  Value global = SqrtOp::create(b, loc, total);
  norm->getResult(0).replaceAllUsesWith(global);
  for (Operation *op : oldNorm)
    op->erase();

  // One AdamW per group, on the shards, where its last parameter's was.
  for (auto [g, grad] : llvm::zip(groups, gradShards)) {
    AdamWOp last = g.params.front()->adamw;
    for (Param *p : g.params) {
      if (p->adamw->getAttrDictionary() != last->getAttrDictionary())
        return p->adamw.emitOpError("kiln-fsdp: the parameters of group '")
               << g.name << "' need the same AdamW settings";
      if (last->isBeforeInBlock(p->adamw))
        last = p->adamw;
    }
    b.setInsertionPointAfter(last);
    auto update = cast<AdamWOp>(b.clone(*last));
    update->setOperands({g.shardArg, grad, g.expAvg, g.expAvgSq,
                         last.getGradNorm(), last.getLr(), last.getStep()});
    for (Value r : update->getResults())
      r.setType(g.shardArg.getType());
    std::string names[] = {g.name, "exp_avg." + g.name, "exp_avg_sq." + g.name};
    for (auto [value, name] : llvm::zip(update->getResults(), names)) {
      newResults.push_back(value);
      newResultAttrs.push_back(b.getDictionaryAttr(b.getNamedAttr(
          KilnDialect::kStateAttrName, b.getStringAttr(name))));
    }
  }
  // The per-parameter updates and the results that returned them.
  // (One look at each result, not one per parameter and result.)
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  DenseSet<Operation *> updates;
  for (auto &p : params)
    if (p->adamw)
      updates.insert(p->adamw.getOperation());
  for (OpOperand &use : ret->getOpOperands())
    if (Operation *def = use.get().getDefiningOp();
        def && updates.contains(def))
      droppedResults.insert(use.getOperandNumber());
  return success();
}

/// The loss (result 0) averaged over ranks, as every rank reports it.
void FunctionSharder::averageLoss() {
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  b.setInsertionPoint(ret);
  Value loss = ret.getOperand(0);
  auto start = AllReduceStartOp::create(b, ret.getLoc(), loss, dpShard(),
                                        b.getI64IntegerAttr(ranks),
                                        b.getStringAttr("mean"));
  ret.setOperand(0, WaitOp::create(b, ret.getLoc(), start.getResult()));
}

LogicalResult FunctionSharder::finish() {
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  SmallVector<Value> results;
  SmallVector<Attribute> attrs;
  for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
    if (droppedResults.contains(i))
      continue;
    results.push_back(v);
    attrs.push_back(f.getResultAttrDict(i) ? f.getResultAttrDict(i)
                                           : b.getDictionaryAttr({}));
  }
  for (auto [v, a] : llvm::zip(newResults, newResultAttrs)) {
    results.push_back(v);
    attrs.push_back(a);
  }
  ret->setOperands(results);
  for (auto &p : params)
    if (p->adamw)
      p->adamw.erase();
  // The casts of whole parameters, now unused.
  for (auto &p : params)
    for (Operation *user :
         llvm::make_early_inc_range(body.getArgument(p->arg).getUsers()))
      if (isa<CastOp>(user) && user->use_empty())
        user->erase();
  for (auto &p : params)
    if (!body.getArgument(p->arg).use_empty())
      return f.emitOpError("kiln-fsdp: parameter '")
             << p->name << "' has a use that was not sharded";
  if (failed(f.eraseArguments(oldArgs)))
    return failure();
  f.setFunctionType(FunctionType::get(f.getContext(), body.getArgumentTypes(),
                                      ValueRange(results).getTypes()));
  f.setAllResultAttrs(attrs);
  return success();
}

LogicalResult FunctionSharder::run() {
  collect();
  if (params.empty())
    return success();
  bool train = params.front()->adamw != nullptr;
  for (auto &p : params)
    if ((p->adamw != nullptr) != train)
      return f.emitOpError("kiln-fsdp: some parameters have an AdamW update "
                           "and some do not");
  if (failed(addShardArguments()))
    return failure();
  for (Group &g : groups) {
    gather(g, /*backward=*/false);
    gather(g, /*backward=*/true);
  }
  if (train && failed(shardOptimizer()))
    return failure();
  averageLoss();
  return finish();
}

/// The weights gathered in FP8, when the module's policy asks for the FP8
/// all-gather: those of the linears kiln-fp8-select marked FP8 in the step
/// (the same set for every function, so that training and evaluation share
/// their groups). #kiln.float8's verifier has checked that the all-gather
/// goes with the tensorwise recipe.
FailureOr<llvm::StringSet<>> fp8GatheredWeights(ModuleOp module) {
  llvm::StringSet<> weights;
  FailureOr<Float8Attr> policy = getFp8Policy(module);
  if (failed(policy))
    return failure();
  if (!*policy || !policy->getEnableFsdpFloat8AllGather())
    return weights;
  auto f = module.lookupSymbol<func::FuncOp>(kTrainStepFunc);
  if (!f)
    f = module.lookupSymbol<func::FuncOp>(kForwardLossFunc);
  if (!f)
    return weights;
  WalkResult walk = f.walk([&](LinearOp linear) {
    if (linear->hasAttr(kRecomputedAttr))
      return WalkResult::advance();
    FailureOr<Fp8ChoiceAttr> choice = getFp8Choice(linear, "kiln-fsdp");
    if (failed(choice))
      return WalkResult::interrupt();
    if (choice->isFp8())
      weights.insert(linear.getParam());
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  return weights;
}

struct FsdpPass : kiln::impl::KilnFsdpBase<FsdpPass> {
  using KilnFsdpBase::KilnFsdpBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    MeshAttr mesh = getModuleMesh(module);
    int64_t n = ranks;
    bool reshard = reshardAfterForward;
    if (n == 0) {
      auto fsdp = module->getAttrOfType<DictionaryAttr>("kiln.fsdp");
      auto keep = fsdp ? fsdp.getAs<BoolAttr>("reshard_after_forward")
                       : BoolAttr();
      n = mesh ? mesh.getDpShard() : 1;
      reshard = keep ? keep.getValue() : true;
    }
    if (n < 1) {
      module.emitError("kiln-fsdp: ranks must be at least 1, got ") << n;
      return signalPassFailure();
    }
    if (n == 1)
      return;
    // With tp > 1 the IR is one tp position's: its parameters are sharded
    // over dp_shard alone, the gradients reduce-scattered over dp_shard
    // after kiln-tp-grad-sync's tp sums (docs/tp.md, "FSDP on top").
    int64_t tp = mesh ? mesh.getTp() : 1;
    // The option overrides the mesh's dp_shard; the module then says what
    // it was sharded for (the plan's ranks come from it).
    if (!mesh || mesh.getDpShard() != n)
      module->setAttr(KilnDialect::kMeshAttrName,
                      MeshAttr::get(module.getContext(), n, tp));
    for (StringRef name : {kLossAndGradsFunc, kForwardLogitsFunc})
      if (Operation *f = module.lookupSymbol(name))
        f->erase();
    auto precision = module->getAttrOfType<DictionaryAttr>(kPrecisionAttr);
    auto reduce = precision ? precision.getAs<StringAttr>("reduce")
                            : StringAttr();
    bool reduceInBf16 = reduce && reduce.getValue() == "bfloat16";
    FailureOr<llvm::StringSet<>> fp8Gathered = fp8GatheredWeights(module);
    if (failed(fp8Gathered))
      return signalPassFailure();
    LLVM_DEBUG(llvm::dbgs()
               << DEBUG_TYPE ": " << n << " ranks, tp " << tp
               << ", reshard after "
               << "forward " << reshard << ", reduce in bf16 " << reduceInBf16
               << ", " << fp8Gathered->size() << " weights gathered as FP8\n");
    for (StringRef name : {kTrainStepFunc, kForwardLossFunc})
      if (auto f = module.lookupSymbol<func::FuncOp>(name))
        if (failed(
                FunctionSharder(f, n, tp, reshard, reduceInBf16, *fp8Gathered)
                    .run()))
          return signalPassFailure();
  }
};
} // namespace
