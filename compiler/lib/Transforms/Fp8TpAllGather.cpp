//===- Fp8TpAllGather.cpp - Sequence-parallel gathers of e4m3 codes -------===//
//
// After kiln-fp8-linear, with tensorwise scaling under tensor parallel: a
// sequence-parallel all-gather over tp whose gathered activation is only
// quantized to e4m3 (the input of the column-parallel FP8 linears, q, k, v
// or w1, w3) gathers the codes instead, one byte per element instead of
// two, as torchao does:
//
//   %a  = kiln.amax %shard                  (the rank's sequence shard)
//   %r  = kiln.all_reduce_start %a over tp {reduction = "max"} + kiln.wait
//   %q, %s = kiln.quantize %shard, %r
//   %g  = kiln.all_gather_start %q over tp  + kiln.wait
//   ... the gather's reshapes and transposes, on the codes
//
// The max over tp of the shards' amaxes is the gathered tensor's amax, and
// a tensorwise cast is elementwise, so the codes and the scale are those
// of quantizing the gathered bf16 tensor, bit for bit. A gather whose
// result has any other reader (a BF16 linear, a recomputed one) stays.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"
#include "kiln/Transforms/Fp8Policy.h"
#include "kiln/Transforms/Fp8Tp.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "kiln-fp8-tp-all-gather"

namespace kiln {
#define GEN_PASS_DEF_KILNFP8TPALLGATHER
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

/// A tp all-gather whose result only reaches one tensorwise e4m3 quantize.
struct CodesGather {
  AllGatherStartOp start;
  WaitOp wait;
  /// The reshapes and transposes from the wait to the quantized value, in
  /// order; each result has one reader, the next.
  SmallVector<Operation *> layout;
  AmaxOp amax;
  QuantizeOp quantize;
};

/// The gather `q` quantizes, when it qualifies.
std::optional<CodesGather> match(QuantizeOp q) {
  if (q.isRowwise() || q.getPow2Scale() ||
      !isa<Float8E4M3FNType>(tensorOf(q.getResult()).getElementType()))
    return std::nullopt;
  auto amax = q.getAmax().getDefiningOp<AmaxOp>();
  if (!amax || amax.getInput() != q.getInput() || !amax->hasOneUse())
    return std::nullopt;
  CodesGather g;
  g.amax = amax;
  g.quantize = q;
  Value v = q.getInput();
  // Its readers: the amax and the quantize, nothing else.
  if (llvm::any_of(v.getUsers(),
                   [&](Operation *user) { return user != amax && user != q; }))
    return std::nullopt;
  while (Operation *def = v.getDefiningOp()) {
    if (auto wait = dyn_cast<WaitOp>(def)) {
      auto start = wait.getPending().getDefiningOp<AllGatherStartOp>();
      if (!start || start.getAxis() != MeshAxis::tp ||
          (!g.layout.empty() && !wait->hasOneUse()))
        return std::nullopt;
      g.start = start;
      g.wait = wait;
      std::reverse(g.layout.begin(), g.layout.end());
      return g;
    }
    if (!isa<ReshapeOp, TransposeOp>(def))
      return std::nullopt;
    // Every layout op but the last one reads only the next.
    if (!g.layout.empty() && !def->hasOneUse())
      return std::nullopt;
    g.layout.push_back(def);
    v = def->getOperand(0);
  }
  return std::nullopt;
}

/// `v`'s type with the element type `element`.
RankedTensorType withElement(Value v, Type element) {
  return RankedTensorType::get(tensorOf(v).getShape(), element);
}

void rewrite(CodesGather &g) {
  OpBuilder b(g.start);
  Location loc = g.start.getLoc();
  Type e4m3 = Float8E4M3FNType::get(b.getContext());
  Value shard = g.start.getShard();
  auto scalar = RankedTensorType::get({}, b.getF32Type());
  Value amax = AmaxOp::create(b, loc, scalar, shard);
  amax = buildTpAmax(b, loc, amax, g.start.getRanks());
  auto q = QuantizeOp::create(b, loc, withElement(shard, e4m3), scalar, shard,
                              amax, /*pow2_scale=*/false);
  auto start = AllGatherStartOp::create(
      b, loc, withElement(g.start.getResult(), e4m3), q.getResult(),
      g.start.getAxisAttr(), g.start.getRanksAttr(), g.start.getGroupAttr());
  b.setInsertionPoint(g.wait);
  Value codes = WaitOp::create(b, g.wait.getLoc(),
                               withElement(g.wait.getResult(), e4m3), start);
  for (Operation *op : g.layout) {
    b.setInsertionPoint(op);
    IRMapping map;
    map.map(op->getOperand(0), codes);
    Operation *clone = b.clone(*op, map);
    clone->getResult(0).setType(withElement(op->getResult(0), e4m3));
    codes = clone->getResult(0);
  }
  g.quantize.getResult().replaceAllUsesWith(codes);
  g.quantize.getScale().replaceAllUsesWith(q.getScale());
  g.quantize->erase();
  g.amax->erase();
  for (Operation *op : llvm::reverse(g.layout))
    op->erase();
  g.wait->erase();
  g.start->erase();
}

struct Fp8TpAllGatherPass
    : kiln::impl::KilnFp8TpAllGatherBase<Fp8TpAllGatherPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<Float8Attr> policy = getFp8Policy(module);
    if (failed(policy))
      return signalPassFailure();
    MeshAttr mesh = getModuleMesh(module);
    if (!*policy || policy->getRecipe() != Fp8Recipe::tensorwise || !mesh ||
        mesh.getTp() == 1)
      return;
    for (auto f : module.getOps<func::FuncOp>()) {
      SmallVector<CodesGather> gathers;
      f.walk([&](QuantizeOp q) {
        if (std::optional<CodesGather> g = match(q))
          gathers.push_back(std::move(*g));
      });
      LLVM_DEBUG(llvm::dbgs() << DEBUG_TYPE << ": @" << f.getSymName() << ", "
                              << gathers.size() << " gathers of codes\n");
      for (CodesGather &g : gathers)
        rewrite(g);
    }
  }
};

} // namespace
