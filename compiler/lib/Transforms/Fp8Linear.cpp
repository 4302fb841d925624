//===- Fp8Linear.cpp - Eligible linears as FP8 scaled GEMMs ---------------===//
//
// Per function: rewrite each linear kiln-fp8-select marked FP8 (its forward
// op, its recomputed clones and its two backward ops); the decisions are
// the marks, never taken here. The forward GEMM accumulates fast, the two
// backward GEMMs with full promotion (`fast_accumulation`). A
// quantized operand is made once per (value, format) and shared, so q, k
// and v read one FP8 copy of their input. Where an operand's quantization
// goes decides what is saved between forward and backward:
//
// - tensorwise: right after the value's definition, with the transposed
//   codes the backward reads. The grad-weight GEMM multiplies the codes of
//   the copy of the activation the bf16 backward reads, where that copy is
//   made in the backward: under full activation checkpointing the
//   recomputed linear's codes, under selective checkpointing codes of the
//   recomputed input made with the forward's amax (the same bits, so the
//   same codes and scale; the delayed recipe scales both from one history).
//   So no FP8 activation is kept between forward and backward that the
//   bf16 plan would not keep. Otherwise the forward's transposed codes are
//   kept (1 byte an element where the bf16 plan keeps 2): without
//   checkpointing, and for a sequence-parallel gather under tp, which the
//   backward would otherwise gather again. Weights are quantized from the
//   copy each op reads: under FSDP with resharding the backward gathers the
//   weight again and its codes are made from that copy (the same bits), so
//   no full weight is kept alive between forward and backward;
// - rowwise: the forward's right after its definition too; the backward's
//   (transposed bf16 operands quantized along the token axis) just before
//   the first backward op of the linear, so nothing extra is saved.
//
// Under tensor parallel (tp > 1) a tensorwise amax of an operand that each
// tp rank holds a part of is all-reduced `max` over tp before its scale is
// taken (Fp8Tp.h says which), and the delayed recipe's histories are
// all-reduced over tp as well as dp_shard: every scale is the unsharded
// model's. Rowwise under tp is refused.
//
//===----------------------------------------------------------------------===//

#include "kiln/Transforms/Fp8Policy.h"
#include "kiln/Transforms/Fp8Tp.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "kiln-fp8-linear"

namespace kiln {
#define GEN_PASS_DEF_KILNFP8LINEAR
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

/// FP8 codes and the scale they were made with.
struct Quantized {
  Value codes, scale;
};

/// A forward linear kiln-fp8-select marked FP8.
struct MarkedLinear {
  LinearOp linear;
  std::string param;
  LinearRole role;
};

class Fp8Rewriter {
public:
  Fp8Rewriter(func::FuncOp func, Float8Attr policy)
      : func(func), policy(policy), b(func.getContext()),
        e4m3(Float8E4M3FNType::get(func.getContext())),
        e5m2(Float8E5M2Type::get(func.getContext())),
        delayed(policy.getRecipe() == Fp8Recipe::delayed &&
                (func.getSymName() == kTrainStepFunc ||
                 func.getSymName() == kFp8CalibrationFunc)),
        calibration(func.getSymName() == kFp8CalibrationFunc) {
    if (MeshAttr mesh = getModuleMesh(func))
      tp = mesh.getTp();
  }

  LogicalResult run();

private:
  bool rowwise() const { return policy.getRecipe() == Fp8Recipe::rowwise; }

  /// Puts `b` right after the definition of `v`.
  void afterDefinition(Value v) {
    if (auto arg = dyn_cast<BlockArgument>(v))
      b.setInsertionPointToStart(arg.getOwner());
    else
      b.setInsertionPointAfter(v.getDefiningOp());
  }

  /// `v` as [rows, last dim], right after its definition.
  Value flat(Value v);
  /// The codes of the 2-D `v` in `type` and their scale; made at `b`'s
  /// insertion point the first time. `history` names the delayed recipe's
  /// amax history of this operand ("input.<param>", "weight.<param>",
  /// "grad_output.<param>"); another value with the same history (a weight
  /// gathered again) is scaled with the same amax. A given tensorwise `amax`
  /// (of the same bits, made earlier) is used instead of taking one.
  Quantized quantize(Value v, Type type, const std::string &history,
                     Value amax = {});
  /// The amax a delayed cast of `v` scales with, and its history.
  Value delayedAmax(Value v, const std::string &history);
  /// Each history's new value (this step's amax in front, all-reduced over
  /// ranks) as a result of the step.
  void updateHistories();
  /// The histories' arguments (already in the block) in the signature, with
  /// their names.
  void addHistoryArguments();
  /// `codes` transposed, right after they are made.
  Value transposed(Value codes);
  /// A bf16 2-D value transposed at `b`'s insertion point.
  Value transposedHere(Value v);
  /// The same, made the first time only (a later reader reuses it).
  Value transposedOnce(Value v);

  /// One of the linear's three GEMMs; only the forward (`output`) one
  /// accumulates fast.
  Value scaledMatmul(StringRef gemm, const MarkedLinear &d, Quantized a,
                     Quantized w, Type elementType, Location loc);
  /// Replaces `op`'s result by `v2d`, reshaped back to the result's shape.
  void replaceWith(Operation *op, Value v2d);

  void rewriteForward(const MarkedLinear &d);
  /// The tensorwise grad-weight GEMM's transposed input codes (see the file
  /// header).
  Quantized backwardInput(const MarkedLinear &d, LinearGradWeightOp gw);
  /// `first`: whichever of `gi` and `gw` comes first.
  void rewriteBackward(const MarkedLinear &d, LinearGradInputOp gi,
                       LinearGradWeightOp gw, Operation *first);

  func::FuncOp func;
  Float8Attr policy;
  OpBuilder b;
  Type e4m3, e5m2;
  /// The delayed recipe (train_step and the calibration step: evaluation
  /// and sampling update no state, and scale dynamically).
  bool delayed;
  /// The calibration step: an empty history scales with the current amax.
  bool calibration;
  /// The tp axis's size: above 1, the amax of an operand split over tp is
  /// all-reduced over it.
  int64_t tp = 1;
  struct History {
    std::string name;
    BlockArgument arg;
    Value current, amax;
  };
  std::vector<History> histories;
  llvm::StringMap<unsigned> historyIndex;
  /// Set when the function would not take a history argument or result.
  bool historyFailed = false;
  DenseMap<Value, Value> flats, transposes;
  DenseMap<std::pair<Value, Type>, Quantized> quantized;
  /// The forward's quantized input of each rewritten linear, by param.
  llvm::StringMap<Quantized> forwardInputs;
};

Value Fp8Rewriter::flat(Value v) {
  RankedTensorType t = tensorOf(v);
  if (t.getRank() == 2)
    return v;
  if (Value f = flats.lookup(v))
    return f;
  int64_t cols = t.getShape().back();
  afterDefinition(v);
  Value f = ReshapeOp::create(
      b, v.getLoc(),
      RankedTensorType::get({t.getNumElements() / cols, cols},
                            t.getElementType()),
      v);
  return flats[v] = f;
}

Value Fp8Rewriter::delayedAmax(Value v, const std::string &history) {
  if (auto it = historyIndex.find(history); it != historyIndex.end())
    return histories[it->second].amax;
  auto f32 = b.getF32Type();
  Location loc = v.getLoc();
  std::string name = "fp8_amax_history." + history;
  // The block argument now, the signature once all histories are known
  // (addHistoryArguments): one insertArgument per history would copy the
  // whole signature each time.
  BlockArgument arg = func.getBody().front().addArgument(
      RankedTensorType::get({policy.getAmaxHistoryLen()}, f32), func.getLoc());
  // In the training step the scale needs only the history (so the cast can
  // join its producer's pass); this step's amax only enters the history.
  Value current =
      AmaxOp::create(b, loc, RankedTensorType::get({}, f32), v).getResult();
  // The calibration step scales with it: the whole tensor's over tp (the
  // training step's enter the histories all-reduced, updateHistories).
  if (calibration && tp > 1 && !isTpReplicated(v))
    current = buildTpAmax(b, loc, current, tp);
  Value amax = DelayedAmaxOp::create(
      b, loc, RankedTensorType::get({}, f32), arg,
      calibration ? current : Value(),
      b.getStringAttr(stringifyAmaxComputeAlgo(policy.getAmaxComputeAlgo())));
  historyIndex[history] = histories.size();
  histories.push_back({name, arg, current, amax});
  return amax;
}

void Fp8Rewriter::updateHistories() {
  if (histories.empty())
    return;
  auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
  b.setInsertionPoint(ret);
  Location loc = func.getLoc();
  SmallVector<Value> amaxes;
  for (History &h : histories)
    amaxes.push_back(h.current);
  // One all-reduce(max) of every cast's amax per mesh axis, so that all
  // ranks keep the same histories (activations and gradients differ per
  // dp_shard rank; the parts of a tensor split over tp, per tp rank).
  MeshAttr mesh = getModuleMesh(func);
  SmallVector<std::pair<MeshAxis, int64_t>, 2> axes;
  if (mesh && mesh.getDpShard() > 1)
    axes.push_back({MeshAxis::dp_shard, mesh.getDpShard()});
  if (mesh && mesh.getTp() > 1)
    axes.push_back({MeshAxis::tp, mesh.getTp()});
  if (!axes.empty()) {
    auto f32 = b.getF32Type();
    int64_t count = static_cast<int64_t>(amaxes.size());
    auto vectorType = RankedTensorType::get({count}, f32);
    SmallVector<int64_t> offsets;
    SmallVector<Value> parts;
    for (auto [i, a] : llvm::enumerate(amaxes)) {
      offsets.push_back(static_cast<int64_t>(i));
      parts.push_back(
          ReshapeOp::create(b, loc, RankedTensorType::get({1}, f32), a));
    }
    Value max = FlattenOp::create(b, loc, vectorType, parts,
                                  b.getDenseI64ArrayAttr(offsets));
    for (auto [axis, ranks] : axes) {
      Value started = AllReduceStartOp::create(
          b, loc, vectorType, max, MeshAxisAttr::get(b.getContext(), axis),
          b.getI64IntegerAttr(ranks), b.getStringAttr("max"));
      max = WaitOp::create(b, loc, vectorType, started);
    }
    for (int64_t i = 0; i < count; ++i)
      amaxes[i] = UnflattenOp::create(b, loc, RankedTensorType::get({}, f32),
                                      max, b.getI64IntegerAttr(i));
  }
  SmallVector<Value> results(ret.getOperands());
  SmallVector<Type> types;
  SmallVector<DictionaryAttr> attrs;
  for (auto [h, a] : llvm::zip(histories, amaxes)) {
    Value updated = AmaxHistoryUpdateOp::create(b, loc, h.arg, a);
    results.push_back(updated);
    types.push_back(updated.getType());
    attrs.push_back(b.getDictionaryAttr(
        b.getNamedAttr(KilnDialect::kStateAttrName, b.getStringAttr(h.name))));
  }
  if (failed(func.insertResults(
          SmallVector<unsigned>(types.size(), func.getNumResults()), types,
          attrs))) {
    func.emitOpError("kiln-fp8-linear: cannot return the amax histories");
    historyFailed = true;
    return;
  }
  ret->setOperands(results);
}

void Fp8Rewriter::addHistoryArguments() {
  if (histories.empty())
    return;
  SmallVector<DictionaryAttr> attrs;
  func.getAllArgAttrs(attrs);
  for (History &h : histories)
    attrs.push_back(b.getDictionaryAttr(
        b.getNamedAttr(KilnDialect::kStateAttrName, b.getStringAttr(h.name))));
  Block &body = func.getBody().front();
  func.setFunctionType(FunctionType::get(
      func.getContext(), body.getArgumentTypes(), func.getResultTypes()));
  func.setAllArgAttrs(attrs);
}

Quantized Fp8Rewriter::quantize(Value v, Type type, const std::string &history,
                                Value amax) {
  auto key = std::make_pair(v, type);
  if (auto it = quantized.find(key); it != quantized.end())
    return it->second;
  RankedTensorType t = tensorOf(v);
  auto codesType = RankedTensorType::get(t.getShape(), type);
  auto f32 = b.getF32Type();
  Location loc = v.getLoc();
  QuantizeOp q;
  if (rowwise()) {
    q = QuantizeOp::create(b, loc, codesType,
                           RankedTensorType::get({t.getDimSize(0)}, f32), v,
                           Value(), /*pow2_scale=*/true);
  } else {
    if (!amax && delayed)
      amax = delayedAmax(v, history);
    if (!amax) {
      amax =
          AmaxOp::create(b, loc, RankedTensorType::get({}, f32), v).getResult();
      if (tp > 1 && !isTpReplicated(v))
        amax = buildTpAmax(b, loc, amax, tp);
    }
    q = QuantizeOp::create(b, loc, codesType, RankedTensorType::get({}, f32),
                           v, amax, /*pow2_scale=*/false);
  }
  return quantized[key] = {q.getResult(), q.getScale()};
}

Value Fp8Rewriter::transposed(Value codes) {
  if (Value t = transposes.lookup(codes))
    return t;
  OpBuilder::InsertionGuard guard(b);
  afterDefinition(codes);
  return transposes[codes] = transposedHere(codes);
}

Value Fp8Rewriter::transposedOnce(Value v) {
  if (Value t = transposes.lookup(v))
    return t;
  return transposes[v] = transposedHere(v);
}

Value Fp8Rewriter::transposedHere(Value v) {
  RankedTensorType t = tensorOf(v);
  return TransposeOp::create(
      b, v.getLoc(),
      RankedTensorType::get({t.getDimSize(1), t.getDimSize(0)},
                            t.getElementType()),
      v, b.getDenseI64ArrayAttr({1, 0}));
}

Value Fp8Rewriter::scaledMatmul(StringRef gemm, const MarkedLinear &d,
                                Quantized a, Quantized w, Type elementType,
                                Location loc) {
  RankedTensorType at = tensorOf(a.codes), wt = tensorOf(w.codes);
  return ScaledMatmulOp::create(
      b, loc,
      RankedTensorType::get({at.getDimSize(0), wt.getDimSize(0)}, elementType),
      b.getStringAttr(gemm), LinearRoleAttr::get(b.getContext(), d.role),
      a.codes, a.scale, w.codes, w.scale, b.getStringAttr(d.param),
      b.getBoolAttr(gemm == "output"));
}

void Fp8Rewriter::replaceWith(Operation *op, Value v2d) {
  Value result = op->getResult(0);
  Value shaped = v2d;
  if (tensorOf(result).getShape() != tensorOf(v2d).getShape())
    shaped = ReshapeOp::create(b, op->getLoc(), result.getType(), v2d);
  result.replaceAllUsesWith(shaped);
  op->erase();
}

void Fp8Rewriter::rewriteForward(const MarkedLinear &d) {
  LinearOp linear = d.linear;
  Value x = flat(linear.getInput());
  afterDefinition(x);
  Quantized xq = quantize(x, e4m3, "input." + d.param);
  afterDefinition(linear.getWeight());
  Quantized wq = quantize(linear.getWeight(), e4m3, "weight." + d.param);
  forwardInputs[d.param] = xq;
  Type element = tensorOf(linear.getResult()).getElementType();
  b.setInsertionPoint(linear);
  replaceWith(linear, scaledMatmul("output", d, xq, wq, element,
                                   linear.getLoc()));
}

Quantized Fp8Rewriter::backwardInput(const MarkedLinear &d,
                                     LinearGradWeightOp gw) {
  Quantized xq = forwardInputs.lookup(d.param);
  Value x = gw.getInput();
  Operation *def = x.getDefiningOp();
  if (def && def->hasAttr(kRecomputedAttr) && !isTpReplicated(x)) {
    // The backward's own copy, made in the backward: its codes with the
    // forward's amax (the same bits, so the same codes and scale). Under
    // full checkpointing the recomputed linear has quantized it already.
    Value x2 = flat(x);
    afterDefinition(x2);
    xq = quantize(x2, e4m3, "input." + d.param,
                  xq.codes.getDefiningOp<QuantizeOp>().getAmax());
  }
  return {transposed(xq.codes), xq.scale};
}

void Fp8Rewriter::rewriteBackward(const MarkedLinear &d, LinearGradInputOp gi,
                                  LinearGradWeightOp gw, Operation *first) {
  Value dy = gi ? gi.getGrad() : gw.getGrad();
  Value dy2 = flat(dy);
  // Tensorwise: the gradient in e5m2 (range over precision), quantized
  // where it is made; rowwise: e4m3 throughout.
  Quantized dq;
  if (rowwise()) {
    b.setInsertionPoint(first);
    dq = quantize(dy2, e4m3, "");
  } else {
    afterDefinition(dy2);
    dq = quantize(dy2, e5m2, "grad_output." + d.param);
  }

  // Every operand first: `first` is one of the ops replaced below.
  Quantized wt, dyt, xt;
  if (rowwise()) {
    b.setInsertionPoint(first);
    if (gi)
      wt = quantize(transposedOnce(gi.getWeight()), e4m3, "");
    if (gw) {
      dyt = quantize(transposedOnce(dy2), e4m3, "");
      xt = quantize(transposedOnce(flat(gw.getInput())), e4m3, "");
    }
  } else {
    if (gi) {
      // The backward's own copy of the weight: with resharding it is
      // gathered again, and its codes (the same bits: the weight has not
      // changed) are made from that copy, so no full weight is kept from
      // the forward.
      afterDefinition(gi.getWeight());
      Quantized w = quantize(gi.getWeight(), e4m3, "weight." + d.param);
      wt = {transposed(w.codes), w.scale};
    }
    if (gw) {
      dyt = {transposed(dq.codes), dq.scale};
      xt = backwardInput(d, gw);
    }
  }
  if (gi) {
    Type element = tensorOf(gi.getResult()).getElementType();
    b.setInsertionPoint(gi);
    replaceWith(gi, scaledMatmul("grad_input", d, dq, wt, element,
                                 gi.getLoc()));
  }
  if (gw) {
    Type element = tensorOf(gw.getResult()).getElementType();
    b.setInsertionPoint(gw);
    replaceWith(gw, scaledMatmul("grad_weight", d, dyt, xt, element,
                                 gw.getLoc()));
  }
}

LogicalResult Fp8Rewriter::run() {
  std::vector<MarkedLinear> linears;
  llvm::StringMap<const MarkedLinear *> byParam;
  bool unmarked = false;
  func.walk([&](LinearOp linear) {
    if (linear->hasAttr(kRecomputedAttr))
      return WalkResult::advance();
    FailureOr<Fp8ChoiceAttr> choice = getFp8Choice(linear, "kiln-fp8-linear");
    if (failed(choice)) {
      unmarked = true;
      return WalkResult::interrupt();
    }
    if (choice->isFp8())
      linears.push_back({linear, linear.getParam().str(), linear.getRole()});
    return WalkResult::advance();
  });
  if (unmarked)
    return failure();
  for (const MarkedLinear &d : linears)
    if (!byParam.try_emplace(d.param, &d).second)
      // Each forward linear is paired with its backward by parameter.
      return LinearOp(d.linear).emitOpError("kiln-fp8-linear: parameter '")
             << d.param
             << "' is read by more than one FP8 linear (async TP's chunks?); "
                "one per parameter is supported";
  LLVM_DEBUG(llvm::dbgs() << DEBUG_TYPE << ": @" << func.getSymName() << ", "
                          << linears.size() << " FP8 linears\n");
  if (linears.empty())
    return success();

  // Collect first: rewriting erases ops.
  SmallVector<LinearOp> recomputed;
  llvm::StringMap<LinearGradInputOp> gis;
  llvm::StringMap<LinearGradWeightOp> gws;
  func.walk([&](Operation *op) {
    if (auto l = dyn_cast<LinearOp>(op);
        l && l->hasAttr(kRecomputedAttr) && byParam.count(l.getParam()))
      recomputed.push_back(l);
    if (auto gi = dyn_cast<LinearGradInputOp>(op))
      gis[gi.getParam()] = gi;
    if (auto gw = dyn_cast<LinearGradWeightOp>(op))
      gws[gw.getParam()] = gw;
  });

  for (const MarkedLinear &d : linears)
    rewriteForward(d);
  for (LinearOp l : recomputed) {
    const MarkedLinear &d = *byParam.lookup(l.getParam());
    // The recomputed input is quantized with the forward's amax (the same
    // bits, so the same codes and scale, and no history of its own: under
    // selective `op` a recomputed k projection's input is not the q
    // projection's), and the backward multiplies these codes: nothing FP8
    // is kept from the forward.
    Value x = flat(l.getInput());
    afterDefinition(x);
    Value amax;
    if (!rowwise())
      amax = forwardInputs.lookup(d.param)
                 .codes.getDefiningOp<QuantizeOp>()
                 .getAmax();
    Quantized xq = quantize(x, e4m3, "input." + d.param, amax);
    forwardInputs[d.param] = xq;
    // The weight as the backward gathered it (see rewriteBackward).
    afterDefinition(l.getWeight());
    Quantized wq = quantize(l.getWeight(), e4m3, "weight." + d.param);
    b.setInsertionPoint(l);
    replaceWith(l, scaledMatmul("output", d, xq, wq,
                                tensorOf(l.getResult()).getElementType(),
                                l.getLoc()));
  }
  // Backward ops in program order, so that an operand shared by several
  // linears (rowwise: q, k and v's transposed input) is made once, before
  // the first op that reads it.
  struct Backward {
    const MarkedLinear *d;
    LinearGradInputOp gi;
    LinearGradWeightOp gw;
    Operation *first;
  };
  SmallVector<Backward> backwards;
  for (const MarkedLinear &d : linears) {
    LinearGradInputOp gi = gis.lookup(d.param);
    LinearGradWeightOp gw = gws.lookup(d.param);
    if (!gi && !gw)
      continue;
    Operation *first = gi && (!gw || gi->isBeforeInBlock(gw))
                           ? gi.getOperation()
                           : gw.getOperation();
    backwards.push_back({&d, gi, gw, first});
  }
  llvm::sort(backwards, [](const Backward &a, const Backward &b) {
    return a.first->isBeforeInBlock(b.first);
  });
  for (const Backward &bw : backwards)
    rewriteBackward(*bw.d, bw.gi, bw.gw, bw.first);
  // What was recomputed for a bf16 GEMM the backward no longer runs (a
  // sequence-parallel gather under selective checkpointing: the grad-weight
  // GEMM multiplies the forward's codes) goes: left in, it would be a
  // microbatch's value that nothing reads, which kiln-grad-accum refuses.
  // A recomputed tp collective goes with its wait (every tp rank drops the
  // same one).
  Block &body = func.getBody().front();
  for (Operation *op = body.getTerminator()->getPrevNode(); op;) {
    Operation *previous = op->getPrevNode();
    if (op->hasAttr(kRecomputedAttr) && op->use_empty() &&
        (isPure(op) || isa<WaitOp, AllGatherStartOp, ReduceScatterStartOp>(op)))
      op->erase();
    op = previous;
  }
  addHistoryArguments();
  if (delayed && !historyFailed)
    updateHistories();
  return failure(historyFailed);
}

/// The delayed recipe's calibration step: the training step whose empty
/// histories scale with the current amax, keeping only what it adds to the
/// histories (no loss, no update of any other state).
void keepOnlyHistories(func::FuncOp f) {
  Block &body = f.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  SmallVector<Value> kept;
  llvm::BitVector dropped(f.getNumResults());
  for (unsigned i = 0; i < f.getNumResults(); ++i) {
    auto state =
        f.getResultAttrOfType<StringAttr>(i, KilnDialect::kStateAttrName);
    if (state && state.getValue().starts_with("fp8_amax_history."))
      kept.push_back(ret.getOperand(i));
    else
      dropped.set(i);
  }
  ret->setOperands(kept);
  (void)f.eraseResults(dropped);
  // Users come after their operands: one pass from the end removes all
  // that no longer reaches a result (the same collectives on every rank).
  for (Operation *op = ret->getPrevNode(); op;) {
    Operation *previous = op->getPrevNode();
    if (op->use_empty())
      op->erase();
    op = previous;
  }
}

struct Fp8LinearPass : kiln::impl::KilnFp8LinearBase<Fp8LinearPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<Float8Attr> policy = getFp8Policy(module);
    if (failed(policy))
      return signalPassFailure();
    if (!*policy)
      return;
    if (MeshAttr mesh = getModuleMesh(module);
        mesh && mesh.getTp() > 1 && policy->getRecipe() == Fp8Recipe::rowwise) {
      module.emitError("kiln-fp8-linear: the rowwise recipe under tensor "
                       "parallel (tp = ")
          << mesh.getTp()
          << ") is not built: a row's scale would span the columns tp "
             "splits, so each row's amax needs an all-reduce over tp";
      return signalPassFailure();
    }
    func::FuncOp calibration;
    if (policy->getRecipe() == Fp8Recipe::delayed)
      if (auto step = module.lookupSymbol<func::FuncOp>(kTrainStepFunc)) {
        calibration = step.clone();
        calibration.setSymName(kFp8CalibrationFunc);
        module.getBody()->getOperations().insertAfter(Block::iterator(step),
                                                      calibration);
      }
    for (auto func : module.getOps<func::FuncOp>())
      if (failed(Fp8Rewriter(func, *policy).run()))
        return signalPassFailure();
    if (calibration)
      keepOnlyHistories(calibration);
  }
};

} // namespace
