//===- TpPartition.cpp - @forward_loss as one rank of the tp axis ---------===//
//
// Megatron's partition with sequence parallel between blocks (docs/tp.md).
// The pass walks @forward_loss once, in order, and retypes each op for the
// rank's part, tracking where each value lives:
//
// - Seq: the rank's sequence shard [B, S/tp, ...] (the embedding's
//   output, norms, residual adds);
// - Full: every position, the same on every rank (an all-gather's result);
// - Local: every position, the rank's heads / FFN columns / vocabulary
//   slice, always dim 2 ([B, S, N/tp] or [B, S, H/tp, hd]);
// - Scalar: the loss.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "kiln-tp-partition"

namespace kiln {
#define GEN_PASS_DEF_KILNTPPARTITION
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {
enum class Layout { Seq, Full, Local, Scalar };

bool isColumnParallel(LinearRole role) {
  return role == LinearRole::wq || role == LinearRole::wk ||
         role == LinearRole::wv || role == LinearRole::w1 ||
         role == LinearRole::w3 || role == LinearRole::output;
}

RankedTensorType withDim(RankedTensorType type, int64_t dim, int64_t size) {
  SmallVector<int64_t> shape(type.getShape());
  shape[dim] = size;
  return type.clone(shape);
}

class Partition {
public:
  Partition(func::FuncOp func, int64_t tp, int64_t rank, bool lossParallel)
      : func(func), tp(tp), rank(rank), lossParallel(lossParallel),
        b(func.getContext()) {}

  LogicalResult run();

private:
  LogicalResult shardArguments();
  LogicalResult rewrite(Operation *op);
  /// The whole-sequence value of a sequence-sharded one (one all-gather per
  /// value, shared by its column-parallel consumers).
  Value gatherSequence(Value seq, StringRef group, Location loc);
  /// `value` gathered (or reduce-scattered, `sum`) along `dim` over tp: the
  /// dim moved to the front, flattened, the collective, and back.
  Value collectiveAlong(Value value, int64_t dim, bool scatter, StringRef group,
                        Location loc);
  /// The loss without loss parallel: each rank's tokens with the whole
  /// vocabulary, then the mean over tp.
  LogicalResult rewriteLoss(CrossEntropyOp ce);
  /// Loss parallel: the cross-entropy of every position on the rank's
  /// vocabulary slice, its row statistics all-reduced over tp.
  LogicalResult rewriteParallelLoss(CrossEntropyOp ce);
  /// The type of the loss's logits, the rank's vocabulary slice [B, S,
  /// V/tp] (either loss's input), or an error.
  FailureOr<RankedTensorType> localLogits(CrossEntropyOp ce);
  LogicalResult shardDim(Operation *op, Value v, int64_t dim);
  /// `arg` (a [vocab, ...] table: the embedding's or the
  /// output projection's) cut into tp slices of its rows, the last ones
  /// padded where tp does not divide the vocabulary. Returns the whole
  /// vocabulary and the padding.
  FailureOr<std::pair<int64_t, int64_t>> shardVocabulary(BlockArgument arg);
  /// The embedding over the rank's vocabulary slice (docs/tp.md, "The
  /// ends").
  void rewriteEmbedding(EmbeddingOp emb);
  LogicalResult expect(Operation *op, Value v, Layout layout, StringRef what);
  void setLayout(Value v, Layout l) { layouts[v] = l; }

  func::FuncOp func;
  int64_t tp, rank;
  bool lossParallel;
  /// The output projection's vocabulary (its whole dim 0), and the padding
  /// that makes it a multiple of tp.
  int64_t wholeVocab = 0, vocabPad = 0;
  /// The embedding table's whole vocabulary.
  int64_t tableVocab = 0;
  OpBuilder b;
  DenseMap<Value, Layout> layouts;
  DenseMap<Value, Value> gathered;
};
} // namespace

/// The shard of `v` along `dim`: that dim divided by tp, or an error.
LogicalResult Partition::shardDim(Operation *op, Value v, int64_t dim) {
  RankedTensorType type = tensorOf(v);
  if (type.getDimSize(dim) % tp != 0)
    return op->emitOpError("dim ")
           << dim << " of " << type << " does not divide by tp (" << tp << ")";
  v.setType(withDim(type, dim, type.getDimSize(dim) / tp));
  return success();
}

LogicalResult Partition::expect(Operation *op, Value v, Layout layout,
                                StringRef what) {
  auto it = layouts.find(v);
  if (it != layouts.end() && it->second == layout)
    return success();
  return op->emitOpError("kiln-tp-partition expects ")
         << what << " here (docs/tp.md)";
}

FailureOr<std::pair<int64_t, int64_t>>
Partition::shardVocabulary(BlockArgument arg) {
  RankedTensorType type = tensorOf(arg);
  int64_t vocab = type.getDimSize(0);
  int64_t slice = (vocab + tp - 1) / tp, pad = slice * tp - vocab;
  if (pad >= slice)
    return func.emitOpError("a vocabulary of ")
           << vocab << " padded for tp " << tp
           << " would leave a rank only padding";
  arg.setType(withDim(type, 0, slice));
  func.setArgAttr(arg.getArgNumber(), KilnDialect::kTpShardAttrName,
                  TpShardAttr::get(func.getContext(), 0, rank, pad));
  return std::make_pair(vocab, pad);
}

LogicalResult Partition::shardArguments() {
  Block &body = func.getBody().front();
  MLIRContext *ctx = func.getContext();
  for (BlockArgument arg : body.getArguments()) {
    unsigned i = arg.getArgNumber();
    auto input =
        func.getArgAttrOfType<StringAttr>(i, KilnDialect::kInputAttrName);
    if (input &&
        (input.getValue() == "tokens" || input.getValue() == "targets")) {
      // Sequence parallel starts at the embedding's input; the loss is
      // over the rank's tokens too.
      if (failed(shardDim(func, arg, 1)))
        return failure();
      func.setArgAttr(i, KilnDialect::kTpShardAttrName,
                      TpShardAttr::get(ctx, 1, rank));
      continue;
    }
    auto param =
        func.getArgAttrOfType<StringAttr>(i, KilnDialect::kParamAttrName);
    if (!param)
      continue;
    // A linear's weight is sharded by the linear's role, the embedding
    // table over the vocabulary like the output projection; any other
    // parameter (the norms) stays whole on every tp rank.
    LinearOp linear;
    bool table = false;
    for (Operation *user : arg.getUsers()) {
      if (auto l = dyn_cast<LinearOp>(user); l && l.getWeight() == arg)
        linear = l;
      if (auto e = dyn_cast<EmbeddingOp>(user); e && e.getTable() == arg)
        table = true;
    }
    if (!linear && table) {
      FailureOr<std::pair<int64_t, int64_t>> sliced = shardVocabulary(arg);
      if (failed(sliced))
        return failure();
      tableVocab = sliced->first;
      continue;
    }
    if (!linear)
      continue;
    if (!arg.hasOneUse())
      return func.emitOpError("parameter '")
             << param.getValue()
             << "' is a linear's weight and also used otherwise (tied "
                "embeddings?): kiln-tp-partition cannot shard it";
    int64_t dim = isColumnParallel(linear.getRole()) ? 0 : 1;
    if (linear.getRole() == LinearRole::output) {
      // The padding rows are masked out of the loss.
      FailureOr<std::pair<int64_t, int64_t>> sliced = shardVocabulary(arg);
      if (failed(sliced))
        return failure();
      std::tie(wholeVocab, vocabPad) = *sliced;
      continue;
    }
    if (failed(shardDim(func, arg, dim)))
      return failure();
    func.setArgAttr(i, KilnDialect::kTpShardAttrName,
                    TpShardAttr::get(ctx, dim, rank));
  }
  func.setFunctionType(
      FunctionType::get(ctx, body.getArgumentTypes(), func.getResultTypes()));
  return success();
}

Value Partition::collectiveAlong(Value value, int64_t dim, bool scatter,
                                 StringRef group, Location loc) {
  RankedTensorType type = tensorOf(value);
  int64_t rankOf = type.getRank();
  SmallVector<int64_t> perm = {dim};
  for (int64_t d = 0; d < rankOf; ++d)
    if (d != dim)
      perm.push_back(d);
  SmallVector<int64_t> inverse(rankOf);
  for (auto [i, p] : llvm::enumerate(perm))
    inverse[p] = i;
  SmallVector<int64_t> moved;
  for (int64_t p : perm)
    moved.push_back(type.getDimSize(p));
  auto movedType = type.clone(moved);

  Value front = value;
  if (dim != 0)
    front = TransposeOp::create(b, loc, movedType, value, perm);
  int64_t n = type.getNumElements();
  auto flatType = type.clone({n});
  Value flat = ReshapeOp::create(b, loc, flatType, front);

  auto axis = MeshAxisAttr::get(b.getContext(), MeshAxis::tp);
  Value done;
  int64_t outFront;
  if (scatter) {
    auto start = ReduceScatterStartOp::create(
        b, loc, type.clone({n / tp}), flat, axis, b.getI64IntegerAttr(tp),
        b.getStringAttr("sum"), b.getStringAttr(group));
    done = WaitOp::create(b, loc, start.getType(), start);
    outFront = moved[0] / tp;
  } else {
    auto start = AllGatherStartOp::create(b, loc, type.clone({n * tp}), flat,
                                          axis, b.getI64IntegerAttr(tp),
                                          b.getStringAttr(group));
    done = WaitOp::create(b, loc, start.getType(), start);
    outFront = moved[0] * tp;
  }
  auto outMoved = withDim(movedType, 0, outFront);
  Value back = ReshapeOp::create(b, loc, outMoved, done);
  if (dim == 0)
    return back;
  auto outType = withDim(type, dim, outFront);
  return TransposeOp::create(b, loc, outType, back, inverse);
}

Value Partition::gatherSequence(Value seq, StringRef group, Location loc) {
  Value &slot = gathered[seq];
  if (slot)
    return slot;
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointAfterValue(seq);
  slot = collectiveAlong(seq, 1, /*scatter=*/false, group, loc);
  setLayout(slot, Layout::Full);
  return slot;
}

void Partition::rewriteEmbedding(EmbeddingOp emb) {
  // Every rank's token ids in rank order, [tp, B, S/tp] flat; the rank
  // looks each up in its rows (zeros for ids outside them), and the
  // reduce-scatter (sum) along the same order hands each rank its own
  // positions [B, S/tp, D], summed over the ranks.
  Location loc = emb.getLoc();
  RankedTensorType tokens = tensorOf(emb.getTokens());
  RankedTensorType table = tensorOf(emb.getTable());
  RankedTensorType result = tensorOf(emb.getResult());
  int64_t n = tokens.getNumElements(), dim = table.getDimSize(1);
  auto axis = MeshAxisAttr::get(b.getContext(), MeshAxis::tp);
  auto ranks = b.getI64IntegerAttr(tp);
  StringAttr group = emb.getParamAttr();
  Value ids = ReshapeOp::create(b, loc, tokens.clone({n}), emb.getTokens());
  auto gather =
      AllGatherStartOp::create(b, loc, tokens.clone({n * tp}), ids, axis, ranks,
                               b.getStringAttr("tokens"));
  Value all = WaitOp::create(b, loc, gather.getType(), gather);
  Value rows = EmbeddingOp::create(
      b, loc, result.clone({n * tp, dim}), emb.getTable(), all,
      emb.getParamAttr(), b.getI64IntegerAttr(rank * table.getDimSize(0)),
      b.getI64IntegerAttr(tableVocab));
  Value flat = ReshapeOp::create(b, loc, result.clone({n * tp * dim}), rows);
  auto scatter =
      ReduceScatterStartOp::create(b, loc, result.clone({n * dim}), flat, axis,
                                   ranks, b.getStringAttr("sum"), group);
  Value mine = WaitOp::create(b, loc, scatter.getType(), scatter);
  SmallVector<int64_t> shape(tokens.getShape());
  shape.push_back(dim);
  Value h = ReshapeOp::create(b, loc, result.clone(shape), mine);
  emb.getResult().replaceAllUsesWith(h);
  emb.erase();
  setLayout(h, Layout::Seq);
}

LogicalResult Partition::rewrite(Operation *op) {
  b.setInsertionPoint(op);
  if (auto emb = dyn_cast<EmbeddingOp>(op)) {
    rewriteEmbedding(emb);
    return success();
  }
  if (auto norm = dyn_cast<RMSNormOp>(op)) {
    if (failed(expect(op, norm.getInput(), Layout::Seq,
                      "a sequence shard [B, S/tp, D]")))
      return failure();
    norm.getResult().setType(norm.getInput().getType());
    setLayout(norm.getResult(), Layout::Seq);
    return success();
  }
  if (isa<AddOp, MulOp>(op)) {
    Value lhs = op->getOperand(0), rhs = op->getOperand(1);
    auto it = layouts.find(lhs);
    if (it == layouts.end() ||
        (it->second != Layout::Seq && it->second != Layout::Local) ||
        failed(expect(op, rhs, it->second, "operands laid out alike")))
      return op->emitOpError("kiln-tp-partition expects both operands on the "
                             "sequence shard or both on the rank's columns");
    op->getResult(0).setType(lhs.getType());
    setLayout(op->getResult(0), it->second);
    return success();
  }
  if (auto linear = dyn_cast<LinearOp>(op)) {
    RankedTensorType weight = tensorOf(linear.getWeight());
    if (isColumnParallel(linear.getRole())) {
      if (failed(expect(op, linear.getInput(), Layout::Seq,
                        "the input of a column-parallel linear on a "
                        "sequence shard")))
        return failure();
      linear.getInputMutable().assign(
          gatherSequence(linear.getInput(), linear.getParam(), op->getLoc()));
      linear.getResult().setType(
          withDim(tensorOf(linear.getResult()), 2, weight.getDimSize(0)));
      setLayout(linear.getResult(), Layout::Local);
      return success();
    }
    // Row-parallel (o, w2): a partial sum of every position, reduced and
    // scattered back to the sequence shard.
    if (failed(expect(op, linear.getInput(), Layout::Local,
                      "the rank's columns as the input of a row-parallel "
                      "linear")))
      return failure();
    b.setInsertionPointAfter(op);
    Value seq = collectiveAlong(linear.getResult(), 1, /*scatter=*/true,
                                linear.getParam(), op->getLoc());
    // The scatter's chain starts right after the linear.
    linear.getResult().replaceAllUsesExcept(seq, op->getNextNode());
    setLayout(seq, Layout::Seq);
    return success();
  }
  if (auto reshape = dyn_cast<ReshapeOp>(op)) {
    if (failed(expect(op, reshape.getInput(), Layout::Local,
                      "the rank's heads or columns")))
      return failure();
    if (failed(shardDim(op, reshape.getResult(), 2)))
      return failure();
    setLayout(reshape.getResult(), Layout::Local);
    return success();
  }
  if (isa<RopeOp, SiluOp>(op)) {
    if (failed(expect(op, op->getOperand(0), Layout::Local,
                      "the rank's heads or columns")))
      return failure();
    op->getResult(0).setType(op->getOperand(0).getType());
    setLayout(op->getResult(0), Layout::Local);
    return success();
  }
  if (auto attn = dyn_cast<AttentionOp>(op)) {
    for (Value v : op->getOperands())
      if (failed(expect(op, v, Layout::Local, "the rank's heads")))
        return failure();
    attn.getResult().setType(attn.getQuery().getType());
    // The logsumexp is [B, H, S]: the rank's heads are dim 1.
    if (failed(shardDim(op, attn.getLogsumexp(), 1)))
      return failure();
    setLayout(attn.getResult(), Layout::Local);
    setLayout(attn.getLogsumexp(), Layout::Local);
    return success();
  }
  if (auto ce = dyn_cast<CrossEntropyOp>(op))
    return lossParallel ? rewriteParallelLoss(ce) : rewriteLoss(ce);
  // Pipeline stages pass the residual stream on as each rank's sequence
  // shard, to the rank of the same tp position (docs/pp.md); a rank
  // without the last stage returns a loss of 0.
  if (auto recv = dyn_cast<PipeRecvOp>(op)) {
    if (failed(shardDim(op, recv.getResult(), 1)))
      return failure();
    setLayout(recv.getResult(), Layout::Seq);
    return success();
  }
  if (auto send = dyn_cast<PipeSendOp>(op))
    return expect(op, send.getInput(), Layout::Seq,
                  "a sequence shard [B, S/tp, D]");
  if (auto cst = dyn_cast<arith::ConstantOp>(op);
      cst && cast<RankedTensorType>(cst.getType()).getRank() == 0) {
    setLayout(cst.getResult(), Layout::Scalar);
    return success();
  }
  return op->emitOpError("kiln-tp-partition does not know how to partition "
                         "this op (docs/tp.md)");
}

FailureOr<RankedTensorType> Partition::localLogits(CrossEntropyOp ce) {
  if (failed(expect(ce, ce.getLogits(), Layout::Local,
                    "the rank's vocabulary slice of the logits")))
    return failure();
  RankedTensorType local = tensorOf(ce.getLogits());
  if (local.getRank() != 3)
    return ce.emitOpError("kiln-tp-partition expects logits [B, S, V]");
  return local;
}

LogicalResult Partition::rewriteLoss(CrossEntropyOp ce) {
  Operation *op = ce;
  Location loc = op->getLoc();
  FailureOr<RankedTensorType> sliced = localLogits(ce);
  if (failed(sliced))
    return failure();
  RankedTensorType local = *sliced; // [B, S, V/tp]
  int64_t batch = local.getDimSize(0), seq = local.getDimSize(1),
          vocab = local.getDimSize(2), part = seq / tp * batch * vocab;
  auto type = [&](ArrayRef<int64_t> shape) { return local.clone(shape); };
  // From [B, S, V/tp] on every rank to [B, S/tp, V] (all-to-all as a
  // reduce-scatter of zero-padded buffers): the rank's logits as [S, B,
  // V/tp], i.e. tp sequence chunks of `part` elements, placed at slot
  // `rank` of a zero buffer [tp (vocab slice), tp (sequence chunk), part];
  // transposed to [sequence chunk, vocab slice, part], the reduce-scatter
  // (sum) hands rank j chunk j of every rank's vocabulary slice.
  Value t = TransposeOp::create(b, loc, type({seq, batch, vocab}),
                                ce.getLogits(), ArrayRef<int64_t>{1, 0, 2});
  Value flat = ReshapeOp::create(b, loc, type({tp * part}), t);
  Value padded =
      FlattenOp::create(b, loc, type({tp * tp * part}), ValueRange{flat},
                        b.getDenseI64ArrayAttr({rank * tp * part}));
  Value grid = ReshapeOp::create(b, loc, type({tp, tp, part}), padded);
  Value bySeq = TransposeOp::create(b, loc, type({tp, tp, part}), grid,
                                    ArrayRef<int64_t>{1, 0, 2});
  Value send = ReshapeOp::create(b, loc, type({tp * tp * part}), bySeq);
  auto axis = MeshAxisAttr::get(b.getContext(), MeshAxis::tp);
  auto scatter = ReduceScatterStartOp::create(
      b, loc, type({tp * part}), send, axis, b.getI64IntegerAttr(tp),
      b.getStringAttr("sum"), b.getStringAttr("logits"));
  Value mine = WaitOp::create(b, loc, scatter.getType(), scatter);
  Value blocks =
      ReshapeOp::create(b, loc, type({tp, seq / tp, batch, vocab}), mine);
  Value ordered =
      TransposeOp::create(b, loc, type({batch, seq / tp, tp, vocab}), blocks,
                          ArrayRef<int64_t>{2, 1, 0, 3});
  Value logits =
      ReshapeOp::create(b, loc, type({batch, seq / tp, tp * vocab}), ordered);
  if (vocabPad != 0) {
    // The padded vocabulary's last columns dropped: vocabulary-major, the
    // first wholeVocab rows of the flat buffer, and back. Their gradient
    // (flatten) is zero on the padding.
    int64_t rows = batch * seq / tp, padded = tp * vocab;
    Value byVocab = TransposeOp::create(b, loc, type({padded, batch, seq / tp}),
                                        logits, ArrayRef<int64_t>{2, 0, 1});
    Value flatVocab = ReshapeOp::create(b, loc, type({padded * rows}), byVocab);
    Value kept =
        UnflattenOp::create(b, loc, type({wholeVocab, batch, seq / tp}),
                            flatVocab, b.getI64IntegerAttr(0));
    logits = TransposeOp::create(b, loc, type({batch, seq / tp, wholeVocab}),
                                 kept, ArrayRef<int64_t>{1, 2, 0});
  }
  ce.getLogitsMutable().assign(logits);
  // The mean over the rank's tokens, then over tp (equal token counts): the
  // mean over all tokens. Its gradient rule divides by tp.
  b.setInsertionPointAfter(op);
  auto start = AllReduceStartOp::create(b, loc, ce.getResult(), axis,
                                        b.getI64IntegerAttr(tp),
                                        b.getStringAttr("mean"));
  Value loss = WaitOp::create(b, loc, start.getType(), start);
  ce.getResult().replaceAllUsesExcept(loss, start);
  setLayout(loss, Layout::Scalar);
  return success();
}

LogicalResult Partition::rewriteParallelLoss(CrossEntropyOp ce) {
  Operation *op = ce;
  Location loc = op->getLoc();
  FailureOr<RankedTensorType> sliced = localLogits(ce);
  if (failed(sliced))
    return failure();
  RankedTensorType local = *sliced; // [B, S, V/tp]
  int64_t slice = local.getDimSize(2);
  auto vocabStart = b.getI64IntegerAttr(rank * slice);
  auto vocabSize = b.getI64IntegerAttr(wholeVocab);
  auto rowsType = RankedTensorType::get(local.getShape().drop_back(),
                                        b.getF32Type()); // [B, S]
  auto axis = MeshAxisAttr::get(b.getContext(), MeshAxis::tp);
  auto allReduce = [&](Value v, StringRef reduction) -> Value {
    auto start = AllReduceStartOp::create(
        b, loc, v, axis, b.getI64IntegerAttr(tp), b.getStringAttr(reduction));
    return WaitOp::create(b, loc, start.getType(), start);
  };
  // Every position's target: the rank's sequence shard, as f32 (the
  // collectives move floats; ids below 2^24 are exact), gathered along the
  // sequence like the activations.
  RankedTensorType targets = tensorOf(ce.getTargets()); // [B, S/tp]
  Value ids = IndexToFloatOp::create(
      b, loc, RankedTensorType::get(targets.getShape(), b.getF32Type()),
      ce.getTargets());
  Value allIds = collectiveAlong(ids, 1, /*scatter=*/false, "targets", loc);
  Value max =
      allReduce(VocabParallelMaxOp::create(b, loc, rowsType, ce.getLogits(),
                                           vocabStart, vocabSize),
                "max");
  SmallVector<int64_t> statsShape(rowsType.getShape());
  statsShape.push_back(2);
  Value stats =
      allReduce(VocabParallelStatsOp::create(b, loc, rowsType.clone(statsShape),
                                             ce.getLogits(), max, allIds,
                                             vocabStart, vocabSize),
                "sum");
  // The same loss on every tp rank: the mean over all B x S tokens.
  Value loss = VocabParallelLossOp::create(b, loc, stats, max);
  ce.getResult().replaceAllUsesWith(loss);
  ce->erase();
  setLayout(loss, Layout::Scalar);
  return success();
}

LogicalResult Partition::run() {
  if (failed(shardArguments()))
    return failure();
  Block &body = func.getBody().front();
  SmallVector<Operation *> ops;
  for (Operation &op : body.without_terminator())
    ops.push_back(&op);
  for (Operation *op : ops)
    if (failed(rewrite(op)))
      return failure();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  if (failed(expect(ret, ret.getOperand(0), Layout::Scalar,
                    "the loss, all-reduced over tp")))
    return failure();
  return success();
}

namespace {
struct TpPartitionPass : kiln::impl::KilnTpPartitionBase<TpPartitionPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    MeshAttr mesh = getModuleMesh(module);
    if (!mesh || mesh.getTp() == 1)
      return;
    auto tpAttr =
        module->getAttrOfType<DictionaryAttr>(KilnDialect::kTpAttrName);
    auto rank = tpAttr ? tpAttr.getAs<IntegerAttr>("rank") : IntegerAttr();
    auto lossParallel =
        tpAttr ? tpAttr.getAs<BoolAttr>("loss_parallel") : BoolAttr();
    if (!rank || !lossParallel) {
      module.emitError("a module with tp > 1 needs '")
          << KilnDialect::kTpAttrName
          << "' = {rank = <position on the tp axis> : i64, loss_parallel = "
             "<bool>}";
      return signalPassFailure();
    }
    if (rank.getInt() < 0 || rank.getInt() >= mesh.getTp()) {
      module.emitError("kiln.tp's rank ")
          << rank.getInt() << " is not a position on the tp axis [0, "
          << mesh.getTp() << ")";
      return signalPassFailure();
    }
    auto forward = module.lookupSymbol<func::FuncOp>(kForwardLossFunc);
    if (!forward) {
      module.emitError("kiln-tp-partition needs a func.func @forward_loss");
      return signalPassFailure();
    }
    LLVM_DEBUG(llvm::dbgs() << DEBUG_TYPE ": rank " << rank.getInt() << " of "
                            << mesh.getTp() << "\n");
    if (failed(Partition(forward, mesh.getTp(), rank.getInt(),
                         lossParallel.getValue())
                   .run()))
      return signalPassFailure();
  }
};
} // namespace
