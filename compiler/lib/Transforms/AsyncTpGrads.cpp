//===- AsyncTpGrads.cpp - One weight-gradient GEMM per async TP linear ----===//
//
// kiln-async-tp splits a tp linear into one GEMM per sequence chunk, and
// autodiff gives each chunk its own weight-gradient GEMM, summed with adds:
// another order of the same sums than the one GEMM over the whole sequence
// that plain TP runs. This pass puts the chunks' output gradients and
// inputs back in sequence order and replaces the sum by that one GEMM, so
// the weight gradient is plain TP's, bit for bit (docs/tp.md, "Async TP").
// The chunks are the linears kiln-async-tp marked `kiln.async_chunk`; the
// marks are removed here, every other op is left as it is.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <functional>

namespace kiln {
#define GEN_PASS_DEF_KILNASYNCTPGRADS
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {
constexpr int64_t kSwap[] = {1, 0, 2};

/// `parts` ([B, s, N] each, in sequence order) as one [B, S, N]: moved to
/// the sequence-major layout, packed with one flatten, and moved back.
Value concatSequence(OpBuilder &b, Location loc, ArrayRef<Value> parts) {
  RankedTensorType t = tensorOf(parts[0]);
  int64_t batch = t.getDimSize(0), s = t.getDimSize(1), n = t.getDimSize(2);
  int64_t chunk = batch * s * n, count = parts.size();
  SmallVector<Value> flat;
  SmallVector<int64_t> offsets;
  for (auto [i, part] : llvm::enumerate(parts)) {
    Value front =
        TransposeOp::create(b, loc, t.clone({s, batch, n}), part, kSwap);
    flat.push_back(ReshapeOp::create(b, loc, t.clone({chunk}), front));
    offsets.push_back(static_cast<int64_t>(i) * chunk);
  }
  Value all = FlattenOp::create(b, loc, t.clone({chunk * count}), flat,
                                b.getDenseI64ArrayAttr(offsets));
  Value front = ReshapeOp::create(b, loc, t.clone({s * count, batch, n}), all);
  return TransposeOp::create(b, loc, t.clone({batch, s * count, n}), front,
                             kSwap);
}

/// The add tree over exactly `leaves` (each used once, by it): its root,
/// and its adds in `adds` (users after operands); null when the leaves are
/// summed otherwise.
Value sumOf(ArrayRef<Value> leaves, SmallVectorImpl<AddOp> &adds) {
  llvm::SmallPtrSet<Value, 8> leafSet(leaves.begin(), leaves.end());
  Value root = leaves[0];
  while (root.hasOneUse())
    if (auto add = dyn_cast<AddOp>(*root.getUsers().begin()))
      root = add.getResult();
    else
      break;
  size_t found = 0;
  std::function<bool(Value, bool)> walk = [&](Value v, bool isRoot) {
    if (!isRoot && !v.hasOneUse())
      return false;
    if (leafSet.contains(v))
      return ++found, true;
    auto add = v.getDefiningOp<AddOp>();
    if (!add || !walk(add.getLhs(), false) || !walk(add.getRhs(), false))
      return false;
    adds.push_back(add);
    return true;
  };
  if (!walk(root, true) || found != leaves.size())
    return Value();
  return root;
}

struct AsyncTpGradsPass : kiln::impl::KilnAsyncTpGradsBase<AsyncTpGradsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    module.walk([&](func::FuncOp func) {
      if (func.isExternal())
        return;
      // The chunk index of each marked linear, by (param, input).
      DenseMap<std::pair<StringAttr, Value>, int64_t> chunkOf;
      func.walk([&](LinearOp l) {
        if (auto c = l->getAttrOfType<IntegerAttr>(kAsyncChunkAttr))
          chunkOf[{l.getParamAttr(), l.getInput()}] = c.getInt();
      });
      llvm::MapVector<StringAttr, SmallVector<LinearGradWeightOp>> byParam;
      func.walk([&](LinearGradWeightOp gw) {
        if (chunkOf.count({gw.getParamAttr(), gw.getInput()}))
          byParam[gw.getParamAttr()].push_back(gw);
      });
      for (auto &[param, gws] : byParam)
        merge(gws, chunkOf);
    });
    module.walk([](LinearOp l) { l->removeAttr(kAsyncChunkAttr); });
  }

  void merge(SmallVectorImpl<LinearGradWeightOp> &gws,
             const DenseMap<std::pair<StringAttr, Value>, int64_t> &chunkOf) {
    llvm::sort(gws, [&](LinearGradWeightOp a, LinearGradWeightOp b) {
      return chunkOf.lookup({a.getParamAttr(), a.getInput()}) <
             chunkOf.lookup({b.getParamAttr(), b.getInput()});
    });
    SmallVector<Value> leaves;
    for (LinearGradWeightOp gw : gws)
      leaves.push_back(gw.getResult());
    if (gws.size() < 2)
      return;
    SmallVector<AddOp> adds;
    Value root = sumOf(leaves, adds);
    if (!root)
      return; // summed otherwise: left as autodiff wrote it
    SmallVector<Value> grads, inputs;
    for (LinearGradWeightOp gw : gws) {
      grads.push_back(gw.getGrad());
      inputs.push_back(gw.getInput());
    }
    Operation *last = root.getDefiningOp();
    OpBuilder b(last);
    Location loc = gws[0].getLoc();
    // In this order: the IR does not depend on the compiler's order of
    // evaluating arguments.
    Value grad = concatSequence(b, loc, grads);
    Value input = concatSequence(b, loc, inputs);
    Value merged =
        LinearGradWeightOp::create(b, loc, gws[0].getType(), gws[0].getRole(),
                                   grad, input, gws[0].getParam());
    root.replaceAllUsesWith(merged);
    for (AddOp add : llvm::reverse(adds))
      add.erase();
    for (LinearGradWeightOp gw : gws)
      gw.erase();
  }
};
} // namespace
