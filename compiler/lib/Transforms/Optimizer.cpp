//===- Optimizer.cpp - Clipping and AdamW: @loss_and_grads to @train_step -===//

#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#define DEBUG_TYPE "kiln-optimizer"

namespace kiln {
#define GEN_PASS_DEF_KILNOPTIMIZER
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {
/// The hyperparameters of the module's `kiln.optimizer` dictionary.
struct Hyper {
  FloatAttr lr, minLr, beta1, beta2, eps, weightDecay, maxNorm;
  IntegerAttr warmupSteps, totalSteps;
  StringAttr decay;

  static FailureOr<Hyper> read(ModuleOp module) {
    auto dict = module->getAttrOfType<DictionaryAttr>(kOptimizerAttr);
    if (!dict)
      return module.emitError("kiln-optimizer needs the module attribute '")
             << kOptimizerAttr << "'";
    Hyper h;
    bool ok = true;
    auto f = [&](StringRef key, FloatAttr &out) {
      out = dict.getAs<FloatAttr>(key);
      if (!out) {
        module.emitError() << kOptimizerAttr << " lacks float '" << key << "'";
        ok = false;
      }
    };
    auto i = [&](StringRef key, IntegerAttr &out) {
      out = dict.getAs<IntegerAttr>(key);
      if (!out) {
        module.emitError() << kOptimizerAttr << " lacks integer '" << key
                           << "'";
        ok = false;
      }
    };
    f("lr", h.lr);
    f("min_lr", h.minLr);
    f("beta1", h.beta1);
    f("beta2", h.beta2);
    f("eps", h.eps);
    f("weight_decay", h.weightDecay);
    f("max_norm", h.maxNorm);
    i("warmup_steps", h.warmupSteps);
    i("total_steps", h.totalSteps);
    h.decay = dict.getAs<StringAttr>("decay");
    if (!h.decay) {
      module.emitError() << kOptimizerAttr << " lacks string 'decay'";
      ok = false;
    }
    if (!ok)
      return failure();
    return h;
  }
};

LogicalResult appendOptimizer(func::FuncOp func, const Hyper &h) {
  MLIRContext *ctx = func.getContext();
  Block &body = func.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  OpBuilder b(ret);
  Location loc = func.getLoc();

  // Parameters in argument order, and their gradients from the results.
  llvm::StringMap<Value> gradOf;
  for (unsigned r = 1; r < func.getNumResults(); ++r)
    if (auto name = func.getResultAttrOfType<StringAttr>(r, KilnDialect::kGradAttrName))
      gradOf[name.getValue()] = ret.getOperand(r);
  SmallVector<std::pair<BlockArgument, StringAttr>> params;
  for (BlockArgument arg : body.getArguments())
    if (auto name = func.getArgAttrOfType<StringAttr>(
            arg.getArgNumber(), KilnDialect::kParamAttrName)) {
      if (!gradOf.count(name.getValue()))
        return func.emitOpError("has no gradient for parameter '")
               << name.getValue() << "'";
      params.push_back({arg, name});
    }
  if (params.empty())
    return func.emitOpError("has no kiln.param arguments to optimize");

  // New arguments: the two AdamW states of every parameter, then the step,
  // appended in one call (one at a time, each insertion would copy the
  // whole signature and its attributes again: quadratic in the layers).
  // A moment argument is sliced like its parameter: the runtime
  // initialises and checkpoints it as that slice of the whole tensor
  // (docs/tp.md).
  auto stateAttrs = [&](StringRef name, BlockArgument param = {}) {
    SmallVector<NamedAttribute> attrs = {
        b.getNamedAttr(KilnDialect::kStateAttrName, b.getStringAttr(name))};
    if (Attribute slice = param ? func.getArgAttr(param.getArgNumber(),
                                                  KilnDialect::kTpShardAttrName)
                                : Attribute())
      attrs.push_back(b.getNamedAttr(KilnDialect::kTpShardAttrName, slice));
    return b.getDictionaryAttr(attrs);
  };
  unsigned firstNew = func.getNumArguments();
  SmallVector<unsigned> newIndices;
  SmallVector<Type> newTypes;
  SmallVector<DictionaryAttr> newAttrs;
  for (auto &[param, name] : params) {
    newTypes.append(2, param.getType());
    newAttrs.push_back(stateAttrs(("exp_avg." + name.getValue()).str(), param));
    newAttrs.push_back(
        stateAttrs(("exp_avg_sq." + name.getValue()).str(), param));
  }
  auto i64Scalar = RankedTensorType::get({}, b.getI64Type());
  newTypes.push_back(i64Scalar);
  newAttrs.push_back(b.getDictionaryAttr(
      b.getNamedAttr(KilnDialect::kInputAttrName, b.getStringAttr("step"))));
  newIndices.append(newTypes.size(), firstNew);
  if (failed(func.insertArguments(newIndices, newTypes, newAttrs,
                                  SmallVector<Location>(newTypes.size(), loc))))
    return failure();
  SmallVector<std::pair<BlockArgument, BlockArgument>> states;
  for (unsigned i = 0; i < params.size(); ++i)
    states.push_back({body.getArgument(firstNew + 2 * i),
                      body.getArgument(firstNew + 2 * i + 1)});
  Value step = body.getArgument(firstNew + 2 * params.size());

  SmallVector<Value> allGrads;
  for (auto &[param, name] : params)
    allGrads.push_back(gradOf.lookup(name.getValue()));
  Value norm = GradNormOp::create(b, loc, ValueRange(allGrads), false);
  Value lr = LRScheduleOp::create(b, loc, step, h.lr, h.minLr, h.warmupSteps,
                                  h.totalSteps, h.decay);

  SmallVector<Value> results = {ret.getOperand(0), norm, lr};
  SmallVector<DictionaryAttr> resultAttrs = {
      b.getDictionaryAttr(b.getNamedAttr(KilnDialect::kOutputAttrName, b.getStringAttr("loss"))),
      b.getDictionaryAttr(
          b.getNamedAttr(KilnDialect::kOutputAttrName, b.getStringAttr("grad_norm"))),
      b.getDictionaryAttr(b.getNamedAttr(KilnDialect::kOutputAttrName, b.getStringAttr("lr")))};
  SmallVector<Value> newParams, newAvg, newAvgSq;
  for (auto [p, s] : llvm::zip(params, states)) {
    auto &[param, name] = p;
    auto update = AdamWOp::create(b, param.getLoc(), param,
                                  gradOf.lookup(name.getValue()), s.first,
                                  s.second, norm, lr, step, h.beta1, h.beta2,
                                  h.eps, h.weightDecay, h.maxNorm);
    newParams.push_back(update.getNewParam());
    newAvg.push_back(update.getNewExpAvg());
    newAvgSq.push_back(update.getNewExpAvgSq());
  }
  auto tag = [&](ArrayRef<Value> values, StringRef prefix) {
    for (auto [v, p] : llvm::zip(values, params)) {
      results.push_back(v);
      resultAttrs.push_back(
          stateAttrs((prefix + p.second.getValue()).str()));
    }
  };
  tag(newParams, "");
  tag(newAvg, "exp_avg.");
  tag(newAvgSq, "exp_avg_sq.");

  ret->setOperands(results);
  SmallVector<Type> resultTypes;
  for (Value v : results)
    resultTypes.push_back(v.getType());
  func.setFunctionType(FunctionType::get(ctx, func.getArgumentTypes(),
                                         resultTypes));
  func.setAllResultAttrs(resultAttrs);
  func.setSymName(kTrainStepFunc);
  return success();
}

struct OptimizerPass : kiln::impl::KilnOptimizerBase<OptimizerPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto func = module.lookupSymbol<func::FuncOp>(kLossAndGradsFunc);
    if (!func) {
      module.emitError("kiln-optimizer needs a func.func @loss_and_grads "
                       "(run kiln-autodiff first)");
      return signalPassFailure();
    }
    FailureOr<Hyper> hyper = Hyper::read(module);
    if (failed(hyper))
      return signalPassFailure();
    // @loss_and_grads stays: the plan exposes it so that gradients can be
    // checked against an independent reference.
    func::FuncOp step = func.clone();
    module.getBody()->getOperations().insertAfter(Block::iterator(func), step);
    if (failed(appendOptimizer(step, *hyper)))
      return signalPassFailure();
  }
};
} // namespace
