//===- GroupLowering.cpp - Fusible ops as a fused group's op list ---------===//
//
// Each op's formula is written with f32 intermediates and its result
// rounded to the op's element type, so a group computes exactly what its
// ops would compute one by one (tests/unit/TrainingStepTest.cpp checks the
// bits of a fused and an unfused step).
//
//===----------------------------------------------------------------------===//

#include "kiln/Plan/GroupLowering.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"
#include "kiln/Runtime/Plan/Group.h"

#include "mlir/IR/BuiltinTypes.h"

using namespace mlir;
using namespace kiln;
namespace json = llvm::json;
using plan::GroupKind;
using plan::GroupOp;
using plan::GroupStore;

namespace {

class GroupWriter {
public:
  GroupWriter(ArrayRef<Value> inputs, std::pair<int64_t, int64_t> space)
      : inputs(inputs), rows(space.first), cols(space.second) {}

  LogicalResult lower(Operation *op);
  FailureOr<json::Object> finish(ArrayRef<Value> outputs);

private:
  /// Appends an instruction; returns its index.
  int64_t emit(GroupOp op, ArrayRef<int64_t> args, StringRef type = "f32") {
    body.push_back(json::Object{{"op", plan::name(op)},
                                {"args", json::Array(args)},
                                {"type", type.str()}});
    return body.size() - 1;
  }
  int64_t constant(double value) {
    body.push_back(
        json::Object{{"op", plan::name(GroupOp::Const)}, {"value", value}});
    return body.size() - 1;
  }
  /// The instruction holding `v`: a load of the input `v` (as `kind`) the
  /// first time it is read, or the instruction of the op that made it.
  FailureOr<int64_t> get(Operation *user, Value v,
                         GroupKind kind = GroupKind::Elem);
  FailureOr<StringRef> typeOf(Operation *op, Value v);

  LogicalResult lowerRstd(Operation *op, Value x, double eps, int64_t &r);
  LogicalResult lowerQuantize(QuantizeOp op);

  ArrayRef<Value> inputs;
  int64_t rows, cols;
  json::Array body;
  DenseMap<Value, int64_t> regs;
  llvm::StringMap<int64_t> loads; // "<operand>:<kind>"
  /// Values that are only stored: (instruction, store).
  DenseMap<Value, std::pair<int64_t, GroupStore>> stored;
  /// How a readable value is stored when it is an output, if not `elem`.
  DenseMap<Value, GroupStore> storeAs;
};

FailureOr<StringRef> GroupWriter::typeOf(Operation *op, Value v) {
  Type e = cast<RankedTensorType>(v.getType()).getElementType();
  if (e.isF32())
    return StringRef("f32");
  if (e.isBF16())
    return StringRef("bf16");
  if (isa<Float8E4M3FNType>(e))
    return StringRef("f8e4m3");
  if (isa<Float8E5M2Type>(e))
    return StringRef("f8e5m2");
  return op->emitOpError("cannot be fused: fused groups compute in f32, "
                         "bf16 or FP8, not ")
         << e;
}

FailureOr<int64_t> GroupWriter::get(Operation *user, Value v, GroupKind kind) {
  if (auto it = regs.find(v); it != regs.end())
    return it->second;
  if (stored.count(v))
    return user->emitOpError("reads a value its group only stores");
  auto at = llvm::find(inputs, v);
  if (at == inputs.end())
    return user->emitOpError("reads a value from outside its group that is "
                             "not one of the group's inputs");
  int64_t operand = at - inputs.begin();
  std::string key = (llvm::Twine(operand) + ":" + plan::name(kind)).str();
  if (auto it = loads.find(key); it != loads.end())
    return it->second;
  FailureOr<StringRef> type = typeOf(user, v);
  if (failed(type))
    return failure();
  body.push_back(json::Object{{"op", plan::name(GroupOp::Load)},
                              {"operand", operand},
                              {"kind", plan::name(kind)},
                              {"type", type->str()}});
  return loads[key] = body.size() - 1;
}

/// r = 1 / sqrt(mean(x^2) + eps) per row, as rms_norm and its gradient
/// both compute it.
LogicalResult GroupWriter::lowerRstd(Operation *op, Value x, double eps,
                                     int64_t &r) {
  FailureOr<int64_t> xi = get(op, x);
  if (failed(xi))
    return failure();
  int64_t sq = emit(GroupOp::Mul, {*xi, *xi});
  int64_t ss = emit(GroupOp::RowSum, {sq});
  int64_t ms = emit(GroupOp::Div, {ss, constant(static_cast<double>(cols))});
  r = emit(GroupOp::Rsqrt, {emit(GroupOp::Add, {ms, constant(eps)})});
  return success();
}

/// scale = F / max(amax, 1e-12) [rounded down to a power of two], then the
/// codes of x * scale (KilnFp8Ops.td).
LogicalResult GroupWriter::lowerQuantize(QuantizeOp op) {
  FailureOr<StringRef> codes = typeOf(op, op.getResult());
  FailureOr<int64_t> x = get(op, op.getInput());
  if (failed(codes) || failed(x))
    return failure();
  int64_t amax;
  if (op.isRowwise()) {
    amax = emit(GroupOp::RowMax, {emit(GroupOp::Abs, {*x})});
  } else {
    FailureOr<int64_t> a = get(op, op.getAmax(), GroupKind::Scalar);
    if (failed(a))
      return failure();
    amax = *a;
  }
  double largest = *codes == "f8e4m3" ? 448.0 : 57344.0;
  int64_t scale =
      emit(GroupOp::Div,
           {constant(largest), emit(GroupOp::Max, {amax, constant(1e-12)})});
  if (op.getPow2Scale())
    scale = emit(GroupOp::Pow2Floor, {scale});
  regs[op.getResult()] =
      emit(GroupOp::Convert, {emit(GroupOp::Mul, {*x, scale})}, *codes);
  regs[op.getScale()] = scale;
  storeAs[op.getScale()] =
      op.isRowwise() ? GroupStore::Row : GroupStore::Scalar;
  return success();
}

LogicalResult GroupWriter::lower(Operation *op) {
  if (auto quantize = dyn_cast<QuantizeOp>(op))
    return lowerQuantize(quantize);
  if (isa<AmaxOp>(op)) {
    FailureOr<int64_t> x = get(op, op->getOperand(0));
    if (failed(x))
      return failure();
    stored[op->getResult(0)] = {*x, GroupStore::Amax};
    return success();
  }
  if (isa<ReshapeOp>(op)) {
    // Same rows and columns (fusionSpace): the same register.
    FailureOr<int64_t> x = get(op, op->getOperand(0));
    if (failed(x))
      return failure();
    regs[op->getResult(0)] = *x;
    return success();
  }
  Value result = op->getResult(0);
  FailureOr<StringRef> type = typeOf(op, result);
  if (failed(type))
    return failure();
  auto arg = [&](unsigned i, GroupKind kind = GroupKind::Elem) {
    return get(op, op->getOperand(i), kind);
  };

  if (isa<AddOp, MulOp, MaximumOp>(op)) {
    FailureOr<int64_t> a = arg(0), b = arg(1);
    if (failed(a) || failed(b))
      return failure();
    GroupOp g = isa<AddOp>(op)   ? GroupOp::Add
                : isa<MulOp>(op) ? GroupOp::Mul
                                 : GroupOp::Max;
    regs[result] = emit(g, {*a, *b}, *type);
    return success();
  }
  if (isa<SiluOp>(op)) {
    // x * sigmoid(x)
    FailureOr<int64_t> x = arg(0);
    if (failed(x))
      return failure();
    regs[result] =
        emit(GroupOp::Mul, {*x, emit(GroupOp::Sigmoid, {*x})}, *type);
    return success();
  }
  if (isa<SiluGradOp>(op)) {
    // (dy * s) * (1 + x * (1 - s)), s = sigmoid(x)
    FailureOr<int64_t> dy = arg(0), x = arg(1);
    if (failed(dy) || failed(x))
      return failure();
    int64_t s = emit(GroupOp::Sigmoid, {*x});
    int64_t one = constant(1.0);
    int64_t inner =
        emit(GroupOp::Add,
             {one, emit(GroupOp::Mul, {*x, emit(GroupOp::Sub, {one, s})})});
    regs[result] =
        emit(GroupOp::Mul, {emit(GroupOp::Mul, {*dy, s}), inner}, *type);
    return success();
  }
  if (auto divide = dyn_cast<DivideOp>(op)) {
    FailureOr<int64_t> x = arg(0);
    if (failed(x))
      return failure();
    regs[result] =
        emit(GroupOp::Div, {*x, constant(static_cast<double>(divide.getBy()))},
             *type);
    return success();
  }
  if (isa<CastOp, SqrtOp>(op)) {
    FailureOr<int64_t> x = arg(0);
    if (failed(x))
      return failure();
    regs[result] =
        emit(isa<CastOp>(op) ? GroupOp::Convert : GroupOp::Sqrt, {*x}, *type);
    return success();
  }
  if (auto norm = dyn_cast<RMSNormOp>(op)) {
    // (x * r) * w
    int64_t r;
    FailureOr<int64_t> x = arg(0), w = arg(1, GroupKind::Col);
    if (failed(x) || failed(w) ||
        failed(
            lowerRstd(op, norm.getInput(), norm.getEps().convertToDouble(), r)))
      return failure();
    regs[result] = emit(GroupOp::Mul, {emit(GroupOp::Mul, {*x, r}), *w}, *type);
    return success();
  }
  if (auto grad = dyn_cast<RMSNormGradOp>(op)) {
    // g = dy * w, k = r^2 * mean(g * x): dx = r * (g - x * k);
    // dw = sum over rows of (dy * x) * r.
    int64_t r;
    FailureOr<int64_t> dy = arg(0), x = arg(1), w = arg(2, GroupKind::Col);
    if (failed(dy) || failed(x) || failed(w) ||
        failed(
            lowerRstd(op, grad.getInput(), grad.getEps().convertToDouble(), r)))
      return failure();
    int64_t g = emit(GroupOp::Mul, {*dy, *w});
    int64_t mean = emit(GroupOp::Div,
                        {emit(GroupOp::RowSum, {emit(GroupOp::Mul, {g, *x})}),
                         constant(static_cast<double>(cols))});
    int64_t k = emit(GroupOp::Mul, {emit(GroupOp::Mul, {r, r}), mean});
    regs[grad.getInputGrad()] =
        emit(GroupOp::Mul,
             {r, emit(GroupOp::Sub, {g, emit(GroupOp::Mul, {*x, k})})}, *type);
    int64_t dwTerm = emit(GroupOp::Mul, {emit(GroupOp::Mul, {*dy, *x}), r});
    stored[grad.getWeightGrad()] = {dwTerm, GroupStore::ColSum};
    return success();
  }
  if (isa<TransposeOp>(op)) {
    FailureOr<int64_t> x = arg(0);
    if (failed(x))
      return failure();
    stored[result] = {*x, GroupStore::Transpose};
    return success();
  }
  return op->emitOpError("has no fused-group form");
}

FailureOr<json::Object> GroupWriter::finish(ArrayRef<Value> outputs) {
  json::Array outs;
  for (Value v : outputs) {
    if (auto it = stored.find(v); it != stored.end()) {
      outs.push_back(json::Object{{"value", it->second.first},
                                  {"store", plan::name(it->second.second)}});
      continue;
    }
    auto it = regs.find(v);
    if (it == regs.end())
      return failure();
    auto store = storeAs.find(v);
    outs.push_back(json::Object{
        {"value", it->second},
        {"store", plan::name(store == storeAs.end() ? GroupStore::Elem
                                                    : store->second)}});
  }
  return json::Object{{"rows", rows},
                      {"cols", cols},
                      {"body", std::move(body)},
                      {"outputs", std::move(outs)}};
}

} // namespace

FailureOr<json::Object> kiln::lowerToGroup(ArrayRef<Operation *> ops,
                                           ArrayRef<Value> inputs,
                                           ArrayRef<Value> outputs,
                                           std::pair<int64_t, int64_t> space) {
  GroupWriter writer(inputs, space);
  for (Operation *op : ops)
    if (failed(writer.lower(op)))
      return failure();
  FailureOr<json::Object> group = writer.finish(outputs);
  if (failed(group))
    return ops.back()->emitOpError("internal: a group output was not computed");
  return group;
}
