//===- Fp8AllGather.cpp - FP8 weights gathered as e4m3 codes --------------===//
//
// After kiln-fp8-linear, on one rank's FSDP step. A gathered group whose
// every parameter view (`unflatten`) is only quantized tensorwise to e4m3
// (`amax` + `quantize` of the view, as kiln-fp8-linear writes it) is
// gathered as codes instead of bf16. These are the `<block>.fp8` groups
// kiln-fsdp makes when the FP8 all-gather is on. At the function's start:
//
//   %c_g   = cast of group g's shard to the param dtype
//   %a_g   = shard_amax %c_g                  (per weight, this rank's part)
//   %all   = flatten %a_1, %a_2, ...          (one vector for all weights)
//   %max   = all_reduce_start %all {max} + wait
//   %m_g   = unflatten %max[...]              (group g's amaxes)
//   %q_g, %s_g = shard_quantize %c_g, %m_g    (e4m3 codes, scales)
//
// and each all-gather of the group (the forward's, and the backward's when
// resharding) gathers %q_g; each view's quantize becomes an `unflatten` of
// the gathered codes and one of %s_g. The codes are those the bf16 path
// makes from the gathered bf16 weight, bit for bit: the same values, the
// same amax (the all-reduce's max), the same f32 scale and casts.
//
// Under tensor parallel a view is the rank's tp slice of a weight, and
// kiln-fp8-linear all-reduced its amax `max` over tp (Fp8Tp.h); the vector
// of amaxes is then all-reduced over tp too, after dp_shard, so each
// weight's scale is still the whole weight's.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"
#include "kiln/Transforms/Fp8Policy.h"
#include "kiln/Transforms/Fp8Tp.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "kiln-fp8-all-gather"

namespace kiln {
#define GEN_PASS_DEF_KILNFP8ALLGATHER
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

/// One all-gather of a group whose views are all quantized to e4m3.
struct Gather {
  AllGatherStartOp start;
  WaitOp wait;
  /// Each view with the quantize ops of it (and their amax ops).
  SmallVector<std::pair<UnflattenOp, SmallVector<QuantizeOp>>> views;
  /// Whether a view's amax was all-reduced over tp (its `ranks`), else 0.
  int64_t tp = 0;
};

/// Everything gathered from one shard.
struct Shard {
  BlockArgument arg;
  Type paramType; // the element type gathered before (bf16)
  SmallVector<int64_t> offsets, sizes;
  SmallVector<Gather> gathers;
  Value cast, amax, codes, scales;
};

/// The quantize ops of `view`, when every user of it is a tensorwise e4m3
/// quantize of it or the amax that quantize reads (directly or all-reduced
/// over tp: then `tp` is set to the axis's size).
std::optional<SmallVector<QuantizeOp>> quantizesOf(UnflattenOp view,
                                                   int64_t &tp) {
  SmallVector<QuantizeOp> quantizes;
  auto readsView = [&](Operation *op) {
    auto q = dyn_cast<QuantizeOp>(op);
    return q && q.getInput() == view;
  };
  for (Operation *user : view->getUsers()) {
    if (auto amax = dyn_cast<AmaxOp>(user)) {
      for (Operation *amaxUser : amax->getUsers()) {
        auto start = dyn_cast<AllReduceStartOp>(amaxUser);
        if (!start) {
          if (!readsView(amaxUser))
            return std::nullopt;
          continue;
        }
        auto wait = start->hasOneUse()
                        ? dyn_cast<WaitOp>(*start->getUsers().begin())
                        : WaitOp();
        if (!wait || amaxBehind(wait.getResult()) != amax ||
            !llvm::all_of(wait->getUsers(), readsView))
          return std::nullopt;
      }
      continue;
    }
    auto q = dyn_cast<QuantizeOp>(user);
    bool reduced = false;
    AmaxOp amax = q ? amaxBehind(q.getAmax(), &reduced) : nullptr;
    if (!q || q.getInput() != view || q.isRowwise() || q.getPow2Scale() ||
        !isa<Float8E4M3FNType>(tensorOf(q.getResult()).getElementType()) ||
        !amax || amax.getInput() != view)
      return std::nullopt;
    if (reduced)
      tp = q.getAmax()
               .getDefiningOp<WaitOp>()
               .getPending()
               .getDefiningOp<AllReduceStartOp>()
               .getRanks();
    quantizes.push_back(q);
  }
  if (quantizes.empty())
    return std::nullopt;
  return quantizes;
}

/// The gather of `start`, when its group qualifies; `cast` is the cast of
/// the shard argument it gathers.
std::optional<Gather> qualifying(AllGatherStartOp start, CastOp &cast) {
  cast = start.getShard().getDefiningOp<CastOp>();
  if (!cast || !isa<BlockArgument>(cast.getInput()) ||
      !start->hasOneUse())
    return std::nullopt;
  Gather g;
  g.start = start;
  g.wait = dyn_cast<WaitOp>(*start->getUsers().begin());
  if (!g.wait)
    return std::nullopt;
  for (Operation *user : g.wait->getUsers()) {
    auto view = dyn_cast<UnflattenOp>(user);
    if (!view)
      return std::nullopt;
    std::optional<SmallVector<QuantizeOp>> qs = quantizesOf(view, g.tp);
    if (!qs)
      return std::nullopt;
    g.views.push_back({view, std::move(*qs)});
  }
  if (g.views.empty())
    return std::nullopt;
  return g;
}

class FunctionRewriter {
public:
  explicit FunctionRewriter(func::FuncOp f) : f(f), b(f.getContext()) {}
  LogicalResult run();

private:
  LogicalResult collect();
  void castShards();
  void regather(Shard &s, Gather &g);

  func::FuncOp f;
  OpBuilder b;
  std::vector<Shard> shards;
};

LogicalResult FunctionRewriter::collect() {
  DenseMap<BlockArgument, unsigned> index;
  SmallVector<AllGatherStartOp> starts;
  f.walk([&](AllGatherStartOp start) { starts.push_back(start); });
  DenseSet<BlockArgument> rejected;
  for (AllGatherStartOp start : starts) {
    CastOp cast;
    std::optional<Gather> g = qualifying(start, cast);
    auto arg = cast ? dyn_cast<BlockArgument>(cast.getInput()) : nullptr;
    if (!arg)
      continue;
    if (!g) {
      rejected.insert(arg);
      continue;
    }
    auto [it, added] = index.try_emplace(arg, shards.size());
    if (added) {
      Shard &s = shards.emplace_back();
      s.arg = arg;
      s.paramType = tensorOf(cast.getResult()).getElementType();
      auto parts = f.getArgAttrOfType<ArrayAttr>(arg.getArgNumber(),
                                                 KilnDialect::kShardOfAttrName);
      if (!parts)
        return f.emitOpError("kiln-fp8-all-gather: the gathered shard ")
               << arg.getArgNumber() << " has no kiln.shard_of";
      for (auto part : parts.getAsRange<DictionaryAttr>()) {
        int64_t numel = 1;
        for (int64_t d : part.getAs<DenseI64ArrayAttr>("shape").asArrayRef())
          numel *= d;
        s.offsets.push_back(part.getAs<IntegerAttr>("offset").getInt());
        s.sizes.push_back(numel);
      }
    }
    shards[it->second].gathers.push_back(std::move(*g));
  }
  // A shard gathered once in bf16 for another use keeps bf16 everywhere.
  llvm::erase_if(shards,
                 [&](const Shard &s) { return rejected.contains(s.arg); });
  return success();
}

void FunctionRewriter::castShards() {
  Block &body = f.getBody().front();
  b.setInsertionPointToStart(&body);
  Location loc = f.getLoc();
  Type f32 = b.getF32Type();
  AllGatherStartOp first = shards.front().gathers.front().start;
  int64_t ranks = first.getRanks();
  SmallVector<Value> amaxes;
  SmallVector<int64_t> at;
  int64_t total = 0;
  for (Shard &s : shards) {
    auto shardType = tensorOf(s.arg);
    s.cast = CastOp::create(
        b, loc, RankedTensorType::get(shardType.getShape(), s.paramType),
        s.arg);
    auto amaxType =
        RankedTensorType::get({static_cast<int64_t>(s.offsets.size())}, f32);
    s.amax = ShardAmaxOp::create(b, loc, amaxType, s.cast,
                                 b.getDenseI64ArrayAttr(s.offsets),
                                 b.getDenseI64ArrayAttr(s.sizes),
                                 b.getI64IntegerAttr(ranks));
    amaxes.push_back(s.amax);
    at.push_back(total);
    total += amaxType.getDimSize(0);
  }
  auto allType = RankedTensorType::get({total}, f32);
  Value all = FlattenOp::create(b, loc, allType, amaxes,
                                b.getDenseI64ArrayAttr(at));
  Value started = AllReduceStartOp::create(
      b, loc, allType, all, first.getAxisAttr(), b.getI64IntegerAttr(ranks),
      b.getStringAttr("max"));
  Value max = WaitOp::create(b, loc, allType, started);
  int64_t tp = 0;
  for (Shard &s : shards)
    for (Gather &g : s.gathers)
      tp = std::max(tp, g.tp);
  if (tp > 1)
    max = buildTpAmax(b, loc, max, tp);
  for (auto [s, offset] : llvm::zip(shards, at)) {
    Type amaxType = s.amax.getType();
    Value mine = UnflattenOp::create(b, loc, amaxType, max,
                                     b.getI64IntegerAttr(offset));
    auto q = ShardQuantizeOp::create(
        b, loc,
        RankedTensorType::get(tensorOf(s.cast).getShape(),
                              Float8E4M3FNType::get(b.getContext())),
        amaxType, s.cast, mine, b.getDenseI64ArrayAttr(s.offsets),
        b.getDenseI64ArrayAttr(s.sizes), b.getI64IntegerAttr(ranks));
    s.codes = q.getCodes();
    s.scales = q.getScales();
  }
}

void FunctionRewriter::regather(Shard &s, Gather &g) {
  RankedTensorType gathered = tensorOf(g.start.getResult());
  auto codesType = RankedTensorType::get(gathered.getShape(),
                                         tensorOf(s.codes).getElementType());
  b.setInsertionPoint(g.start);
  auto start = AllGatherStartOp::create(
      b, g.start.getLoc(), codesType, s.codes, g.start.getAxisAttr(),
      g.start.getRanksAttr(), g.start.getGroupAttr());
  b.setInsertionPoint(g.wait);
  Value full = WaitOp::create(b, g.wait.getLoc(), codesType, start);
  auto scalar = RankedTensorType::get({}, b.getF32Type());
  for (auto &[view, quantizes] : g.views) {
    int64_t weight =
        llvm::find(s.offsets, view.getOffset()) - s.offsets.begin();
    b.setInsertionPoint(view);
    Value codes = UnflattenOp::create(
        b, view.getLoc(),
        RankedTensorType::get(tensorOf(view.getResult()).getShape(),
                              tensorOf(s.codes).getElementType()),
        full, view.getOffsetAttr());
    Value scale = UnflattenOp::create(b, view.getLoc(), scalar, s.scales,
                                      b.getI64IntegerAttr(weight));
    for (QuantizeOp q : quantizes) {
      Operation *read = q.getAmax().getDefiningOp();
      Operation *amax = amaxBehind(q.getAmax());
      q.getResult().replaceAllUsesWith(codes);
      q.getScale().replaceAllUsesWith(scale);
      q->erase();
      if (read != amax && read->use_empty()) {
        // The tp all-reduce's wait, then its start.
        Operation *start = read->getOperand(0).getDefiningOp();
        read->erase();
        start->erase();
      }
      if (amax->use_empty())
        amax->erase();
    }
    view->erase();
  }
  Operation *cast = g.start.getShard().getDefiningOp();
  g.wait->erase();
  g.start->erase();
  if (cast->use_empty())
    cast->erase();
}

LogicalResult FunctionRewriter::run() {
  if (failed(collect()))
    return failure();
  // Every view must be one listed weight of its shard.
  for (Shard &s : shards)
    for (Gather &g : s.gathers)
      for (auto &[view, quantizes] : g.views)
        if (!llvm::is_contained(s.offsets, view.getOffset()))
          return view.emitOpError("kiln-fp8-all-gather: no weight of the "
                                  "shard starts at offset ")
                 << view.getOffset();
  LLVM_DEBUG(llvm::dbgs() << DEBUG_TYPE << ": @" << f.getSymName() << ", "
                          << shards.size() << " shards gathered as codes\n");
  if (shards.empty())
    return success();
  castShards();
  for (Shard &s : shards)
    for (Gather &g : s.gathers)
      regather(s, g);
  return success();
}

struct Fp8AllGatherPass : kiln::impl::KilnFp8AllGatherBase<Fp8AllGatherPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<Float8Attr> policy = getFp8Policy(module);
    if (failed(policy))
      return signalPassFailure();
    // The groups to gather in FP8 are kiln-fsdp's `<block>.fp8` groups, the
    // weights kiln-fp8-select marked FP8; the policy's verifier has checked
    // the recipe.
    if (!*policy || !policy->getEnableFsdpFloat8AllGather())
      return;
    for (auto f : module.getOps<func::FuncOp>())
      if (failed(FunctionRewriter(f).run()))
        return signalPassFailure();
  }
};

} // namespace
