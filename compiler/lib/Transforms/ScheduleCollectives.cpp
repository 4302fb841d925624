//===- ScheduleCollectives.cpp - Collectives placed for overlap -----------===//
//
// Only moves ops, never changes what they compute. Every move keeps each
// operand defined before its user: a gradient buffer goes after the last of
// its parts, a wait before its first reader, a gather (whose operand is a
// cast of a block argument) anywhere before its wait, and the weight
// gradients beside an input gradient's reduce-scatter (ops it does not
// read, none with side effects but mesh collectives, whose per-axis order
// is kept) after it.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kiln/IR/KilnOps.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "kiln-schedule-collectives"

namespace kiln {
#define GEN_PASS_DEF_KILNSCHEDULECOLLECTIVES
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

/// Where each op of a block is, kept up to date as the pass moves ops. MLIR's
/// own order (isBeforeInBlock) is dropped by every move and rebuilt over the
/// whole block at the next query, which made this pass quadratic in the
/// layers. Here a moved op takes a position between its new neighbours';
/// when they leave no room (a wait after wait moved before the same op),
/// the ops around it are spread over a window twice as wide at each try
/// until it has room, so that no move walks the whole block.
class BlockOrder {
public:
  explicit BlockOrder(Block &block) : block(block) { renumber(); }

  bool isBefore(Operation *a, Operation *b) const {
    return position.lookup(a) < position.lookup(b);
  }
  void moveBefore(Operation *op, Operation *next) {
    op->moveBefore(next);
    place(op);
  }
  void moveAfter(Operation *op, Operation *previous) {
    op->moveAfter(previous);
    place(op);
  }

private:
  /// Between neighbours at first; a window is spread when each of its ops
  /// gets at least kRoom.
  static constexpr int64_t kStride = int64_t(1) << 32;
  static constexpr int64_t kRoom = int64_t(1) << 16;

  void place(Operation *op) {
    Operation *previous = op->getPrevNode(), *next = op->getNextNode();
    // At either end of the block there is always room.
    if (!previous || !next) {
      position[op] = previous ? position[previous] + kStride
                     : next   ? position[next] - kStride
                              : 0;
      return;
    }
    int64_t low = position[previous], high = position[next];
    if (high - low >= 2) {
      position[op] = low + (high - low) / 2;
      return;
    }
    // [first, last] around `op`, between `previous` and `next`.
    Operation *first = op, *last = op;
    int64_t count = 1;
    for (;;) {
      for (int64_t i = 0, grow = count; i < grow; ++i) {
        if (first->getPrevNode()) {
          first = first->getPrevNode();
          ++count;
        }
        if (last->getNextNode()) {
          last = last->getNextNode();
          ++count;
        }
      }
      previous = first->getPrevNode();
      next = last->getNextNode();
      if (!previous || !next)
        return renumber();
      low = position[previous];
      high = position[next];
      int64_t room = (high - low) / (count + 1);
      if (room < kRoom)
        continue;
      int64_t at = low;
      for (Operation *o = first;; o = o->getNextNode()) {
        position[o] = at += room;
        if (o == last)
          break;
      }
      return;
    }
  }
  void renumber() {
    int64_t at = 0;
    for (Operation &op : block)
      position[&op] = at += kStride;
  }

  Block &block;
  DenseMap<Operation *, int64_t> position;
};

/// The last op of `block` that defines one of `values` (null if all are
/// block arguments).
Operation *lastDefinition(const BlockOrder &order, Block &block,
                          ValueRange values) {
  Operation *last = nullptr;
  for (Value v : values)
    if (Operation *def = v.getDefiningOp();
        def && def->getBlock() == &block &&
        (!last || order.isBefore(last, def)))
      last = def;
  return last;
}

/// Moves `op` to just after `after`, or to the start of the block.
void placeAfter(BlockOrder &order, Operation *op, Operation *after) {
  if (after)
    order.moveAfter(op, after);
  else
    order.moveBefore(op, &op->getBlock()->front());
}

/// A gradient buffer as soon as its parts exist: single-use casts feeding
/// the flatten first, then the flatten and the reduce-scatter.
void reduceScatterEarly(BlockOrder &order, Block &block,
                        ReduceScatterStartOp start) {
  auto flat = start.getInput().getDefiningOp<FlattenOp>();
  if (!flat || !flat->hasOneUse())
    return;
  for (Value part : flat.getParts())
    if (auto cast = part.getDefiningOp<CastOp>(); cast && cast->hasOneUse())
      placeAfter(order, cast,
                 lastDefinition(order, block, cast->getOperands()));
  placeAfter(order, flat, lastDefinition(order, block, flat->getOperands()));
  order.moveAfter(start, flat);
}

/// The axis a mesh collective's start, or the wait of one, runs on.
std::optional<MeshAxis> collectiveAxis(Operation *op) {
  if (auto wait = dyn_cast<WaitOp>(op))
    op = wait.getPending().getDefiningOp();
  if (!op)
    return std::nullopt;
  if (auto gather = dyn_cast<AllGatherStartOp>(op))
    return gather.getAxis();
  if (auto scatter = dyn_cast<ReduceScatterStartOp>(op))
    return scatter.getAxis();
  if (auto reduce = dyn_cast<AllReduceStartOp>(op))
    return reduce.getAxis();
  return std::nullopt;
}

/// Whether `op` may go later, past ops it does not read: an op without
/// side effects, or a mesh collective's start or wait (each axis keeps its
/// issue order: scatterBeforeWeightGrads checks it). A pipeline transfer,
/// whose order the neighbour stage matches, never moves.
bool mayGoLater(Operation *op) {
  return isMemoryEffectFree(op) || collectiveAxis(op).has_value();
}

/// Whether `op` starts a collective over `axis` (an async TP ring step
/// included).
bool startsOn(Operation *op, MeshAxis axis) {
  if (auto ring = dyn_cast<SendRecvStartOp>(op))
    return ring.getAxis() == axis;
  return !isa<WaitOp>(op) && collectiveAxis(op) == axis;
}

/// An input gradient's reduce-scatter (sequence parallel's dual of the
/// gather before q/k/v or w1/w3, or before the output projection) started
/// before the weight gradients computed beside it. Its window runs from the
/// previous collective on its axis: there the ops it reads (its slice: the
/// input gradients' GEMMs and their sum) stay in order, and what follows
/// the last slice value another op of the window reads (the weight
/// gradients, their casts, FSDP's packing) goes after it, so those GEMMs
/// overlap it. Nothing moves unless the slice and the ops moved both hold
/// compute, nor where an op to move has side effects (a pipeline
/// transfer) or starts a collective on an axis the slice also starts one
/// on. Only what reads no slice value after that one moves, so no value
/// both read lives longer than the scatter's own inputs.
void scatterBeforeWeightGrads(BlockOrder &order, Block &block,
                              ReduceScatterStartOp start) {
  if (start.getInput().getDefiningOp<FlattenOp>())
    return; // a gradient buffer: reduceScatterEarly
  Operation *from = start->getPrevNode();
  while (from && !startsOn(from, start.getAxis()))
    from = from->getPrevNode();
  // The slice, walking back: an op is in it when it or the start reads one
  // of its results.
  DenseSet<Operation *> slice;
  bool sliceComputes = false;
  for (Operation *op = start->getPrevNode(); op != from;
       op = op->getPrevNode()) {
    if (llvm::any_of(op->getUsers(), [&](Operation *user) {
          Operation *at = block.findAncestorOpInBlock(*user);
          return at == start.getOperation() || slice.contains(at);
        })) {
      slice.insert(op);
      sliceComputes |= isModelCompute(op);
    }
  }
  if (!sliceComputes)
    return;
  Operation *first = from ? from->getNextNode() : &block.front();
  Operation *shared = nullptr;
  for (Operation *op = first; op != start; op = op->getNextNode()) {
    if (slice.contains(op))
      continue;
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp();
          def && slice.contains(def) &&
          (!shared || order.isBefore(shared, def)))
        shared = def;
  }
  SmallVector<Operation *> moved;
  bool movedComputes = false;
  // The axes the moved ops start collectives on, and the slice's: where
  // both start one on an axis, moving would change its issue order.
  SmallVector<MeshAxis> movedAxes, sliceAxes;
  for (Operation *op = shared ? shared->getNextNode() : first; op != start;
       op = op->getNextNode()) {
    std::optional<MeshAxis> starts =
        isa<WaitOp>(op) ? std::nullopt : collectiveAxis(op);
    if (slice.contains(op)) {
      if (starts)
        sliceAxes.push_back(*starts);
      continue;
    }
    if (!mayGoLater(op))
      return;
    if (starts)
      movedAxes.push_back(*starts);
    moved.push_back(op);
    movedComputes |= isModelCompute(op);
  }
  if (!movedComputes || llvm::any_of(movedAxes, [&](MeshAxis axis) {
        return llvm::is_contained(sliceAxes, axis);
      }))
    return;
  Operation *after = start;
  for (Operation *op : moved) {
    order.moveAfter(op, after);
    after = op;
  }
  LLVM_DEBUG(llvm::dbgs() << DEBUG_TYPE ": " << moved.size()
                          << " ops moved after the reduce-scatter at "
                          << start.getLoc() << "\n");
}

/// A wait just before the first op that reads its result.
void waitLate(BlockOrder &order, WaitOp wait) {
  Operation *first = nullptr;
  for (Operation *user : wait.getResult().getUsers())
    if (user->getBlock() == wait->getBlock() &&
        (!first || order.isBefore(user, first)))
      first = user;
  if (first)
    order.moveBefore(wait, first);
}

/// Whether compute lies between `from` and `to` (`from` first).
bool computeBetween(Operation *from, Operation *to) {
  for (Operation *op = from->getNextNode(); op && op != to;
       op = op->getNextNode())
    if (isModelCompute(op))
      return true;
  return false;
}

/// At most two layers' gradient buffers at a time: `previous`'s
/// reduce-scatter is waited for before `next`'s buffer is packed (a buffer
/// lives until its collective's wait), so unsharded gradients do not pile
/// up.
void boundReduceScatters(BlockOrder &order, ReduceScatterStartOp previous,
                         ReduceScatterStartOp next) {
  Operation *wait = *previous.getResult().getUsers().begin();
  auto flat = next.getInput().getDefiningOp<FlattenOp>();
  Operation *packed = flat ? flat.getOperation() : next.getOperation();
  // Never before `previous` itself (a buffer summed over a pipeline's
  // microbatches is ready before the previous group's reduce-scatter).
  if (!order.isBefore(packed, wait) || !order.isBefore(previous, packed))
    return;
  order.moveBefore(wait, packed);
  LLVM_DEBUG(llvm::dbgs() << DEBUG_TYPE ": the reduce-scatter wait at "
                          << wait->getLoc() << " moved before the packing at "
                          << packed->getLoc() << "\n");
}

/// boundReduceScatters over a block's reduce-scatters in order, a layer at
/// a time: those packed with no compute between them (one layer's
/// gradients in two buffers, as the FP8 all-gather groups them) are one
/// layer's and stay in flight together; each is waited for before the
/// first buffer packed after compute.
void boundAllReduceScatters(BlockOrder &order,
                            ArrayRef<ReduceScatterStartOp> scatters) {
  SmallVector<ReduceScatterStartOp> layer;
  for (ReduceScatterStartOp next : scatters) {
    auto flat = next.getInput().getDefiningOp<FlattenOp>();
    Operation *packed = flat ? flat.getOperation() : next.getOperation();
    if (!layer.empty() && order.isBefore(layer.back(), packed) &&
        computeBetween(layer.back(), packed)) {
      for (ReduceScatterStartOp previous : layer)
        boundReduceScatters(order, previous, next);
      layer.clear();
    }
    layer.push_back(next);
  }
}

/// Whether `shard` may move with its gather: a cast of a block argument,
/// read by nothing else.
bool movesWithGather(const BlockOrder &order, Operation *shard) {
  return isa<CastOp>(shard) && shard->hasOneUse() &&
         !lastDefinition(order, *shard->getBlock(), shard->getOperands());
}

/// Gather `next` right after `previous`'s wait, so that it runs during the
/// compute that reads `previous`. Where that wait leaves no compute before
/// `next`'s own (a norm weight gathered apart and read with the layer
/// before's output, then the layer's FP8 codes), `next` starts where
/// `previous` starts instead: both are in flight during the compute before.
/// Its shard moves with it when that is a cast of a block argument, and
/// stays where it is when it is defined before the new place (the FP8
/// all-gather quantizes every layer's shard at the step's start).
void prefetch(BlockOrder &order, AllGatherStartOp previous,
              AllGatherStartOp next) {
  Operation *anchor = *previous.getResult().getUsers().begin();
  Operation *nextWait = *next.getResult().getUsers().begin();
  if (order.isBefore(anchor, nextWait) && !computeBetween(anchor, nextWait))
    anchor = previous;
  Operation *shard = next.getShard().getDefiningOp();
  bool withShard = shard && !order.isBefore(shard, anchor);
  if (withShard && !movesWithGather(order, shard))
    return;
  if (!order.isBefore(anchor, next))
    return;
  order.moveAfter(next, anchor);
  if (withShard)
    order.moveBefore(shard, next);
  LLVM_DEBUG(llvm::dbgs() << DEBUG_TYPE ": the all-gather at " << next.getLoc()
                          << " prefetched after " << anchor->getLoc() << "\n");
}

/// `gather` ahead of the reduce-scatters started on its axis since the last
/// compute (GEMM, attention, embedding). An axis's collectives run in issue
/// order, and the next compute reads a gather while only the layer after
/// reads a reduce-scatter: queued behind one, a gather waits for all of it
/// (in the FP8 all-gather's backward, a layer's norm gather waited for the
/// whole reduce-scatter of the layer before). Its shard, if defined in
/// between, moves with it when movesWithGather, as in prefetch; otherwise
/// the gather stops below it.
void gatherBeforeScatters(BlockOrder &order, AllGatherStartOp gather) {
  Operation *shard = gather.getShard().getDefiningOp();
  Operation *first = nullptr;
  for (Operation *op = gather->getPrevNode(); op && !isModelCompute(op);
       op = op->getPrevNode()) {
    if (op == shard && !movesWithGather(order, shard))
      break;
    if (auto scatter = dyn_cast<ReduceScatterStartOp>(op);
        scatter && scatter.getAxis() == gather.getAxis())
      first = op;
  }
  if (!first)
    return;
  bool withShard = shard && order.isBefore(first, shard);
  order.moveBefore(gather, first);
  if (withShard)
    order.moveBefore(shard, gather);
  LLVM_DEBUG(llvm::dbgs() << DEBUG_TYPE ": the all-gather at "
                          << gather.getLoc() << " moved before the "
                          << "reduce-scatter at " << first->getLoc() << "\n");
}

struct ScheduleCollectivesPass
    : kiln::impl::KilnScheduleCollectivesBase<ScheduleCollectivesPass> {
  void runOnOperation() override {
    for (Block &block : getOperation().getBody()) {
      BlockOrder order(block);
      for (auto start : llvm::to_vector(block.getOps<ReduceScatterStartOp>()))
        scatterBeforeWeightGrads(order, block, start);
      for (auto start : llvm::to_vector(block.getOps<ReduceScatterStartOp>()))
        reduceScatterEarly(order, block, start);
      for (auto wait : llvm::to_vector(block.getOps<WaitOp>()))
        waitLate(order, wait);
      boundAllReduceScatters(
          order, llvm::to_vector(block.getOps<ReduceScatterStartOp>()));
      SmallVector<AllGatherStartOp> gathers =
          llvm::to_vector(block.getOps<AllGatherStartOp>());
      for (size_t i = 1; i < gathers.size(); ++i)
        prefetch(order, gathers[i - 1], gathers[i]);
      for (AllGatherStartOp gather : gathers)
        gatherBeforeScatters(order, gather);
    }
  }
};
} // namespace
