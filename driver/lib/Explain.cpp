//===- Explain.cpp - `kiln explain`: what a compiled step costs -----------===//
//
// --memory: everything from the compiled plan (the runtime allocates
// exactly its state and arena): persistent state by kind, the train_step
// arena and what is live at its fullest step, the bytes each collective
// moves. --fp8: the mark kiln-fp8-select left on every linear of one rank's
// train_step (the decisions kiln-fp8-linear then carries out).
//
//===----------------------------------------------------------------------===//

#include "kiln/Compiler/Pipeline.h"
#include "kiln/Driver/Driver.h"
#include "kiln/Driver/Session.h"
#include "kiln/Runtime/Plan.h"
#include "kiln/Transforms/Fp8Policy.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Pass/PassManager.h"

#include "llvm/Support/raw_ostream.h"

using namespace kiln;
using namespace kiln::runtime;

namespace {
std::string mib(int64_t bytes) {
  char text[64];
  std::snprintf(text, sizeof text, "%10.2f MiB  (%lld bytes)",
                bytes / (1024.0 * 1024.0), static_cast<long long>(bytes));
  return text;
}
} // namespace

namespace {
/// `command`'s model with FP8 on and its all-gather as asked.
bool loadWithFp8(const ExplainCommand &command, bool enableFsdpFloat8AllGather,
                 ModelSession &session) {
  std::vector<std::string> overrides = command.overrides;
  overrides.push_back("float8.enable=true");
  overrides.push_back(std::string("float8.enable_fsdp_float8_all_gather=") +
                      (enableFsdpFloat8AllGather ? "true" : "false"));
  return session.load(command.model, overrides, command.worldSize);
}

/// Bytes one rank receives per training step, measured on the compiled
/// step (`module`, through the fp8 phase): every all-gather's result, in
/// whatever dtype the group travels, and the FP8 all-gather's all-reduce of
/// weight amaxes.
int64_t gatheredBytes(mlir::ModuleOp module) {
  auto bytes = [](mlir::Value v) {
    auto type = llvm::cast<mlir::RankedTensorType>(v.getType());
    return type.getNumElements() * type.getElementTypeBitWidth() / 8;
  };
  auto ofWeightAmaxes = [](AllReduceStartOp r) {
    auto flat = r.getInput().getDefiningOp<FlattenOp>();
    return flat && llvm::all_of(flat.getParts(), [](mlir::Value part) {
             return part.getDefiningOp<ShardAmaxOp>() != nullptr;
           });
  };
  int64_t total = 0;
  module.lookupSymbol<mlir::func::FuncOp>(kTrainStepFunc)
      .walk([&](mlir::Operation *op) {
        if (auto g = llvm::dyn_cast<AllGatherStartOp>(op))
          total += bytes(g.getResult());
        else if (auto r = llvm::dyn_cast<AllReduceStartOp>(op);
                 r && ofWeightAmaxes(r))
          total += bytes(r.getResult());
      });
  return total;
}

/// The amax all-reduces over tp in the compiled step (`module`, through the
/// fp8 phase): one per FP8 cast of a tensor tp splits (Fp8Tp.h).
int64_t tpAmaxReduces(mlir::ModuleOp module) {
  int64_t count = 0;
  module.lookupSymbol<mlir::func::FuncOp>(kTrainStepFunc)
      .walk([&](AllReduceStartOp r) {
        count += r.getAxis() == MeshAxis::tp && r.getReduction() == "max" &&
                 r.getInput().getDefiningOp<AmaxOp>();
      });
  return count;
}

/// One forward linear of the step and kiln-fp8-select's mark on it.
struct LinearRow {
  std::string param;
  LinearRole role;
  int64_t m, n, k; // y [m, n] = x [m, k] W^T
  Fp8ChoiceAttr choice;
};

int explainFp8(ModelSession &session, const ExplainCommand &command) {
  // The marks kiln-fp8-select leaves (first in the shard phase) on the step
  // kiln-fp8-linear rewrites (after it), FP8 enabled.
  ModelSession enabled;
  if (!loadWithFp8(command, false, enabled))
    return 1;
  mlir::OwningOpRef<mlir::ModuleOp> module = enabled.compileThrough("shard");
  if (!module)
    return 1;
  std::vector<LinearRow> rows;
  bool unmarked = false;
  module->lookupSymbol<mlir::func::FuncOp>(kTrainStepFunc)
      .walk([&](LinearOp linear) {
        if (linear->hasAttr(kRecomputedAttr))
          return mlir::WalkResult::advance();
        mlir::FailureOr<Fp8ChoiceAttr> choice =
            getFp8Choice(linear, "kiln explain --fp8");
        if (mlir::failed(choice)) {
          unmarked = true;
          return mlir::WalkResult::interrupt();
        }
        auto x =
            llvm::cast<mlir::RankedTensorType>(linear.getInput().getType());
        auto w =
            llvm::cast<mlir::RankedTensorType>(linear.getWeight().getType());
        rows.push_back(
            {linear.getParam().str(), linear.getRole(),
             x.getNumElements() / std::max<int64_t>(1, x.getShape().back()),
             w.getDimSize(0), w.getDimSize(1), *choice});
        return mlir::WalkResult::advance();
      });
  if (unmarked)
    return 1;
  const Float8Config &f8 = session.config->float8;
  MeshShape mesh = session.config->runMesh();
  int64_t ranks = mesh.ranks();

  llvm::raw_ostream &os = llvm::outs();
  os << "kiln explain --fp8: " << session.source->name << ", recipe "
     << f8.recipe << ", train_step on " << ranks
     << (ranks == 1 ? " rank" : " ranks") << " (M = tokens per rank)";
  if (!f8.enable)
    os << "; float8.enable is false: what enabling it would do";
  os << "\n";
  if (mesh.tp > 1)
    os << "tensor parallel: mesh dp_shard " << mesh.dpShard << " x tp "
       << mesh.tp
       << "; N and K are tp position 0's slices (every position's are the "
          "same), and the dims % 16 rule is decided on them\n";
  size_t width = 4;
  for (const LinearRow &d : rows)
    width = std::max(width, d.param.size());
  auto pad = [&](std::string text, size_t n) {
    text.resize(std::max(n, text.size()), ' ');
    return text;
  };
  os << "  " << pad("linear", width) << "  role    " << pad("M x N x K", 24)
     << "dtype  reason\n";
  int64_t fp8Count = 0;
  for (const LinearRow &d : rows) {
    bool fp8 = d.choice.isFp8();
    std::string shape = std::to_string(d.m) + " x " + std::to_string(d.n) +
                        " x " + std::to_string(d.k);
    os << "  " << pad(d.param, width) << "  "
       << pad(stringifyLinearRole(d.role).str(), 8) << pad(shape, 24)
       << (fp8 ? "FP8  " : "BF16 ") << "  "
       << (fp8 ? std::string("-") : d.choice.describe())
       << (mesh.tp > 1 && d.choice.getReason() == Fp8Reason::not_divisible_by_16
               ? " at tp " + std::to_string(mesh.tp)
               : std::string())
       << "\n";
    fp8Count += fp8;
  }
  os << "FP8 linears: " << fp8Count << " of " << rows.size() << "\n";

  // The same module on through the fp8 phase: the bytes of the step these
  // decisions give.
  mlir::PassManager pm(module->getContext());
  buildFp8Pipeline(pm);
  if (mlir::failed(pm.run(*module)))
    return 1;
  if (mesh.tp > 1)
    os << "amax all-reduces (max) over tp per step: " << tpAmaxReduces(*module)
       << " (each FP8 weight slice, o and w2's inputs, the output gradients "
          "of q, k, v, w1 and w3, and each sequence shard gathered as e4m3 "
          "codes: the tensors tp splits)\n";
  int64_t without = gatheredBytes(*module);
  os << "all-gather per step and rank: " << mib(without)
     << " received without FP8 all-gather\n";
  if (f8.recipe != stringifyFp8Recipe(Fp8Recipe::tensorwise)) {
    os << "                              (the FP8 all-gather needs recipe "
          "tensorwise)\n";
    return 0;
  }
  ModelSession withAllGather;
  if (!loadWithFp8(command, true, withAllGather))
    return 1;
  mlir::OwningOpRef<mlir::ModuleOp> withModule =
      withAllGather.compileThrough("fp8");
  if (!withModule)
    return 1;
  os << "                              " << mib(gatheredBytes(*withModule))
     << " with it (e4m3 weights, one amax all-reduce)\n";
  return 0;
}
} // namespace

namespace {
/// The --memory report of one rank's plan; returns its predicted peak.
int64_t explainMemory(const ModelSession &session, const Plan &plan,
                      llvm::raw_ostream &os) {
  int64_t params = 0, moments = 0;
  for (const PlanValue &v : plan.values)
    if (v.kind == PlanValue::State)
      (isOptimizerState(v.name) ? moments : params) += v.bytes();
  const PlanEntry &step = *plan.entry("train_step");
  // Bytes per mesh axis, in plan::Axis order: dp_shard, tp, pp.
  struct Moved {
    int64_t gathered = 0, scattered = 0, reduced = 0, sent = 0;
  } moved[3];
  for (const PlanStep &s : step.steps) {
    if (s.op == "pipe_send_start") {
      moved[int(plan::Axis::Pp)].sent += plan.values[s.operands[0]].bytes();
      continue;
    }
    if (!s.attrs.count("axis"))
      continue;
    Moved &m = moved[int(*plan::parseAxis(s.str("axis")))];
    if (s.op == "all_gather_start")
      m.gathered += plan.values[s.results[0]].bytes();
    else if (s.op == "reduce_scatter_start")
      m.scattered += plan.values[s.operands[0]].bytes();
    else if (s.op == "all_reduce_start")
      m.reduced += plan.values[s.operands[0]].bytes();
  }

  os << "kiln explain --memory: " << session.source->name << ", train_step on "
     << plan.ranks << (plan.ranks == 1 ? " rank" : " ranks");
  // Every tp position holds the same bytes: its slices have one shape.
  if (plan.mesh.pp > 1)
    os << " (mesh pp " << plan.mesh.pp << " x dp_shard " << plan.mesh.dpShard
       << " x tp " << plan.mesh.tp << "; pp position " << plan.ppIndex << ")";
  else if (plan.mesh.tp > 1)
    os << " (mesh dp_shard " << plan.mesh.dpShard << " x tp " << plan.mesh.tp
       << ")";
  os << " (bytes per rank)\n";
  os << "  parameters (f32 master weights)    " << mib(params) << "\n";
  os << "  optimizer state (AdamW moments)    " << mib(moments) << "\n";
  os << "  step arena (peak, all temporaries) " << mib(step.arenaBytes) << "\n";
  const LiveAtPeak &live = step.liveAtPeak;
  os << "    live at its fullest step " << live.step << ":\n";
  os << "      parameter copies (cast/gathered) " << mib(live.parameterCopies)
     << "\n";
  os << "      gradients                      " << mib(live.gradients) << "\n";
  os << "      activations and temporaries    " << mib(live.activations)
     << "\n";
  int64_t peak = params + moments + step.arenaBytes;
  os << "  predicted peak (state + arena)     " << mib(peak) << "\n";
  bool several = plan.mesh.tp > 1 || plan.mesh.pp > 1;
  for (plan::Axis axis : {plan::Axis::DpShard, plan::Axis::Tp}) {
    if (plan.mesh.axisSize(axis) == 1 && axis != plan::Axis::DpShard)
      continue;
    const Moved &m = moved[int(axis)];
    os << "collectives per step"
       << (several ? std::string(" over ") + plan::axisName(axis) : "")
       << ": all-gather " << mib(m.gathered) << " received, reduce-scatter "
       << mib(m.scattered) << " sent, all-reduce " << m.reduced << " bytes\n";
  }
  if (plan.mesh.pp > 1)
    os << "pipeline transfers per step: "
       << mib(moved[int(plan::Axis::Pp)].sent) << " sent, all-reduce over pp "
       << moved[int(plan::Axis::Pp)].reduced << " bytes\n";
  return peak;
}
} // namespace

int kiln::runExplain(const ExplainCommand &command) {
  if (!command.memory && !command.fp8 && !command.schedule && !command.perf)
    return commandError(
        "kiln explain needs --memory, --fp8, --schedule or --perf");
  if (command.perf)
    return explainPerf(command);
  ModelSession session;
  if (!session.load(command.model, command.overrides, command.worldSize))
    return 1;
  if (command.fp8) {
    if (int rc = explainFp8(session, command))
      return rc;
  }
  if (command.schedule)
    if (int rc = explainSchedule(command))
      return rc;
  if (!command.memory)
    return 0;
  // Under pipeline parallel each pp position holds other stages: one
  // report per position, and the largest.
  MeshShape mesh = session.config->runMesh();
  int64_t worst = 0, worstAt = 0;
  for (int64_t p = 0; p < mesh.pp; ++p) {
    ModelSession stage;
    if (!stage.loadPipelinePosition(command.model, command.overrides,
                                    command.worldSize, mesh, p))
      return 1;
    bool hit = false;
    std::optional<Plan> plan = stage.cachedRuntimePlan(command.overrides, hit);
    if (!plan)
      return 1;
    int64_t peak = explainMemory(stage, *plan, llvm::outs());
    if (peak > worst)
      std::tie(worst, worstAt) = std::make_pair(peak, p);
  }
  if (mesh.pp > 1)
    llvm::outs() << "largest predicted peak over the ranks: " << mib(worst)
                 << " (pp position " << worstAt << ")\n";
  return 0;
}
