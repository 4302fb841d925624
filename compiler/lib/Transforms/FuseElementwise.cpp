//===- FuseElementwise.cpp - Elementwise and row-wise ops into groups -----===//
//
// Greedy and in program order. An op joins the group of one of its
// operands' producers, or of an earlier op reading one of its operands, if
// the group has its iteration space, nothing outside the group reads the
// group's values before the op, and no GEMM, attention or embedding lies
// between the group's last op and it (so a group never holds what it reads
// across the model's compute, or another microbatch). Each group is
// then built at the position of its last op: every value it reads is
// defined before that point (its ops read them where they were), and by the
// rule above every reader outside it comes after.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "kiln-fuse-elementwise"

namespace kiln {
#define GEN_PASS_DEF_KILNFUSEELEMENTWISE
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

struct Group {
  std::pair<int64_t, int64_t> space;
  SmallVector<Operation *> ops;
};

class Grouping {
public:
  void add(Operation *op);
  std::vector<std::unique_ptr<Group>> groups;

private:
  bool canJoin(Group &group, Operation *op);
  DenseMap<Operation *, Group *> groupOf;
};

/// `op` may join `group` if it reads no value the group makes only at its
/// end, and no op outside the group reads the group's values before `op`.
bool Grouping::canJoin(Group &group, Operation *op) {
  // A pipeline schedule's units (kiln-pipeline-schedule) stay apart.
  if (op->getAttr(KilnDialect::kUnitAttrName) !=
      group.ops.front()->getAttr(KilnDialect::kUnitAttrName))
    return false;
  for (Value operand : op->getOperands())
    if (auto r = dyn_cast<OpResult>(operand);
        r && groupOf.lookup(r.getOwner()) == &group && !readableInGroup(r))
      return false;
  // The group runs where its last op is, so what its earlier ops read lives
  // until then. It never grows past the model's compute (a GEMM, an
  // attention, an embedding: whole microbatches lie between two sums of
  // their gradients), which would hold those values across it; the small
  // ops between (casts, scales, FSDP's collectives and views) are passed.
  for (Operation *between = group.ops.back()->getNextNode(); between != op;
       between = between->getNextNode())
    if (isModelCompute(between))
      return false;
  for (Operation *member : group.ops)
    for (Operation *user : member->getUsers())
      if (user != op && groupOf.lookup(user) != &group &&
          user->isBeforeInBlock(op))
        return false;
  return true;
}

void Grouping::add(Operation *op) {
  std::optional<std::pair<int64_t, int64_t>> space = fusionSpace(op);
  if (!space)
    return;
  // Candidates: the groups of the ops that made the operands (the most
  // recent first: the likeliest to be legal), then those of earlier ops
  // reading the same operands (siblings: one pass reads the input once).
  SmallVector<Group *> candidates;
  for (Value operand : llvm::reverse(op->getOperands()))
    candidates.push_back(groupOf.lookup(operand.getDefiningOp()));
  for (Value operand : op->getOperands())
    for (Operation *user : operand.getUsers())
      if (user != op && user->getBlock() == op->getBlock() &&
          user->isBeforeInBlock(op))
        candidates.push_back(groupOf.lookup(user));
  for (Group *g : candidates)
    if (g && g->space == *space && canJoin(*g, op)) {
      g->ops.push_back(op);
      groupOf[op] = g;
      return;
    }
  groups.push_back(std::make_unique<Group>(Group{*space, {op}}));
  groupOf[op] = groups.back().get();
}

/// Moves the ops of `group` into a kiln.fused_group built before its last op.
void materialize(Group &group) {
  SmallPtrSet<Operation *, 8> members(group.ops.begin(), group.ops.end());
  llvm::SetVector<Value> inputs;
  SmallVector<Value> outputs;
  for (Operation *op : group.ops) {
    for (Value operand : op->getOperands())
      if (!members.contains(operand.getDefiningOp()))
        inputs.insert(operand);
    for (Value result : op->getResults())
      if (llvm::any_of(result.getUsers(), [&](Operation *user) {
            return !members.contains(user);
          }))
        outputs.push_back(result);
  }

  Operation *last = group.ops.back();
  OpBuilder b(last);
  auto fused = FusedGroupOp::create(
      b, FusedLoc::get(b.getContext(),
                       llvm::map_to_vector(group.ops,
                                           [](Operation *op) {
                                             return op->getLoc();
                                           })),
      ValueRange(outputs).getTypes(), inputs.getArrayRef());
  if (Attribute unit = last->getAttr(KilnDialect::kUnitAttrName))
    fused->setAttr(KilnDialect::kUnitAttrName, unit);
  Block *body = b.createBlock(&fused.getBody());
  IRMapping map;
  for (Value in : inputs)
    map.map(in, body->addArgument(in.getType(), in.getLoc()));
  for (Operation *op : group.ops)
    b.clone(*op, map);
  SmallVector<Value> yielded =
      llvm::map_to_vector(outputs, [&](Value v) { return map.lookup(v); });
  YieldOp::create(b, last->getLoc(), yielded);
  LLVM_DEBUG(llvm::dbgs() << DEBUG_TYPE ": a group of " << group.ops.size()
                          << " ops (" << inputs.size() << " inputs, "
                          << outputs.size() << " outputs) at "
                          << last->getLoc() << "\n");

  for (auto [old, now] : llvm::zip(outputs, fused.getResults()))
    old.replaceUsesWithIf(now, [&](OpOperand &use) {
      return !members.contains(use.getOwner());
    });
  for (Operation *op : llvm::reverse(group.ops))
    op->erase();
}

struct FuseElementwisePass
    : kiln::impl::KilnFuseElementwiseBase<FuseElementwisePass> {
  void runOnOperation() override {
    for (Block &block : getOperation().getBody()) {
      Grouping grouping;
      for (Operation &op : block)
        grouping.add(&op);
      // Reshapes alone stay ops: views of their operand's buffer
      // (ArenaStorage.h), where a group would copy.
      for (auto &group : grouping.groups)
        if (group->ops.size() > 1 &&
            !llvm::all_of(group->ops, llvm::IsaPred<ReshapeOp>))
          materialize(*group);
    }
  }
};
} // namespace
