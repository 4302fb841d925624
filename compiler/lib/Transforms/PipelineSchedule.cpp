//===- PipelineSchedule.cpp - A rank's microbatches in schedule order -----===//
//
// Pipeline parallel (docs/pp.md, "The schedule pass"). After
// kiln-grad-accum has cloned the step once per microbatch and marked each
// clone with its microbatch, each entry's microbatch ops are split into
// units, the forward or the backward of one microbatch on one of the
// rank's stages:
//
// - Stage: ops of one microbatch that read one another form connected
//   groups, each holding one stage's forward and backward (stages meet
//   only through transfers); the group's pipe_send / pipe_recv name it.
// - Backward: what descends from the stage's gradient (a pipe_recv of a
//   gradient, or the loss backward on the last stage), and what only the
//   backward reads (recomputation, re-gathers); the rest is the forward.
//
// The units are then placed in the order PipelineOrder.h gives this rank.
// What runs once (hoisted ops, the sums of the microbatches' gradients,
// the optimizer) goes as early as its operands allow. Each transfer
// becomes a tagged start and a wait: a receive at the start of the unit
// that reads it, a send's start where its data is ready, and its wait
// before the first unit of this rank that the simulated timeline starts
// after the receiving unit has begun. Every blocking wait then waits for
// an event earlier in that timeline, so no two ranks wait on each other.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"
#include "kiln/Transforms/Passes.h"
#include "kiln/Transforms/PipelineOrder.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/EquivalenceClasses.h"
#include "llvm/Support/Debug.h"

#include <algorithm>
#include <map>

#define DEBUG_TYPE "kiln-pipeline-schedule"

namespace kiln {
#define GEN_PASS_DEF_KILNPIPELINESCHEDULE
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;
using pipeline::Unit;

namespace {

/// MPI guarantees tags up to 32767 (MPI_TAG_UB's least value).
constexpr int64_t kMaxTag = 32767;

using UnitKey = std::tuple<bool, int64_t, int64_t>; // backward, k, stage

UnitKey keyOf(const Unit &u) { return {u.backward, u.microbatch, u.stage}; }

class Scheduler {
public:
  Scheduler(func::FuncOp func, pipeline::Schedule schedule,
            pipeline::Shape shape, int64_t rank)
      : func(func), schedule(schedule), shape(shape), rank(rank),
        b(func.getContext()) {}

  LogicalResult run();

private:
  /// Each microbatch op's unit, from its connected group and its place
  /// before or after the stage's gradient.
  LogicalResult assignUnits();
  /// The op order: units in the schedule's order, what runs once as early
  /// as it can, transfers as starts and waits.
  LogicalResult order();
  /// Appends `op` to the new order, and first the ops that run once it
  /// reads; failure when it reads an op of a unit not yet placed.
  LogicalResult place(Operation *op);
  /// A transfer as a start and a wait (created at the terminator, placed
  /// by the caller). Returns the wait.
  WaitOp lower(Operation *transfer, int64_t microbatch);

  func::FuncOp func;
  pipeline::Schedule schedule;
  pipeline::Shape shape;
  int64_t rank;
  OpBuilder b;

  DenseMap<Operation *, int64_t> microbatchOf;
  DenseMap<Operation *, UnitKey> unitOf;
  std::map<UnitKey, SmallVector<Operation *>> units;
  SmallVector<Operation *> once;
  llvm::DenseSet<Operation *> placed;
  SmallVector<Operation *> newOrder;
};

LogicalResult Scheduler::assignUnits() {
  Block &body = func.getBody().front();
  // Microbatch clones nothing reads (the targets' rows on a stage without
  // the loss) are dropped.
  for (bool changed = true; changed;) {
    changed = false;
    for (Operation &op : llvm::make_early_inc_range(llvm::reverse(body)))
      if (op.hasAttr(KilnDialect::kMicrobatchAttrName) &&
          isOpTriviallyDead(&op)) {
        op.erase();
        changed = true;
      }
  }
  SmallVector<Operation *> ops;
  for (Operation &op : body.without_terminator()) {
    auto k = op.getAttrOfType<IntegerAttr>(KilnDialect::kMicrobatchAttrName);
    if (!k) {
      once.push_back(&op);
      continue;
    }
    microbatchOf[&op] = k.getInt();
    op.removeAttr(KilnDialect::kMicrobatchAttrName);
    ops.push_back(&op);
  }
  // Connected groups of one microbatch's ops.
  llvm::EquivalenceClasses<Operation *> groups;
  for (Operation *op : ops) {
    groups.insert(op);
    for (Value v : op->getOperands())
      if (Operation *def = v.getDefiningOp(); def && microbatchOf.count(def))
        groups.unionSets(op, def);
  }
  DenseMap<Operation *, int64_t> stageOfGroup;
  auto anchor = [&](Operation *op, int64_t stage) -> LogicalResult {
    Operation *leader = groups.getLeaderValue(op);
    auto [it, fresh] = stageOfGroup.try_emplace(leader, stage);
    if (!fresh && it->second != stage)
      return op->emitOpError("connects pipeline stages ")
             << it->second << " and " << stage
             << " within one microbatch; stages meet only through transfers";
    return success();
  };
  for (Operation *op : ops) {
    if (auto send = dyn_cast<PipeSendOp>(op))
      if (failed(anchor(op, send.getStage())))
        return failure();
    if (auto recv = dyn_cast<PipeRecvOp>(op))
      if (failed(anchor(op, recv.getStage())))
        return failure();
  }
  // The backward: what descends from a stage's gradient, then what only
  // the backward reads.
  llvm::DenseSet<Operation *> backward;
  for (Operation *op : ops) {
    auto recv = dyn_cast<PipeRecvOp>(op);
    bool root = (recv && recv.getDirection() == PipeDirection::gradient) ||
                isa<CrossEntropyGradOp, VocabParallelLossGradOp>(op);
    if (root || llvm::any_of(op->getOperands(), [&](Value v) {
          return backward.contains(v.getDefiningOp());
        }))
      backward.insert(op);
  }
  for (Operation *op : llvm::reverse(ops))
    if (!op->use_empty() && llvm::all_of(op->getUsers(), [&](Operation *u) {
          return backward.contains(u);
        }))
      backward.insert(op);
  for (Operation *op : ops) {
    auto it = stageOfGroup.find(groups.getLeaderValue(op));
    if (it == stageOfGroup.end())
      return op->emitOpError("belongs to no pipeline stage: nothing it is "
                             "connected to sends or receives");
    UnitKey key{backward.contains(op), microbatchOf.lookup(op), it->second};
    unitOf[op] = key;
    units[key].push_back(op);
  }
  return success();
}

WaitOp Scheduler::lower(Operation *transfer, int64_t k) {
  b.setInsertionPoint(func.getBody().front().getTerminator());
  Location loc = transfer->getLoc();
  int64_t pp = shape.pp;
  if (auto recv = dyn_cast<PipeRecvOp>(transfer)) {
    bool gradient = recv.getDirection() == PipeDirection::gradient;
    int64_t s = recv.getStage(), from = gradient ? s + 1 : s - 1;
    auto start = PipeRecvStartOp::create(
        b, loc, recv.getType(), b.getI64IntegerAttr(pp),
        b.getI64IntegerAttr(from % pp),
        b.getI64IntegerAttr(pipeline::transferTag(shape, k, s, gradient)));
    auto wait = WaitOp::create(b, loc, start.getType(), start);
    recv.getResult().replaceAllUsesWith(wait.getResult());
    return wait;
  }
  auto send = cast<PipeSendOp>(transfer);
  bool gradient = send.getDirection() == PipeDirection::gradient;
  int64_t to = gradient ? send.getStage() - 1 : send.getStage() + 1;
  auto start = PipeSendStartOp::create(
      b, loc, RankedTensorType::get({}, b.getF32Type()), send.getInput(),
      b.getI64IntegerAttr(pp), b.getI64IntegerAttr(to % pp),
      b.getI64IntegerAttr(pipeline::transferTag(shape, k, to, gradient)));
  return WaitOp::create(b, loc, start.getType(), start);
}

LogicalResult Scheduler::place(Operation *op) {
  if (placed.contains(op))
    return success();
  for (Value v : op->getOperands()) {
    Operation *def = v.getDefiningOp();
    if (!def || placed.contains(def))
      continue;
    if (unitOf.count(def))
      return op->emitOpError("reads ")
             << def->getName() << " of "
             << pipeline::describe({std::get<0>(unitOf[def]),
                                    std::get<1>(unitOf[def]),
                                    std::get<2>(unitOf[def])})
             << ", which the schedule runs later";
    if (failed(place(def)))
      return failure();
  }
  placed.insert(op);
  newOrder.push_back(op);
  return success();
}

LogicalResult Scheduler::order() {
  bool forwardOnly = llvm::none_of(
      units, [](const auto &entry) { return std::get<0>(entry.first); });
  std::vector<std::vector<Unit>> orders =
      pipeline::rankOrders(schedule, shape, forwardOnly);
  std::string error;
  std::optional<pipeline::Timeline> timeline =
      pipeline::simulate(orders, shape, {}, error);
  if (!timeline)
    return func.emitOpError("the pipeline schedule cannot run: ") << error;
  // Where each unit runs: rank and position.
  std::map<UnitKey, std::pair<int64_t, size_t>> where;
  for (size_t r = 0; r < orders.size(); ++r)
    for (size_t i = 0; i < orders[r].size(); ++i)
      where[keyOf(orders[r][i])] = {r, i};
  const std::vector<Unit> &mine = orders[rank];
  for (const auto &[key, ops] : units)
    if (!where.count(key) || where[key].first != rank)
      return ops.front()->emitOpError("is part of ")
             << pipeline::describe(
                    {std::get<0>(key), std::get<1>(key), std::get<2>(key)})
             << ", which the schedule does not run on pp rank " << rank;

  // A send's wait goes before the first unit of this rank that starts
  // after the receiving unit has begun (mine.size(): at the end).
  std::vector<SmallVector<Operation *>> waitsBefore(mine.size() + 1);
  auto flushOnce = [&]() -> LogicalResult {
    for (Operation *op : once)
      if (!placed.contains(op) && llvm::all_of(op->getOperands(), [&](Value v) {
            Operation *def = v.getDefiningOp();
            return !def || placed.contains(def);
          }))
        if (failed(place(op)))
          return failure();
    return success();
  };
  for (size_t i = 0; i < mine.size(); ++i) {
    if (failed(flushOnce()))
      return failure();
    for (Operation *wait : waitsBefore[i])
      if (failed(place(wait)))
        return failure();
    auto it = units.find(keyOf(mine[i]));
    if (it == units.end())
      continue;
    const Unit &unit = mine[i];
    SmallVector<Operation *> ops = it->second;
    // Receives first: the unit starts when its input is there.
    std::stable_partition(ops.begin(), ops.end(),
                          [](Operation *op) { return isa<PipeRecvOp>(op); });
    auto label = b.getStringAttr(pipeline::describe(unit));
    for (Operation *op : ops) {
      if (!isa<PipeRecvOp, PipeSendOp>(op)) {
        op->setAttr(KilnDialect::kUnitAttrName, label);
        if (failed(place(op)))
          return failure();
        continue;
      }
      WaitOp wait = lower(op, unit.microbatch);
      Operation *start = wait.getPending().getDefiningOp();
      if (failed(place(start)))
        return failure();
      if (isa<PipeRecvOp>(op)) {
        if (failed(place(wait)))
          return failure();
        op->erase();
        continue;
      }
      // The receiving unit and when it starts.
      Unit to = unit;
      to.stage += unit.backward ? -1 : 1;
      auto [toRank, toIndex] = where.at(keyOf(to));
      double begins = timeline->start[toRank][toIndex];
      size_t j = i + 1;
      while (j < mine.size() && timeline->start[rank][j] <= begins)
        ++j;
      waitsBefore[j].push_back(wait);
      op->erase();
    }
  }
  if (failed(flushOnce()))
    return failure();
  for (Operation *wait : waitsBefore[mine.size()])
    if (failed(place(wait)))
      return failure();
  for (Operation *op : once)
    if (failed(place(op)))
      return failure();
  Operation *terminator = func.getBody().front().getTerminator();
  for (Operation *op : newOrder)
    op->moveBefore(terminator);
  return success();
}

LogicalResult Scheduler::run() {
  if (failed(assignUnits()))
    return failure();
  if (units.empty())
    return success();
  return order();
}

struct PipelineSchedulePass
    : kiln::impl::KilnPipelineScheduleBase<PipelineSchedulePass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    MeshAttr mesh = getModuleMesh(module);
    if (!mesh || mesh.getPp() == 1)
      return;
    auto pp = module->getAttrOfType<DictionaryAttr>(KilnDialect::kPpAttrName);
    auto rank = pp ? pp.getAs<IntegerAttr>("rank") : IntegerAttr();
    auto stages = pp ? pp.getAs<IntegerAttr>("stages") : IntegerAttr();
    auto name = pp ? pp.getAs<StringAttr>("schedule") : StringAttr();
    std::optional<pipeline::Schedule> schedule =
        name ? pipeline::parseSchedule(name.str()) : std::nullopt;
    if (!rank || !stages || !schedule || rank.getInt() < 0 ||
        rank.getInt() >= mesh.getPp() || stages.getInt() % mesh.getPp() != 0) {
      module.emitError("a module with pp > 1 needs '")
          << KilnDialect::kPpAttrName
          << "' = {rank = <position on the pp axis>, stages = <a multiple of "
             "pp>, schedule = \"GPipe\" | \"1F1B\" | \"Interleaved1F1B\"}";
      return signalPassFailure();
    }
    auto count =
        module->getAttrOfType<IntegerAttr>(KilnDialect::kMicrobatchesAttrName);
    pipeline::Shape shape{mesh.getPp(), stages.getInt(),
                          count ? count.getInt() : 1};
    if (pipeline::maxTransferTag(shape) > kMaxTag) {
      module.emitError("pipeline parallel: ")
          << shape.microbatches << " microbatches x " << shape.stages
          << " stages need transfer tags up to "
          << pipeline::maxTransferTag(shape) << ", above MPI's least bound "
          << kMaxTag;
      return signalPassFailure();
    }
    for (auto func : module.getOps<func::FuncOp>())
      if (failed(Scheduler(func, *schedule, shape, rank.getInt()).run()))
        return signalPassFailure();
  }
};

} // namespace
