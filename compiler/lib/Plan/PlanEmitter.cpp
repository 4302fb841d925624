//===- PlanEmitter.cpp - The module as the runtime's plan -----------------===//
//
// Every SSA value becomes an entry of one value table: persistent state
// (parameters, optimizer moments), an input fed per step (tokens, targets,
// step), a constant, or a buffer in the arena. Each function becomes a list
// of steps over value ids; arena offsets are what kiln-assign-buffers wrote,
// and AdamW writes its results over the state it read (checked: it must be
// the state's last reader). The plan is written as a stream: a value's or a
// step's JSON exists only while it is written (docs/perf.md, "Compile time
// and memory against n_layers").
//
//===----------------------------------------------------------------------===//

#include "kiln/Plan/PlanEmitter.h"
#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"
#include "kiln/Plan/GroupLowering.h"
#include "kiln/Transforms/ArenaStorage.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace kiln;
namespace json = llvm::json;

namespace {

FailureOr<StringRef> dtypeName(Operation *at, Type type) {
  Type e = cast<RankedTensorType>(type).getElementType();
  if (e.isF32())
    return StringRef("f32");
  if (e.isBF16())
    return StringRef("bf16");
  if (e.isF16())
    return StringRef("f16");
  if (e.isF64())
    return StringRef("f64");
  if (e.isInteger(32))
    return StringRef("i32");
  if (e.isInteger(64))
    return StringRef("i64");
  if (isa<Float8E4M3FNType>(e))
    return StringRef("f8e4m3");
  if (isa<Float8E5M2Type>(e))
    return StringRef("f8e5m2");
  return at->emitOpError("has a type the runtime does not know: ") << type;
}

int64_t byteSize(Type type) {
  auto t = cast<RankedTensorType>(type);
  return t.getNumElements() * (t.getElementTypeBitWidth() / 8);
}

FailureOr<json::Value> attrToJson(Operation *op, NamedAttribute attr) {
  Attribute a = attr.getValue();
  if (auto f = dyn_cast<FloatAttr>(a))
    return json::Value(f.getValueAsDouble());
  if (auto flag = dyn_cast<BoolAttr>(a))
    return json::Value(flag.getValue());
  if (auto i = dyn_cast<IntegerAttr>(a))
    return json::Value(i.getInt());
  if (auto s = dyn_cast<StringAttr>(a))
    return json::Value(s.getValue().str());
  if (isa<UnitAttr>(a))
    return json::Value(true);
  if (auto arr = dyn_cast<DenseI64ArrayAttr>(a))
    return json::Value(json::Array(arr.asArrayRef()));
  if (auto role = dyn_cast<LinearRoleAttr>(a))
    return json::Value(stringifyLinearRole(role.getValue()).str());
  if (auto axis = dyn_cast<MeshAxisAttr>(a))
    return json::Value(stringifyMeshAxis(axis.getValue()).str());
  return op->emitOpError("attribute '")
         << attr.getName() << "' cannot be written to the plan";
}

/// Whether the JSON the emitter wrote for an attribute has the type the plan
/// format gives it.
bool hasType(const json::Value &v, plan::AttrType type) {
  switch (type) {
  case plan::AttrType::Bool:
    return v.getAsBoolean().has_value();
  case plan::AttrType::Int:
    return v.getAsInteger().has_value();
  case plan::AttrType::Float:
    return v.getAsNumber().has_value();
  case plan::AttrType::String:
    return v.getAsString().has_value();
  case plan::AttrType::IntList:
    return v.getAsArray() &&
           llvm::all_of(*v.getAsArray(), [](const json::Value &e) {
             return e.getAsInteger().has_value();
           });
  }
  return false;
}

/// The attributes of a library op's step, as the plan format's table
/// (kiln/Runtime/Plan/Format.h) lists them: every one the op carries is in
/// the table with its type, every required one is there.
FailureOr<json::Object> stepAttributes(Operation *op, plan::Op kind) {
  json::Object attrs;
  for (NamedAttribute attr : op->getAttrDictionary()) {
    StringRef name = attr.getName().getValue();
    // Where the step's results are is in the value table, not its attrs.
    if (name == kArenaOffsetsAttr || name == kArenaSizesAttr)
      continue;
    // kiln-fp8-select's mark on a linear left in BF16 says why, for the
    // compiler's readers (IR dumps, `kiln explain --fp8`); the step runs the
    // same either way, so the plan does not carry it.
    if (auto linear = dyn_cast<LinearOp>(op);
        linear && attr.getName() == linear.getFp8AttrName())
      continue;
    FailureOr<json::Value> v = attrToJson(op, attr);
    if (failed(v))
      return failure();
    if (!name.starts_with(plan::kAnnotationPrefix.data())) {
      const plan::AttrSpec *spec = plan::findAttr(kind, name);
      if (!spec)
        return op->emitOpError("attribute '")
               << name << "' is not in the plan format's table for "
               << plan::name(kind);
      if (!hasType(*v, spec->type))
        return op->emitOpError("attribute '")
               << name << "' must be " << plan::attrTypeName(spec->type)
               << " in the plan";
    }
    attrs[name] = std::move(*v);
  }
  for (const plan::AttrSpec &spec : plan::kAttrs)
    if (spec.op == kind && spec.required && !attrs.get(spec.name))
      return op->emitOpError("lacks attribute '")
             << spec.name << "', which the plan format requires";
  return attrs;
}

/// "model.layers.0.self_attn.q_proj at model.toml:7:1", for messages.
std::string locString(Location loc) {
  std::string name;
  if (auto named = dyn_cast<NameLoc>(loc)) {
    name = named.getName().str() + " at ";
    loc = named.getChildLoc();
  }
  if (auto file = dyn_cast<FileLineColLoc>(loc))
    return name + llvm::formatv("{0}:{1}:{2}", file.getFilename().getValue(),
                                file.getLine(), file.getColumn())
                      .str();
  return name;
}

json::Object initToJson(InitAttr init) {
  json::Object o{{"kind", stringifyInitKind(init.getKind()).str()}};
  if (init.getKind() == InitKind::normal ||
      init.getKind() == InitKind::trunc_normal)
    o["std"] = init.getStd().convertToDouble();
  if (init.getKind() == InitKind::trunc_normal) {
    o["a"] = init.getLo().convertToDouble();
    o["b"] = init.getHi().convertToDouble();
  }
  return o;
}

/// A row of the value table, kept small until the plan is written: a step
/// keeps tens of values per layer, and an llvm::json object costs
/// kilobytes, so the table is written a row at a time from these.
struct ValueRow {
  StringRef kind; // "state", "input", "const" or "arena"
  StringRef name; // a state's or an input's
  ArrayRef<int64_t> shape;
  StringRef dtype;
  InitAttr init;       // a parameter's
  bool zeros = false;  // a state that starts at zero
  ArrayAttr shardOf;   // a flat shard's parts
  TpShardAttr tpShard; // a tensor-parallel slice's place in its whole
  double value = 0;    // a constant's
  int64_t offset = -1; // an arena buffer's
  int64_t viewOf = -1; // a view's buffer (ArenaStorage.h)
};

/// One entry point: its function (none for `init`), the value id of every
/// SSA value in it, and what its entry object says besides its steps.
struct EntryPoint {
  std::string name;
  func::FuncOp func;
  DenseMap<Value, int64_t> ids;
  json::Object outputs;
  std::optional<json::Object> liveAtPeak;
  int64_t arenaBytes = 0;
  int64_t liveAtLoss = 0; // kiln.live_at_loss, 0 without a loss gradient
  int64_t liveInBackward = 0; // kiln.live_in_backward, likewise
  /// false: kiln-assign-buffers only counted (place=false); no offsets.
  bool placed = true;
};

/// The plan in two passes: addFunction gives every value its id and every
/// arena buffer its offset; write then streams the plan, building each
/// step's and each value's JSON only while writing it, so the memory the
/// plan needs is its text, not a tree of JSON objects.
class PlanBuilder {
public:
  LogicalResult addFunction(func::FuncOp func, StringRef entry);
  /// Every entry point of `module` (@train_step and @forward_loss, which
  /// every plan has, and those of the functions it holds besides).
  LogicalResult addEntries(ModuleOp module);
  /// `ppIndex`: the plan's position on the mesh's pp axis.
  LogicalResult write(json::OStream &j, int64_t vocab, MeshAttr mesh,
                      int64_t ppIndex, json::Object training);
  /// The footprint of entry point `name` (added), or nothing.
  std::optional<PlanFootprint> footprint(StringRef name) const;
  /// planFootprint's: functions whose buffers kiln-assign-buffers counted
  /// without placing them (place=false) are read too, without offsets.
  bool readUnplaced = false;

private:
  int64_t addValue(ValueRow row) {
    values.push_back(std::move(row));
    return values.size() - 1;
  }
  FailureOr<int64_t> named(Operation *at, StringRef kind, StringRef name,
                           Type type, InitAttr init = {}, bool zeros = false,
                           ArrayAttr shardOf = {}, TpShardAttr tpShard = {});
  FailureOr<json::Object> step(const EntryPoint &entry, Operation &op);
  json::Object valueJson(int64_t id) const;
  LogicalResult writeEntry(json::OStream &j, const EntryPoint &entry);

  std::vector<ValueRow> values;
  llvm::StringMap<int64_t> byName; // "state:<name>" / "input:<name>"
  std::vector<std::unique_ptr<EntryPoint>> entries;
  int64_t arenaBytes = 0;
  int64_t stateBytes = 0;
};
} // namespace

FailureOr<int64_t> PlanBuilder::named(Operation *at, StringRef kind,
                                      StringRef name, Type type, InitAttr init,
                                      bool zeros, ArrayAttr shardOf,
                                      TpShardAttr tpShard) {
  std::string key = (kind + ":" + name).str();
  if (auto it = byName.find(key); it != byName.end())
    return it->second;
  FailureOr<StringRef> dtype = dtypeName(at, type);
  if (failed(dtype))
    return failure();
  if (kind == "state")
    stateBytes += byteSize(type);
  int64_t id = addValue({kind == "state" ? "state" : "input", name,
                         cast<RankedTensorType>(type).getShape(), *dtype, init,
                         zeros, shardOf, tpShard});
  byName[key] = id;
  return id;
}

/// `{"dim": d, "index": r}`: the slice r of the mesh's tp equal slices of
/// the whole tensor along d (docs/plan.md), and `"pad": p` when the whole
/// tensor is p entries short of tp slices along d.
json::Object tpShardJson(TpShardAttr slice) {
  json::Object out{{"dim", slice.getDim()}, {"index", slice.getIndex()}};
  if (slice.getPad() != 0)
    out["pad"] = slice.getPad();
  return out;
}

json::Object PlanBuilder::valueJson(int64_t id) const {
  const ValueRow &row = values[id];
  json::Object entry{{"kind", row.kind.str()},
                     {"id", id},
                     {"shape", json::Array(row.shape)},
                     {"dtype", row.dtype.str()}};
  if (row.kind == "state" || row.kind == "input")
    entry["name"] = row.name.str();
  if (row.init)
    entry["init"] = initToJson(row.init);
  else if (row.zeros)
    entry["init"] = json::Object{{"kind", "zeros"}};
  if (row.shardOf) {
    // A flat shard: what each part of the whole flat buffer holds.
    json::Array parts;
    for (auto part : row.shardOf.getAsRange<DictionaryAttr>()) {
      json::Object o{
          {"name", part.getAs<StringAttr>("name").getValue().str()},
          {"offset", part.getAs<IntegerAttr>("offset").getInt()},
          {"shape",
           json::Array(part.getAs<DenseI64ArrayAttr>("shape").asArrayRef())},
          {"init", initToJson(part.getAs<InitAttr>("init"))}};
      if (auto slice = part.getAs<TpShardAttr>("tp_shard"))
        o["tp_shard"] = tpShardJson(slice);
      parts.push_back(std::move(o));
    }
    entry["shard_of"] = std::move(parts);
  }
  if (row.tpShard)
    entry["tp_shard"] = tpShardJson(row.tpShard);
  if (row.kind == "const")
    entry["value"] = row.value;
  if (row.offset >= 0)
    entry["offset"] = row.offset;
  if (row.viewOf >= 0)
    entry["view_of"] = row.viewOf;
  return entry;
}

LogicalResult PlanBuilder::addFunction(func::FuncOp func, StringRef name) {
  entries.push_back(std::make_unique<EntryPoint>());
  EntryPoint &entry = *entries.back();
  entry.name = name.str();
  entry.func = func;
  DenseMap<Value, int64_t> &ids = entry.ids;
  Block &body = func.getBody().front();
  DenseMap<Operation *, int64_t> index;
  int64_t n = 0;
  for (Operation &op : body)
    index[&op] = n++;

  for (BlockArgument arg : body.getArguments()) {
    unsigned i = arg.getArgNumber();
    FailureOr<int64_t> id = failure();
    auto slice =
        func.getArgAttrOfType<TpShardAttr>(i, KilnDialect::kTpShardAttrName);
    if (auto p = func.getArgAttrOfType<StringAttr>(i, KilnDialect::kParamAttrName))
      id = named(func, "state", p.getValue(), arg.getType(),
                 func.getArgAttrOfType<InitAttr>(i, KilnDialect::kInitAttrName),
                 /*zeros=*/false, ArrayAttr(), slice);
    else if (auto s = func.getArgAttrOfType<StringAttr>(
                 i, KilnDialect::kStateAttrName))
      id = named(
          func, "state", s.getValue(), arg.getType(), InitAttr(),
          /*zeros=*/true,
          func.getArgAttrOfType<ArrayAttr>(i, KilnDialect::kShardOfAttrName),
          slice);
    else if (auto in = func.getArgAttrOfType<StringAttr>(
                 i, KilnDialect::kInputAttrName))
      id = named(func, "input", in.getValue(), arg.getType(), InitAttr(),
                 /*zeros=*/false, ArrayAttr(), slice);
    else
      return func.emitOpError("argument ")
             << i << " is neither a parameter, a state nor an input";
    if (failed(id))
      return failure();
    ids[arg] = *id;
  }

  // Arena buffers: their offsets, the arena's size and what is live at its
  // peak are kiln-assign-buffers' (the last pass of the schedule phase).
  auto arena = func->getAttrOfType<IntegerAttr>(kArenaBytesAttr);
  auto atPeak = func->getAttrOfType<DictionaryAttr>(kLiveAtPeakAttr);
  entry.placed = arena != nullptr;
  if (!atPeak || (!arena && !readUnplaced))
    return func.emitOpError("has no arena: run kiln-assign-buffers before "
                            "emitting the plan");
  json::Object liveAtPeak;
  for (NamedAttribute part : atPeak) {
    auto bytes = dyn_cast<IntegerAttr>(part.getValue());
    if (!bytes)
      return func.emitOpError("'")
             << kLiveAtPeakAttr << "' must hold integers";
    liveAtPeak[part.getName().getValue()] = bytes.getInt();
  }
  entry.liveAtPeak = std::move(liveAtPeak);
  entry.arenaBytes = arena ? arena.getInt() : 0;
  if (auto atLoss = func->getAttrOfType<IntegerAttr>(kLiveAtLossAttr))
    entry.liveAtLoss = atLoss.getInt();
  if (auto inBackward = func->getAttrOfType<IntegerAttr>(kLiveInBackwardAttr))
    entry.liveInBackward = inBackward.getInt();
  arenaBytes = std::max(arenaBytes, entry.arenaBytes);

  for (Operation &op : body.without_terminator()) {
    if (auto cst = dyn_cast<arith::ConstantOp>(op)) {
      auto dense = dyn_cast<DenseFPElementsAttr>(cst.getValue());
      if (!dense || !dense.isSplat() ||
          cast<RankedTensorType>(cst.getType()).getRank() != 0)
        return op.emitOpError("only scalar float constants reach the plan");
      ValueRow row{"const", "", {}, "f32"};
      row.value = dense.getSplatValue<APFloat>().convertToDouble();
      ids[cst] = addValue(std::move(row));
      continue;
    }
    if (op.getDialect() != func->getContext()->getLoadedDialect<KilnDialect>())
      return op.emitOpError("cannot be lowered to the plan");

    auto adamw = dyn_cast<AdamWOp>(op);
    if (auto wait = dyn_cast<WaitOp>(op)) {
      ids[wait.getResult()] = ids.lookup(wait.getPending());
      continue;
    }
    if (isArenaView(&op)) {
      // Its operand's bytes under its own shape; no step writes it.
      Value result = op.getResult(0);
      int64_t of = ids.lookup(arenaStorage(result));
      FailureOr<StringRef> dtype = dtypeName(&op, result.getType());
      if (failed(dtype))
        return failure();
      ValueRow row{"arena", "",
                   cast<RankedTensorType>(result.getType()).getShape(), *dtype};
      row.offset = values[of].offset;
      row.viewOf = of;
      ids[result] = addValue(std::move(row));
      continue;
    }
    for (OpResult r : op.getResults()) {
      // AdamW overwrites the state it reads (its three results alias the
      // param, exp_avg and exp_avg_sq operands), and so does the delayed
      // FP8 recipe's amax_history_update (its history).
      Value in;
      if (adamw)
        in = op.getOperand(r.getResultNumber() == 0   ? 0
                           : r.getResultNumber() == 1 ? 2
                                                      : 3);
      else if (auto update = dyn_cast<AmaxHistoryUpdateOp>(op))
        in = update.getHistory();
      if (in) {
        bool lastReader = llvm::all_of(in.getUsers(), [&](Operation *user) {
          return index.lookup(user) <= index.lookup(&op);
        });
        if (!isa<BlockArgument>(in) || !lastReader)
          return op.emitOpError("cannot update its state in place: it is not "
                                "the state's last reader");
        ids[r] = ids.lookup(in);
        continue;
      }
      FailureOr<StringRef> dtype = dtypeName(&op, r.getType());
      if (failed(dtype))
        return failure();
      auto offsets = op.getAttrOfType<DenseI64ArrayAttr>(kArenaOffsetsAttr);
      if (!entry.placed) {
        ids[r] = addValue(
            ValueRow{"arena", "",
                     cast<RankedTensorType>(r.getType()).getShape(), *dtype});
        continue;
      }
      if (!offsets || offsets.size() != int64_t(op.getNumResults()) ||
          offsets[r.getResultNumber()] < 0)
        return op.emitOpError("has no arena offset for result ")
               << r.getResultNumber()
               << ": run kiln-assign-buffers before emitting the plan";
      ValueRow row{"arena", "", cast<RankedTensorType>(r.getType()).getShape(),
                   *dtype};
      row.offset = offsets[r.getResultNumber()];
      ids[r] = addValue(std::move(row));
    }
  }

  auto ret = cast<func::ReturnOp>(body.getTerminator());
  for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
    if (auto out = func.getResultAttrOfType<StringAttr>(
            i, KilnDialect::kOutputAttrName))
      entry.outputs[out.getValue()] = ids.lookup(v);
    else if (auto st = func.getResultAttrOfType<StringAttr>(
                 i, KilnDialect::kStateAttrName)) {
      if (ids.lookup(v) != byName.lookup(("state:" + st.getValue()).str()))
        return func.emitOpError("result ")
               << i << " updates state '" << st.getValue()
               << "' but is not written in place";
    } else if (auto grad = func.getResultAttrOfType<StringAttr>(
                   i, KilnDialect::kGradAttrName)) {
      entry.outputs[("grad:" + grad.getValue()).str()] = ids.lookup(v);
    } else if (i == 0) {
      entry.outputs["loss"] = ids.lookup(v);
    } else {
      return func.emitOpError("result ") << i << " has no kiln.output or "
                                         << "kiln.state name";
    }
  }
  return success();
}

FailureOr<json::Object> PlanBuilder::step(const EntryPoint &entry,
                                          Operation &op) {
  const DenseMap<Value, int64_t> &ids = entry.ids;
  json::Array operands, results;
  for (Value v : op.getOperands())
    operands.push_back(ids.lookup(v));
  for (Value r : op.getResults())
    results.push_back(ids.lookup(r));
  // Fused groups, and lone fusible ops as groups of one op.
  std::optional<json::Object> group;
  std::string groupOps;
  Location loc = op.getLoc();
  if (auto fused = dyn_cast<FusedGroupOp>(op)) {
    Block &groupBody = fused.getBody().front();
    SmallVector<Operation *> members = llvm::map_to_vector(
        groupBody.without_terminator(), [](Operation &m) { return &m; });
    FailureOr<json::Object> lowered = lowerToGroup(
        members, SmallVector<Value>(groupBody.getArguments()),
        SmallVector<Value>(groupBody.getTerminator()->getOperands()),
        fused.getIterationSpace());
    if (failed(lowered))
      return failure();
    group = std::move(*lowered);
    for (Operation *m : members)
      groupOps +=
          (groupOps.empty() ? "" : ", ") + m->getName().stripDialect().str();
    loc = members.back()->getLoc();
  } else if (auto space = fusionSpace(&op)) {
    FailureOr<json::Object> lowered =
        lowerToGroup({&op}, SmallVector<Value>(op.getOperands()),
                     SmallVector<Value>(op.getResults()), *space);
    if (failed(lowered))
      return failure();
    group = std::move(*lowered);
    groupOps = op.getName().stripDialect().str();
  }
  json::Object step{{"operands", std::move(operands)},
                    {"results", std::move(results)},
                    {"loc", locString(loc)}};
  if (group) {
    step["op"] = "fused";
    step["attrs"] = json::Object{{"ops", groupOps}};
    if (auto unit = op.getAttrOfType<StringAttr>(KilnDialect::kUnitAttrName))
      step["attrs"].getAsObject()->try_emplace(KilnDialect::kUnitAttrName,
                                               unit.str());
    step["group"] = std::move(*group);
    return step;
  }
  std::string name = op.getName().stripDialect().str();
  const plan::OpInfo *info = plan::findOp(name);
  if (!info || (info->category != plan::Category::Library &&
                info->category != plan::Category::ShardCast &&
                info->category != plan::Category::Collective &&
                info->category != plan::Category::Wait))
    return op.emitOpError("is not a step of the plan format "
                          "(kiln/Runtime/Plan/Format.h)");
  FailureOr<json::Object> attrs = stepAttributes(&op, info->op);
  if (failed(attrs))
    return failure();
  step["op"] = std::move(name);
  step["attrs"] = std::move(*attrs);
  return step;
}

// The writers below give each object's keys in sorted order, as llvm::json
// prints a json::Object, so the plan's text is what printing the whole tree
// would give.

LogicalResult PlanBuilder::writeEntry(json::OStream &j,
                                      const EntryPoint &entry) {
  bool ok = true;
  j.object([&] {
    j.attribute("arena_bytes", entry.arenaBytes);
    if (entry.liveAtPeak)
      j.attribute("live_at_peak", json::Object(*entry.liveAtPeak));
    j.attribute("outputs", json::Object(entry.outputs));
    j.attributeArray("steps", [&] {
      if (!entry.func) {
        // `init`: every state value from the seed, as its `init` says.
        int64_t seed = values.size() - 1;
        for (auto [id, row] : llvm::enumerate(values))
          if (row.kind == "state")
            j.value(json::Object{{"op", plan::name(plan::Op::Init)},
                                 {"operands", json::Array{seed}},
                                 {"results", json::Array{int64_t(id)}},
                                 {"attrs", json::Object()},
                                 {"loc", ""}});
        return;
      }
      func::FuncOp func = entry.func;
      for (Operation &op : func.getBody().front().without_terminator()) {
        if (!ok)
          return;
        if (isa<arith::ConstantOp>(op) || isArenaView(&op))
          continue;
        FailureOr<json::Object> s = step(entry, op);
        if (failed(s)) {
          ok = false;
          return;
        }
        j.value(std::move(*s));
      }
    });
  });
  return success(ok);
}

LogicalResult PlanBuilder::write(json::OStream &j, int64_t vocab, MeshAttr mesh,
                                 int64_t ppIndex, json::Object training) {
  addValue({"input", "seed", {}, "i64"});
  entries.push_back(std::make_unique<EntryPoint>());
  entries.back()->name = "init";
  entries.back()->outputs = json::Object();
  std::vector<const EntryPoint *> sorted;
  for (const auto &entry : entries)
    sorted.push_back(entry.get());
  llvm::sort(sorted, [](const EntryPoint *a, const EntryPoint *b) {
    return StringRef(a->name) < StringRef(b->name);
  });

  bool ok = true;
  j.object([&] {
    j.attribute("arena_bytes", arenaBytes);
    j.attributeObject("entries", [&] {
      for (const EntryPoint *entry : sorted) {
        if (!ok)
          return;
        j.attributeBegin(entry->name);
        ok = succeeded(writeEntry(j, *entry));
        j.attributeEnd();
      }
    });
    j.attribute("format", "kiln-plan");
    j.attributeObject("mesh", [&] {
      j.attribute("dp_shard", mesh ? mesh.getDpShard() : 1);
      if (mesh && mesh.getPp() > 1) {
        j.attribute("pp", mesh.getPp());
        j.attribute("pp_index", ppIndex);
      }
      j.attribute("tp", mesh ? mesh.getTp() : 1);
    });
    j.attribute("ranks", mesh ? mesh.getRanks() : 1);
    j.attribute("state_bytes", stateBytes);
    j.attribute("training", std::move(training));
    j.attributeArray("values", [&] {
      for (int64_t id = 0, e = values.size(); ok && id < e; ++id)
        j.value(valueJson(id));
    });
    j.attribute("version", plan::kVersion);
    j.attribute("vocab_size", vocab);
  });
  return success(ok);
}

LogicalResult PlanBuilder::addEntries(ModuleOp module) {
  auto train = module.lookupSymbol<func::FuncOp>(kTrainStepFunc);
  auto eval = module.lookupSymbol<func::FuncOp>(kForwardLossFunc);
  if (!train || !eval)
    return module.emitError("the plan needs @train_step and @forward_loss");
  if (failed(addFunction(train, "train_step")) ||
      failed(addFunction(eval, "eval_loss")))
    return failure();
  // The entry points a plan may hold besides, by their functions.
  std::pair<StringRef, StringRef> optional[] = {
      {kLossAndGradsFunc, "loss_and_grads"},
      {kForwardLogitsFunc, "logits"},
      {kFp8CalibrationFunc, "fp8_calibration"}};
  for (auto [func, name] : optional)
    if (auto f = module.lookupSymbol<func::FuncOp>(func))
      if (failed(addFunction(f, name)))
        return failure();
  return success();
}

std::optional<PlanFootprint> PlanBuilder::footprint(StringRef name) const {
  for (const auto &entry : entries) {
    if (entry->name != name)
      continue;
    PlanFootprint out;
    out.stateBytes = stateBytes;
    out.arenaBytes = entry->arenaBytes;
    out.placed = entry->placed;
    // kiln.live_at_peak's byte counts (all but the step's index).
    if (entry->liveAtPeak)
      for (const auto &[key, bytes] : *entry->liveAtPeak)
        if (key != "peak_step")
          out.liveBytes += *bytes.getAsInteger();
    out.lossLiveBytes = entry->liveAtLoss;
    out.backwardLiveBytes = entry->liveInBackward;
    // Unplaced, the least any placement needs.
    if (!out.placed)
      out.arenaBytes = out.liveBytes;
    return out;
  }
  return std::nullopt;
}

FailureOr<PlanFootprint> kiln::planFootprint(ModuleOp module, StringRef entry) {
  PlanBuilder builder;
  builder.readUnplaced = true;
  if (failed(builder.addEntries(module)))
    return failure();
  std::optional<PlanFootprint> out = builder.footprint(entry);
  if (!out)
    return module.emitError("the plan has no entry point '") << entry << "'";
  return *out;
}

LogicalResult kiln::emitPlan(ModuleOp module, llvm::raw_ostream &os,
                             unsigned indent) {
  auto eval = module.lookupSymbol<func::FuncOp>(kForwardLossFunc);
  if (!eval)
    return module.emitError("the plan needs @train_step and @forward_loss");
  int64_t vocab = 0;
  // The whole vocabulary, also where a tp rank's table is a slice of it.
  eval.walk([&](EmbeddingOp op) {
    vocab = op.getVocabSize().value_or(
        cast<RankedTensorType>(op.getTable().getType()).getDimSize(0));
  });
  // A pipeline rank without the embedding: the model's, from kiln.pp.
  if (auto pp = module->getAttrOfType<DictionaryAttr>(KilnDialect::kPpAttrName))
    if (auto size = pp.getAs<IntegerAttr>("vocab_size"); size && !vocab)
      vocab = size.getInt();
  auto trainingAttr = module->getAttrOfType<DictionaryAttr>("kiln.training");
  if (!trainingAttr)
    return module.emitError("the plan needs the module attribute "
                            "'kiln.training'");
  // Integers and strings, copied as they are.
  json::Object training;
  for (NamedAttribute attr : trainingAttr) {
    if (auto i = dyn_cast<IntegerAttr>(attr.getValue()))
      training[attr.getName().getValue()] = i.getInt();
    else if (auto s = dyn_cast<StringAttr>(attr.getValue()))
      training[attr.getName().getValue()] = s.getValue().str();
    else
      return module.emitError("kiln.training: '")
             << attr.getName().getValue() << "' is not an integer or string";
  }
  PlanBuilder builder;
  if (failed(builder.addEntries(module)))
    return failure();
  // Pipeline parallel: the stages' position on the pp axis (kiln.pp).
  int64_t ppIndex = 0;
  if (auto pp = module->getAttrOfType<DictionaryAttr>(KilnDialect::kPpAttrName))
    if (auto rank = pp.getAs<IntegerAttr>("rank"))
      ppIndex = rank.getInt();
  json::OStream j(os, indent);
  return builder.write(j, vocab, getModuleMesh(module), ppIndex,
                       std::move(training));
}

FailureOr<std::string> kiln::emitPlan(ModuleOp module, unsigned indent) {
  std::string text;
  llvm::raw_string_ostream os(text);
  if (failed(emitPlan(module, os, indent)))
    return failure();
  return text;
}
