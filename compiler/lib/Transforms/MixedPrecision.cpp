//===- MixedPrecision.cpp - Param, reduce and master dtypes as casts ------===//
//
// One rule for every compute op, so the pass needs no list of ops: float
// operands of rank >= 1 are fed in the param dtype, float results of rank
// >= 1 are produced in it, except attention's logsumexp and loss parallel's
// per-row values (target ids, row max, statistics; docs/tp.md "The ends"),
// which stay f32 through the layout ops and collectives that move them. The
// optimizer ops
// and scalars keep f32. One exception: the ops that sum into a parameter's
// gradient (every embedding_grad, a scatter-add; the adds a gradient is
// built of, found from where the gradients go) produce the wider of the
// param and reduce dtypes, so no gradient is rounded to bf16 only to be
// cast back to f32.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/SmallPtrSet.h"

#define DEBUG_TYPE "kiln-mixed-precision"

namespace kiln {
#define GEN_PASS_DEF_KILNMIXEDPRECISION
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {
bool isOptimizerOp(Operation *op) {
  return isa<AdamWOp, GradNormOp, LRScheduleOp>(op);
}

/// A float tensor of rank >= 1: what the policy moves to the param dtype.
/// (Scalars such as the loss stay f32.)
bool isActivation(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && tensor.getRank() > 0 &&
         isa<FloatType>(tensor.getElementType());
}

/// Attention's logsumexp is f32 wherever it goes.
bool isLogsumexp(Value v) {
  auto result = dyn_cast<OpResult>(v);
  return result && isa<AttentionOp>(result.getOwner()) &&
         result.getResultNumber() == 1;
}

/// Values that stay f32 wherever they go: attention's logsumexp, and loss
/// parallel's per-row values (ids must stay exact; the row max and sums feed
/// a log-sum-exp), with what layout ops and collectives make of them.
bool keepsF32(Operation *op, const DenseSet<Value> &pinned) {
  if (isa<IndexToFloatOp, VocabParallelMaxOp, VocabParallelStatsOp,
          VocabParallelLossGradOp>(op))
    return true;
  return isa<TransposeOp, ReshapeOp, AllGatherStartOp, AllReduceStartOp,
             WaitOp>(op) &&
         llvm::any_of(op->getOperands(),
                      [&](Value v) { return pinned.contains(v); });
}

Type withElement(Type type, Type element) {
  return cast<RankedTensorType>(type).clone(element);
}

Value castTo(OpBuilder &b, Value v, Type element) {
  if (cast<RankedTensorType>(v.getType()).getElementType() == element)
    return v;
  return CastOp::create(b, v.getLoc(), withElement(v.getType(), element), v);
}

FailureOr<Type> parseDtype(Operation *at, DictionaryAttr dict, StringRef key) {
  auto name = dict.getAs<StringAttr>(key);
  Builder b(at->getContext());
  if (name && name.getValue() == "bfloat16")
    return Type(b.getBF16Type());
  if (name && name.getValue() == "float32")
    return Type(b.getF32Type());
  return at->emitError("kiln.precision '")
         << key << "' must be \"bfloat16\" or \"float32\"";
}

/// Calls `fn(operand, isGrad)` for each operand through which a value
/// leaves the compute region: those of the optimizer ops and of the return.
/// `isGrad` marks a parameter's gradient: AdamW's grad, grad_norm's
/// operands, a result marked kiln.grad.
void forEachExit(func::FuncOp func,
                 llvm::function_ref<void(OpOperand &, bool)> fn) {
  for (Operation &op : llvm::make_early_inc_range(func.getBody().front())) {
    if (auto adamw = dyn_cast<AdamWOp>(op)) {
      for (OpOperand &operand : op.getOpOperands())
        fn(operand, operand.get() == adamw.getGrad());
    } else if (isa<GradNormOp>(op)) {
      for (OpOperand &operand : op.getOpOperands())
        fn(operand, /*isGrad=*/true);
    } else if (isa<func::ReturnOp>(op)) {
      for (OpOperand &operand : op.getOpOperands())
        fn(operand,
           static_cast<bool>(func.getResultAttr(operand.getOperandNumber(),
                                                KilnDialect::kGradAttrName)));
    }
  }
}

/// The ops that sum into a parameter's gradient: every embedding_grad (a
/// scatter-add over the tokens, in f32 on every backend) and the adds that
/// a gradient is built of (a tied embedding's: the output projection's
/// linear_grad_weight plus the embedding_grad), and a replicated gradient's
/// all-reduce (sum) over tp with its wait.
llvm::SmallPtrSet<Operation *, 4> gradientSums(func::FuncOp func) {
  llvm::SmallPtrSet<Operation *, 4> sums;
  func.walk([&](EmbeddingGradOp op) { sums.insert(op); });
  SmallVector<Value> work;
  forEachExit(func, [&](OpOperand &operand, bool isGrad) {
    if (isGrad)
      work.push_back(operand.get());
  });
  while (!work.empty()) {
    Operation *op = work.pop_back_val().getDefiningOp();
    // kiln-tp-grad-sync's sum over tp is one too (its wait and start).
    if (auto wait = dyn_cast_or_null<WaitOp>(op))
      if (!wait.getPending().getDefiningOp<AllReduceStartOp>())
        continue;
    auto reduce = dyn_cast_or_null<AllReduceStartOp>(op);
    bool isSum = isa_and_nonnull<AddOp, WaitOp>(op) ||
                 (reduce && reduce.getReduction() == "sum");
    if (isSum && sums.insert(op).second)
      llvm::append_range(work, op->getOperands());
  }
  return sums;
}

void applyPolicy(func::FuncOp func, Type param, Type reduce) {
  Block &body = func.getBody().front();
  OpBuilder b(func.getContext());
  Type f32 = b.getF32Type();
  // A gradient is summed in the wider dtype: in f32 with bf16 compute and an
  // f32 reduce (embedding_grad then accumulates straight into the f32
  // gradient), in the param dtype otherwise (as every op).
  Type sumType = reduce.getIntOrFloatBitWidth() > param.getIntOrFloatBitWidth()
                     ? reduce
                     : param;
  llvm::SmallPtrSet<Operation *, 4> sums;
  if (sumType != param)
    sums = gradientSums(func);
  DenseSet<Value> pinned;
  for (Operation &op : llvm::make_early_inc_range(body)) {
    if (isOptimizerOp(&op) || isa<CastOp, func::ReturnOp>(op) ||
        op.getDialect() != func->getContext()->getLoadedDialect<KilnDialect>())
      continue;
    // embedding_grad reads its operand in the param dtype; an add or a sum
    // over ranks takes its operands in its result's dtype.
    bool isSum = sums.contains(&op);
    Type in = isSum && !isa<EmbeddingGradOp>(op) ? sumType : param;
    Type out = isSum ? sumType : param;
    if (keepsF32(&op, pinned))
      pinned.insert(op.result_begin(), op.result_end());
    b.setInsertionPoint(&op);
    for (OpOperand &operand : op.getOpOperands())
      if (isActivation(operand.get().getType()) &&
          !isLogsumexp(operand.get()) && !pinned.contains(operand.get()))
        operand.set(castTo(b, operand.get(), in));
    for (OpResult result : op.getResults())
      if (isActivation(result.getType()) && !isLogsumexp(result) &&
          !pinned.contains(result))
        result.setType(withElement(result.getType(), out));
  }
  // Whatever leaves the compute region goes back to f32: gradients through
  // the reduce dtype (into the optimizer, or returned as kiln.grad), other
  // values directly.
  forEachExit(func, [&](OpOperand &operand, bool isGrad) {
    Value v = operand.get();
    if (!isActivation(v.getType()))
      return;
    b.setInsertionPoint(operand.getOwner());
    if (isGrad)
      v = castTo(b, v, reduce);
    operand.set(castTo(b, v, f32));
  });
}

struct MixedPrecisionPass
    : kiln::impl::KilnMixedPrecisionBase<MixedPrecisionPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto dict = module->getAttrOfType<DictionaryAttr>(kPrecisionAttr);
    if (!dict) {
      module.emitError("kiln-mixed-precision needs the module attribute '")
          << kPrecisionAttr << "'";
      return signalPassFailure();
    }
    FailureOr<Type> param = parseDtype(module, dict, "param");
    FailureOr<Type> reduce = parseDtype(module, dict, "reduce");
    if (failed(param) || failed(reduce))
      return signalPassFailure();
    if (param->isF32() && reduce->isF32())
      return;
    for (auto func : module.getOps<func::FuncOp>()) {
      bool hasParams = llvm::any_of(func.getArguments(), [&](BlockArgument a) {
        return func.getArgAttr(a.getArgNumber(), KilnDialect::kParamAttrName);
      });
      if (hasParams)
        applyPolicy(func, *param, *reduce);
    }
  }
};
} // namespace
