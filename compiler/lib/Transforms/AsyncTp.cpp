//===- AsyncTp.cpp - Collective matmuls around the tp ring ----------------===//
//
// Async tensor parallel (docs/tp.md, "Async TP"): each sequence-parallel
// all-gather that feeds column-parallel linears, and each reduce-scatter
// that follows a row-parallel linear, becomes `tp` steps around the ring of
// the tp axis, each step's transfer (`send_recv_start` + `wait`, shift 1)
// overlapping the GEMM of the chunk in hand:
//
// - gather -> linears: the rank starts from its own sequence chunk; at
//   step k it holds chunk (r + k) mod tp, multiplies it, and passes it to
//   the rank before it (shift tp - 1). Each linear's result is its chunks'
//   results put back in sequence order (`flatten`), the same values as the
//   gathered linear's.
// - linear -> reduce-scatter: at step k the rank multiplies its rows of
//   chunk (r - k - 1) mod tp, adds the partial sum received from the rank
//   before it, and sends the sum on (shift 1); after tp - 1 steps it holds
//   the sum of its own chunk over every rank.
//
// Both directions are chosen so that every sum is the plain collective's
// bit for bit (docs/communicator.md, "Reduction semantics": chunk j is
// folded over ranks j + 1, j + 2, ..., j). The scatter ring adds in that
// order as it goes; the gather's gradient ring (autodiff's, shift 1) nests
// rank j's own gradient outermost, around rank j - 1's, around rank j - 2's
// and so on: the same fold, since a + b is b + a bit for bit. The weight
// gradients are put back as one GEMM by kiln-async-tp-grads. The GEMMs of
// a chunk are then the same bits as the whole's rows wherever the GEMM
// library's result does not depend on the row count (Kiln's portable GEMM;
// not OpenBLAS's, docs/tp.md "Async TP").
//
// Runs on @forward_loss right after kiln-tp-partition, on its IR as written
// (before canonicalization folds its reshapes), so that autodiff
// differentiates the ring like any op: the backward gets the mirrored rings
// (a send_recv's gradient goes back the other way).
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "kiln-async-tp"

namespace kiln {
#define GEN_PASS_DEF_KILNASYNCTP
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {
/// [0, 1, 2] <-> [1, 0, 2]: the sequence to the front of [B, S, N] and back.
constexpr int64_t kSwap[] = {1, 0, 2};

class Ring {
public:
  Ring(func::FuncOp func, int64_t tp, int64_t rank)
      : tp(tp), rank(rank), b(func.getContext()) {}

  /// gather -> linears, when `start`'s gathered [B, S, D] feeds only
  /// linears; else nothing changes.
  void rewriteGather(AllGatherStartOp start);
  /// linear -> reduce-scatter, when `start` scatters exactly one
  /// row-parallel linear's [B, S, D] result; else nothing changes.
  void rewriteScatter(ReduceScatterStartOp start);

  int64_t rewritten = 0;

private:
  /// The chunk index a rank holds at ring step `k` of a gather.
  int64_t gatherChunk(int64_t k) const { return (rank + k) % tp; }
  /// The chunk a rank adds at ring step `k` of a scatter.
  int64_t scatterChunk(int64_t k) const {
    return ((rank - k - 1) % tp + tp) % tp;
  }
  Value swap(Location loc, Value v) {
    RankedTensorType t = tensorOf(v);
    return TransposeOp::create(
        b, loc, t.clone({t.getDimSize(1), t.getDimSize(0), t.getDimSize(2)}), v,
        kSwap);
  }
  Value reshape(Location loc, Value v, ArrayRef<int64_t> shape) {
    return ReshapeOp::create(b, loc, tensorOf(v).clone(shape), v);
  }
  /// `v` passed `places` places along the ring (tp - 1: one back).
  Value shift(Location loc, Value v, int64_t places) {
    auto start = SendRecvStartOp::create(
        b, loc, v.getType(), v, MeshAxisAttr::get(b.getContext(), MeshAxis::tp),
        b.getI64IntegerAttr(tp), b.getI64IntegerAttr(places));
    return WaitOp::create(b, loc, start.getType(), start);
  }
  /// `linear` on `input`, sequence chunk `chunk`, instead of its own
  /// input, with the result's shape.
  Value linearOn(LinearOp linear, Value input, int64_t chunk) {
    Operation *copy = b.clone(*linear);
    copy->setOperand(0, input);
    copy->setAttr(kAsyncChunkAttr, b.getI64IntegerAttr(chunk));
    RankedTensorType in = tensorOf(input), out = tensorOf(linear.getResult());
    copy->getResult(0).setType(
        out.clone({in.getDimSize(0), in.getDimSize(1), out.getDimSize(2)}));
    return copy->getResult(0);
  }

  int64_t tp, rank;
  OpBuilder b;
};

/// `v`'s single user of type `T`, or null.
template <typename T> T onlyUser(Value v) {
  return v.hasOneUse() ? dyn_cast<T>(*v.getUsers().begin()) : T();
}

bool isSwap(TransposeOp t) {
  return t && t.getPermutation() == ArrayRef<int64_t>(kSwap);
}
} // namespace

void Ring::rewriteGather(AllGatherStartOp start) {
  // all_gather(flat [s B D]) -> wait -> reshape [S, B, D] -> transpose
  // [B, S, D] -> linears.
  auto wait = onlyUser<WaitOp>(start.getResult());
  auto front = wait ? onlyUser<ReshapeOp>(wait.getResult()) : ReshapeOp();
  auto whole = front ? onlyUser<TransposeOp>(front.getResult()) : TransposeOp();
  if (!isSwap(whole) || tensorOf(front.getResult()).getRank() != 3)
    return;
  SmallVector<LinearOp> linears;
  for (Operation *user : whole.getResult().getUsers()) {
    auto linear = dyn_cast<LinearOp>(user);
    if (!linear || linear.getInput() != whole.getResult())
      return;
    linears.push_back(linear);
  }
  if (linears.empty())
    return;
  llvm::sort(linears,
             [](LinearOp a, LinearOp b) { return a->isBeforeInBlock(b); });
  ArrayRef<int64_t> sbd = tensorOf(front.getResult()).getShape();
  int64_t s = sbd[0] / tp;
  Location loc = start.getLoc();

  // Each linear's chunk results, [s * B * N] flat in [s, B, N] order, by
  // chunk index.
  SmallVector<SmallVector<Value>> parts(linears.size(), SmallVector<Value>(tp));
  b.setInsertionPoint(start);
  Value held = start.getShard();
  for (int64_t k = 0; k < tp; ++k) {
    // The next chunk is on its way while this one is multiplied.
    Value next = k + 1 < tp ? shift(loc, held, tp - 1) : Value();
    Value x = swap(loc, reshape(loc, held, {s, sbd[1], sbd[2]}));
    for (auto [i, linear] : llvm::enumerate(linears)) {
      Value y = swap(loc, linearOn(linear, x, gatherChunk(k)));
      parts[i][gatherChunk(k)] =
          reshape(loc, y, {tensorOf(y).getNumElements()});
    }
    held = next;
  }
  for (auto [i, linear] : llvm::enumerate(linears)) {
    RankedTensorType out = tensorOf(linear.getResult());
    int64_t chunk = tensorOf(parts[i][0]).getNumElements();
    SmallVector<int64_t> offsets;
    for (int64_t c = 0; c < tp; ++c)
      offsets.push_back(c * chunk);
    Value flat = FlattenOp::create(b, loc, out.clone({chunk * tp}), parts[i],
                                   b.getDenseI64ArrayAttr(offsets));
    Value y = swap(loc, reshape(loc, flat,
                                {out.getDimSize(1), out.getDimSize(0),
                                 out.getDimSize(2)}));
    linear.getResult().replaceAllUsesWith(y);
    linear.erase();
  }
  whole.erase();
  front.erase();
  wait.erase();
  start.erase();
  ++rewritten;
}

void Ring::rewriteScatter(ReduceScatterStartOp start) {
  // linear [B, S, D] -> transpose [S, B, D] -> reshape flat ->
  // reduce_scatter (sum) -> wait.
  if (start.getReduction() != "sum")
    return;
  auto flat = start.getInput().getDefiningOp<ReshapeOp>();
  auto swapped =
      flat ? flat.getInput().getDefiningOp<TransposeOp>() : TransposeOp();
  auto linear =
      swapped ? swapped.getInput().getDefiningOp<LinearOp>() : LinearOp();
  auto wait = onlyUser<WaitOp>(start.getResult());
  if (!linear || !isSwap(swapped) || !wait || !flat->hasOneUse() ||
      !swapped->hasOneUse() || !linear->hasOneUse())
    return;
  Value x = linear.getInput(); // [B, S, F]
  ArrayRef<int64_t> bsf = tensorOf(x).getShape();
  int64_t s = bsf[1] / tp;
  Location loc = start.getLoc();
  b.setInsertionPoint(start);
  // x's sequence chunks: [S, B, F] flat, cut at c * s * B * F.
  Value xFlat = reshape(loc, swap(loc, x), {tensorOf(x).getNumElements()});
  int64_t chunk = s * bsf[0] * bsf[2];
  auto partial = [&](int64_t c) {
    Value xc =
        UnflattenOp::create(b, loc, tensorOf(x).clone({s, bsf[0], bsf[2]}),
                            xFlat, b.getI64IntegerAttr(c * chunk));
    Value y = swap(loc, linearOn(linear, swap(loc, xc), c));
    return reshape(loc, y, {tensorOf(y).getNumElements()});
  };
  Value sum = partial(scatterChunk(0));
  for (int64_t k = 1; k < tp; ++k) {
    Value received = shift(loc, sum, 1);
    // The next chunk's GEMM runs while the sum travels.
    Value mine = partial(scatterChunk(k));
    sum = AddOp::create(b, loc, received, mine);
  }
  wait.getResult().replaceAllUsesWith(sum);
  wait.erase();
  start.erase();
  flat.erase();
  swapped.erase();
  linear.erase();
  ++rewritten;
}

namespace {
struct AsyncTpPass : kiln::impl::KilnAsyncTpBase<AsyncTpPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    MeshAttr mesh = getModuleMesh(module);
    auto tpAttr =
        module->getAttrOfType<DictionaryAttr>(KilnDialect::kTpAttrName);
    auto async = tpAttr ? tpAttr.getAs<BoolAttr>("async") : BoolAttr();
    if (!mesh || mesh.getTp() == 1 || !async || !async.getValue())
      return;
    auto rank = tpAttr.getAs<IntegerAttr>("rank");
    auto forward = module.lookupSymbol<func::FuncOp>(kForwardLossFunc);
    if (!rank || !forward) {
      module.emitError("kiln-async-tp needs kiln.tp's rank and a "
                       "func.func @forward_loss");
      return signalPassFailure();
    }
    Ring ring(forward, mesh.getTp(), rank.getInt());
    Block &body = forward.getBody().front();
    for (auto start : llvm::to_vector(body.getOps<AllGatherStartOp>()))
      if (start.getAxis() == MeshAxis::tp)
        ring.rewriteGather(start);
    for (auto start : llvm::to_vector(body.getOps<ReduceScatterStartOp>()))
      if (start.getAxis() == MeshAxis::tp)
        ring.rewriteScatter(start);
    LLVM_DEBUG(llvm::dbgs() << DEBUG_TYPE ": " << ring.rewritten
                            << " collectives around the ring\n");
  }
};
} // namespace
